#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "memcuda/client.h"
#include "memcuda/server.h"

namespace mcd {

Result<std::unique_ptr<PrivateRedis>> PrivateRedis::Start(const std::string& redis_server) {
  std::string dir = RuntimeDir();
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status(ErrorCode::kIoError, "mkdir " + dir + ": " + std::strerror(errno));
  }
  std::string socket = PrivateRedisSocketPath();
  RedisUrl url;
  url.is_unix = true;
  url.path = socket;
  // A private server already answering there (another mcd-serve of this user) is reused.
  if (RedisConnection::Connect(url).ok()) {
    return Status(ErrorCode::kAlreadyExists,
                  "a private Redis already answers on " + socket + "; use --redis-url unix://" + socket);
  }
  unlink(socket.c_str());
  std::string log_file = dir + "/redis.log";
  pid_t pid = fork();
  if (pid < 0) return Status(ErrorCode::kInternal, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    setsid();  // not killed by the terminal's Ctrl-C before mcd-serve has cleaned up
    execlp(redis_server.c_str(), redis_server.c_str(), "--port", "0", "--unixsocket",
           socket.c_str(), "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
           "--dir", dir.c_str(), "--logfile", log_file.c_str(), "--daemonize", "no",
           static_cast<char*>(nullptr));
    _exit(127);
  }
  std::unique_ptr<PrivateRedis> out(new PrivateRedis());
  out->pid_ = pid;
  out->url_ = url;
  for (int i = 0; i < 100; ++i) {
    if (RedisConnection::Connect(url).ok()) return out;
    int wstatus = 0;
    if (waitpid(pid, &wstatus, WNOHANG) == pid) {
      out->pid_ = -1;
      return Status(ErrorCode::kUnavailable, "cannot start " + redis_server +
                                                 " (is redis-server installed?); see " + log_file);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status(ErrorCode::kTimeout, redis_server + " did not answer on " + socket + " within 5 s");
}

PrivateRedis::~PrivateRedis() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int wstatus = 0;
    waitpid(pid_, &wstatus, 0);
    unlink(url_.path.c_str());
  }
}

}  // namespace mcd
