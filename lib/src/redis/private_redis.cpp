// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/private_redis.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/process.h"
#include "common/runtime_dir.h"

namespace mcd {
namespace {

// The process that runs a private Redis, as "<pid> <start time>" in a file beside its socket:
// pid and start time name a process even when the pid is reused.
void WriteOwner(const std::string& path) {
  std::ofstream(path, std::ios::trunc) << getpid() << " " << ProcessStartTime(getpid()) << "\n";
}

bool OwnerAlive(const std::string& path) {
  std::ifstream in(path);
  int64_t pid = 0;
  uint64_t start = 0;
  return static_cast<bool>(in >> pid >> start) && pid != getpid() && ProcessAlive(pid, start);
}

}  // namespace

Result<std::unique_ptr<PrivateRedis>> PrivateRedis::Start(const std::string& redis_server,
                                                          const std::string& folder,
                                                          bool stop_with_caller) {
  std::string dir = folder;
  if (dir.empty()) {
    MCD_ASSIGN_OR_RETURN(dir, OwnRuntimeDir());
  } else if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status(ErrorCode::kIoError, "mkdir " + dir + ": " + std::strerror(errno));
  }
  std::string socket = dir + "/redis.sock";
  RedisUrl url;
  url.is_unix = true;
  url.path = socket;
  std::unique_ptr<PrivateRedis> out(new PrivateRedis());
  out->url_ = url;
  out->owner_file_ = dir + "/redis.owner";
  out->dir_ = dir;
  out->stop_with_caller_ = stop_with_caller;
  // One already answering there is reused: the heartbeat still keeps a second live server of a
  // node away. One whose owner is gone (a killed mcd-serve: this Redis outlives it on purpose,
  // so that the next server finds and cleans what it left) is adopted, and stops with this
  // caller; one whose owner runs stays that one's.
  if (auto running = RedisConnection::Connect(url); running.ok()) {
    auto info = running.value()->Command({"INFO", "server"});
    int64_t pid = info.ok() ? std::atoll(InfoField(info->str, "process_id").c_str()) : 0;
    // The pid INFO gives is only believed, and later signalled, when the kernel says it is the
    // process at the other end of the socket, running as this user: a Redis that another
    // user started could otherwise name any process of this user's.
    ucred peer{};
    socklen_t len = sizeof(peer);
    bool ours = getsockopt(running.value()->fd(), SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 &&
                peer.pid == pid && peer.uid == geteuid();
    if (pid > 0 && ours && !OwnerAlive(out->owner_file_)) {
      WriteOwner(out->owner_file_);
      out->pid_ = static_cast<int>(pid);
      out->adopted_ = true;
      out->adopted_start_ = ProcessStartTime(pid);
      out->redis_server_ = redis_server;  // restarted, should it die
    }
    return out;
  }
  out->redis_server_ = redis_server;
  MCD_RETURN_IF_ERROR(out->Spawn());
  return out;
}

Status PrivateRedis::Spawn() {
  std::string socket = url_.path;
  unlink(socket.c_str());
  std::string log_file = dir_ + "/redis.log";
  pid_t caller = getpid();
  pid_t pid = fork();
  if (pid < 0) return Status(ErrorCode::kInternal, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    if (stop_with_caller_) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // kept across exec
      if (getppid() != caller) _exit(1);
    }
    // exec keeps the signal mask and ignored signals: give redis-server a clean slate, or it
    // would never see the SIGTERM that stops it.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    setsid();  // not killed by the terminal's Ctrl-C before mcd-serve has cleaned up
    execlp(redis_server_.c_str(), redis_server_.c_str(), "--port", "0", "--unixsocket",
           socket.c_str(), "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir",
           dir_.c_str(), "--logfile", log_file.c_str(), "--daemonize", "no",
           static_cast<char*>(nullptr));
    _exit(127);
  }
  pid_ = pid;
  adopted_ = false;
  WriteOwner(owner_file_);
  for (int i = 0; i < 100; ++i) {
    if (RedisConnection::Connect(url_).ok()) return Status::Ok();
    int wstatus = 0;
    if (waitpid(pid, &wstatus, WNOHANG) == pid) {
      pid_ = -1;
      return Status(ErrorCode::kUnavailable, "cannot start " + redis_server_ +
                                                 " (is redis-server installed?); see " + log_file);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status(ErrorCode::kTimeout,
                redis_server_ + " did not answer on " + socket + " within 5 s");
}

Result<bool> PrivateRedis::KeepRunning() {
  if (pid_ <= 0 || redis_server_.empty()) return false;  // another's, used as it is
  int wstatus = 0;
  bool gone = adopted_ ? !ProcessAlive(pid_, adopted_start_)
                       : waitpid(pid_, &wstatus, WNOHANG) == pid_;  // reaped: no zombie
  if (!gone) return false;
  std::string how = adopted_ ? "exited"
                    : WIFSIGNALED(wstatus)
                        ? "was killed by signal " + std::to_string(WTERMSIG(wstatus))
                        : "exited with status " + std::to_string(WEXITSTATUS(wstatus));
  pid_ = -1;
  // Started again at once; a start that fails counts as one more death.
  for (;;) {
    auto now = std::chrono::steady_clock::now();
    while (!deaths_.empty() && now - deaths_.front() > std::chrono::minutes(1)) deaths_.pop_front();
    deaths_.push_back(now);
    if (deaths_.size() > kMaxRestartsPerMinute) {
      return Status(ErrorCode::kUnavailable,
                    "the private Redis " + how + ", its " + std::to_string(deaths_.size()) +
                        "th death within a minute: not restarting it (see " + dir_ + "/redis.log)");
    }
    Status spawned = Spawn();
    if (spawned.ok()) break;
    how = "could not be started again (" + spawned.message() + ")";
  }
  return true;
}

PrivateRedis::~PrivateRedis() {
  if (pid_ <= 0) return;
  uint64_t started = ProcessStartTime(pid_);
  kill(pid_, SIGTERM);
  if (adopted_) {
    // Not a child: wait for it to go (Redis stops at once on SIGTERM), 5 s at most.
    for (int i = 0; i < 250 && ProcessAlive(pid_, started); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } else {
    int wstatus = 0;
    waitpid(pid_, &wstatus, 0);
  }
  unlink(url_.path.c_str());
  unlink(owner_file_.c_str());
}

}  // namespace mcd
