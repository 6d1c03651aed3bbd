// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Passing a memory pool's file descriptor to other processes: over a Unix socket (SCM_RIGHTS),
// with the peer's credentials checked (SO_PEERCRED), or copied straight out of the owning process
// (pidfd_getfd) where the kernel lets the caller. Private to libmemcuda.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/process.h"
#include "ipc/unix_socket.h"
#include "memcuda/status.h"
#include "memcuda/unique_fd.h"

namespace mcd {

// Serves `fd_for(device)` (a descriptor it keeps owning; sent as a duplicate) to allowed peers,
// on a thread of its own. One request per connection: the client sends an int32 device, the
// server answers an int32 error code and, when it is 0, the descriptor. Up to kMaxWaiting
// connections wait for their request at once, each at most kRequestWaitMs.
class FdServer {
 public:
  using FdFor = std::function<int(int device)>;  // -1 when the device has no pool
  static constexpr size_t kMaxWaiting = 128;
  static constexpr int64_t kRequestWaitMs = 2000;
  static Result<std::unique_ptr<FdServer>> Start(const std::string& path, PeerPolicy policy,
                                                 FdFor fd_for);
  ~FdServer();  // stops the thread and removes the socket
  FdServer(const FdServer&) = delete;
  FdServer& operator=(const FdServer&) = delete;
  const std::string& path() const { return path_; }

 private:
  FdServer() = default;
  void Loop();
  void Serve(int conn);

  std::string path_;
  PeerPolicy policy_;
  FdFor fd_for_;
  UniqueFd listen_fd_;
  UniqueFd wake_read_, wake_write_;  // a byte on the pipe stops the thread
  std::thread thread_;
};

// Fetches the descriptor for `device` from the FdServer at `path`, once the socket's peer is
// found to be process `server_pid` of a trusted user (CheckServerPeer). kPermissionDenied when
// the server refuses this process or is not trusted, kUnavailable when nobody listens.
Result<UniqueFd> FetchFd(const std::string& path, int device, int timeout_ms, int64_t server_pid);

// A process pinned by a pidfd and checked once to be the one `who` names, so that copying its
// descriptors (pidfd_getfd) later costs that one system call: a client pins its server when it
// reads the heartbeat, off the path of its first get. A pid the kernel reuses after the process
// exits never reaches another process through the pin.
class PinnedProcess {
 public:
  // kInvalidArgument without a pid or an identity, kNotFound when `pid` is gone or is not the
  // process `who` names (another PID namespace, say), kUnavailable on a kernel before 5.3.
  static Result<std::unique_ptr<PinnedProcess>> Open(int64_t pid, const ProcessIdentity& who);
  PinnedProcess(const PinnedProcess&) = delete;
  PinnedProcess& operator=(const PinnedProcess&) = delete;
  int64_t pid() const { return pid_; }
  // Whether the process has exited (a zombie not reaped yet included): one poll of its pidfd,
  // waiting up to `wait_ms` for the exit.
  bool Exited(int wait_ms = 0) const;

  // Copies descriptor `fd` of the process into this one, close-on-exec, without that process
  // taking part: it need not be scheduled, so no wake-up of a sleeping thread is paid. Only
  // where the kernel would let this process trace it (the same user, no stricter Yama
  // ptrace_scope, no LSM veto). kNotFound when the process has
  // exited, kPermissionDenied when the kernel refuses, kUnavailable otherwise (a kernel before
  // 5.6, `fd` not open there).
  Result<UniqueFd> CopyFd(int fd) const;

 private:
  PinnedProcess(UniqueFd pidfd, int64_t pid) : pidfd_(std::move(pidfd)), pid_(pid) {}
  UniqueFd pidfd_;
  int64_t pid_;
};

}  // namespace mcd
