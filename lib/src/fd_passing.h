// Passing a memory pool's file descriptor to other processes over a Unix socket (SCM_RIGHTS),
// with the peer's credentials checked (SO_PEERCRED). Private to libmemcuda.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "memcuda/status.h"
#include "unix_socket.h"

namespace mcd {

// Serves `fd_for(device)` (a descriptor it keeps owning; sent as a duplicate) to allowed peers.
// One request per connection: the client sends an int32 device, the server answers an int32
// error code and, when it is 0, the descriptor.
class FdServer {
 public:
  using FdFor = std::function<int(int device)>;  // -1 when the device has no pool
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
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
};

// Fetches the descriptor for `device` from the FdServer at `path`. The caller owns the result.
// kPermissionDenied when the server refuses this process, kUnavailable when nobody listens.
Result<int> FetchFd(const std::string& path, int device, int timeout_ms);

}  // namespace mcd
