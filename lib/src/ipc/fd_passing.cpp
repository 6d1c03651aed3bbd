// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "ipc/fd_passing.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "common/process.h"
#include "common/trust.h"

namespace mcd {
namespace {

Status Errno(ErrorCode code, const std::string& what) {
  return Status(code, what + ": " + std::strerror(errno));
}

}  // namespace

Result<std::unique_ptr<FdServer>> FdServer::Start(const std::string& path, PeerPolicy policy,
                                                  FdFor fd_for) {
  std::unique_ptr<FdServer> server(new FdServer());
  server->path_ = path;
  server->policy_ = policy;
  server->fd_for_ = std::move(fd_for);
  MCD_ASSIGN_OR_RETURN(server->listen_fd_, ListenUnix(path, policy, 64));
  int flags = fcntl(server->listen_fd_.get(), F_GETFL);
  fcntl(server->listen_fd_.get(), F_SETFL, flags | O_NONBLOCK);  // the accept loop never waits
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) return Errno(ErrorCode::kIoError, "pipe");
  server->wake_read_.reset(wake[0]);
  server->wake_write_.reset(wake[1]);
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

FdServer::~FdServer() {
  if (wake_write_) {
    char byte = 0;
    (void)!write(wake_write_.get(), &byte, 1);
  }
  if (thread_.joinable()) thread_.join();
  if (!path_.empty()) unlink(path_.c_str());
}

void FdServer::Loop() {
  // Peers are served side by side: a connection waits in `waiting` for its 4-byte request, so a
  // peer that connects and says nothing delays nobody, and is dropped after kRequestWaitMs.
  struct Waiting {
    UniqueFd fd;
    int64_t since_ms;
  };
  std::vector<Waiting> waiting;
  std::vector<pollfd> fds;
  for (;;) {
    fds.assign({{listen_fd_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}});
    for (const Waiting& w : waiting) fds.push_back(pollfd{w.fd.get(), POLLIN, 0});
    assert(fds.size() == waiting.size() + 2 && waiting.size() <= kMaxWaiting);
    int timeout = waiting.empty() ? -1 : 100;
    if (poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    int64_t now = SteadyMs();
    std::vector<Waiting> still;
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (fds[i + 2].revents != 0) {
        Serve(waiting[i].fd.get());
      } else if (now - waiting[i].since_ms < kRequestWaitMs) {
        still.push_back(std::move(waiting[i]));
      }
    }
    waiting = std::move(still);
    if ((fds[0].revents & POLLIN) == 0) continue;
    for (;;) {
      UniqueFd conn(accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!conn) break;
      // Past the bound, a peer is turned away at once, told why, rather than let idle
      // connections use up the server's descriptors.
      if (waiting.size() >= kMaxWaiting) {
        int32_t busy = static_cast<int32_t>(ErrorCode::kUnavailable);
        (void)send(conn.get(), &busy, sizeof(busy), MSG_NOSIGNAL | MSG_DONTWAIT);
        continue;
      }
      waiting.push_back(Waiting{std::move(conn), now});
    }
  }
}

void FdServer::Serve(int conn) {
  int32_t device = 0;
  // Four bytes, sent in one write by FetchFd: here when poll said the socket is readable.
  if (recv(conn, &device, sizeof(device), MSG_WAITALL) != static_cast<ssize_t>(sizeof(device)))
    return;
  std::string who;
  int32_t code = 0;
  int fd = -1;
  if (!PeerAllowed(conn, policy_, who)) {
    code = static_cast<int32_t>(ErrorCode::kPermissionDenied);
    Log(LogLevel::kWarn, "pool socket: refused " + who + " (not the server's user or group)");
  } else if ((fd = fd_for_(device)) < 0) {
    code = static_cast<int32_t>(ErrorCode::kNoDevice);
  }
  assert(code != 0 || fd >= 0);  // an answer of 0 carries the descriptor
  msghdr msg{};
  iovec iov{&code, sizeof(code)};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (code == 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  }
  (void)sendmsg(conn, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

Result<UniqueFd> FetchFd(const std::string& path, int device, int timeout_ms, int64_t server_pid) {
  MCD_ASSIGN_OR_RETURN(UniqueFd conn, ConnectUnix(path, timeout_ms, "pool socket"));
  MCD_RETURN_IF_ERROR(CheckServerPeer(conn.get(), server_pid, "the pool socket " + path));
  int32_t request = device;
  if (send(conn.get(), &request, sizeof(request), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(sizeof(request)) &&
      errno != EPIPE && errno != ECONNRESET) {
    return Errno(ErrorCode::kIoError, "send to pool socket");
  }
  // A send the server closed the connection on is read on all the same: a server that turns
  // peers away (FdServer::kMaxWaiting) answers and closes as soon as it accepts, which can be
  // before the request is sent, and its answer says why.
  int32_t code = -1;
  msghdr msg{};
  iovec iov{&code, sizeof(code)};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got = recvmsg(conn.get(), &msg, MSG_CMSG_CLOEXEC);
  if (got != static_cast<ssize_t>(sizeof(code))) {
    return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
               ? Status(ErrorCode::kTimeout, "pool socket " + path + " did not answer")
               : Status(ErrorCode::kIoError, "pool socket " + path + " closed the connection");
  }
  if (code != 0) {
    std::string why =
        code == static_cast<int32_t>(ErrorCode::kPermissionDenied)
            ? "the pool socket " + path + " refuses this process (not the server's user or group)"
        : code == static_cast<int32_t>(ErrorCode::kUnavailable)
            ? "the pool socket " + path + " has " + std::to_string(FdServer::kMaxWaiting) +
                  " peers waiting already: try again"
            : "the server has no pool for device " + std::to_string(device);
    return Status(static_cast<ErrorCode>(code), why);
  }
  UniqueFd fd;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    int received = -1;
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      std::memcpy(&received, CMSG_DATA(c), sizeof(int));
    if (received >= 0) fd.reset(received);
  }
  if (!fd) return Status(ErrorCode::kIoError, "pool socket " + path + " sent no descriptor");
  return fd;
}

Result<std::unique_ptr<PinnedProcess>> PinnedProcess::Open(int64_t pid,
                                                           const ProcessIdentity& who) {
  if (pid <= 0 || (who.pidfd_ino == 0 && who.start_time == 0)) {
    return Status(ErrorCode::kInvalidArgument, "no process to pin");
  }
  UniqueFd pidfd(PidfdOpen(pid));
  if (!pidfd) {
    return errno == ESRCH
               ? Status(ErrorCode::kNotFound, "process " + std::to_string(pid) + " is gone")
               : Errno(ErrorCode::kUnavailable, "pidfd_open of process " + std::to_string(pid));
  }
  // The pidfd's inode costs one fstat where the kernel has pidfs; reading /proc/<pid>/stat took
  // 30-70 us in a fresh process on the H100 hosts. The check follows the open, which pins the
  // process: a pid reused before the open fails it, one reused after never reaches the pidfd.
  struct stat st {};
  bool same = who.pidfd_ino != 0 ? fstat(pidfd.get(), &st) == 0 &&
                                       static_cast<uint64_t>(st.st_ino) == who.pidfd_ino
                                 : ProcessStartTime(pid) == who.start_time;
  if (!same) {
    return Status(ErrorCode::kNotFound, "process " + std::to_string(pid) + " is not the one named");
  }
  return std::unique_ptr<PinnedProcess>(new PinnedProcess(std::move(pidfd), pid));
}

bool PinnedProcess::Exited(int wait_ms) const {
  pollfd p{pidfd_.get(), POLLIN, 0};
  int ready;
  do {
    ready = poll(&p, 1, wait_ms);
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

Result<UniqueFd> PinnedProcess::CopyFd(int fd) const {
  if (fd < 0) return Status(ErrorCode::kInvalidArgument, "no descriptor to copy");
  // A raw system call, as PidfdOpen. The copy is close-on-exec.
  UniqueFd copy(static_cast<int>(syscall(SYS_pidfd_getfd, pidfd_.get(), fd, 0)));
  if (copy) return copy;
  int error = errno;
  if (error == ESRCH)
    return Status(ErrorCode::kNotFound, "process " + std::to_string(pid_) + " has exited");
  return Status(error == EPERM ? ErrorCode::kPermissionDenied : ErrorCode::kUnavailable,
                "copying descriptor " + std::to_string(fd) + " of process " + std::to_string(pid_) +
                    ": " + std::strerror(error));
}

}  // namespace mcd
