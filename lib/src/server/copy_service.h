// Copies between nodes over UCX (docs/scale-out.md): each server's UCX worker, whose address its
// heartbeat publishes (ucx_address), serves reads of its tensors to other servers and fetches
// other servers' tensors for creates with copy_of. UCX picks the transport (shared memory on
// one host, TCP, RDMA where present; UCX_TLS chooses).
//
// The bytes go from the source's memory to the destination's without a copy of their own for
// host tensors (their shared-memory objects are mapped for the transfer), and through one host
// buffer on each side for GPU tensors.
//
// One thread runs every UCX call: progress, sends and receives. Other threads post jobs to it and
// wait. Two active messages: READ {req, ctime, name} from the fetching server, sent with a reply
// endpoint, answered with DATA {req, code, message} and the bytes, which UCX sends eagerly or by
// rendezvous as their size asks. The bytes travel from and to host buffers: GPU memory is staged
// through them by the device's worker (NodeCopier), which works with any UCX, CUDA-aware or not.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "memcuda/status.h"

namespace mcd {

// An uninitialised host buffer (a tensor's bytes: no zeroing of gigabytes for nothing).
struct HostBuffer {
  std::unique_ptr<char[]> data;
  uint64_t size = 0;
  static HostBuffer Make(uint64_t size) {
    return HostBuffer{std::unique_ptr<char[]>(new char[size == 0 ? 1 : size]), size};
  }
};

class CopyService {
 public:
  // A read another server asked for, waiting for the serving loop (NodeCopier::ServeReads).
  struct Read {
    uint64_t req = 0;
    int64_t ctime_ms = 0;
    std::string name;
    void* reply_ep = nullptr;  // ucp_ep_h of the asking server
  };

  // The service, or kUnsupported when this build has no UCX, or UCX cannot start. `wake` is
  // called (on the service's thread) when a read arrives, to wake the serving loop.
  static Result<std::unique_ptr<CopyService>> Start(std::function<void()> wake);
  virtual ~CopyService() = default;

  // The UCX worker's address, hex: the heartbeat's ucx_address.
  virtual const std::string& address_hex() const = 0;
  virtual std::vector<Read> TakeReads() = 0;
  // Sends `bytes` at `data` back for `read`, or the error that stops it (no bytes then).
  // `release` runs, on the service's thread, once UCX no longer reads `data`.
  virtual void Answer(const Read& read, const Status& status, const void* data, uint64_t bytes,
                      std::function<void()> release) = 0;
  // Receives into `into` the `bytes` of tensor `name`, created at `ctime_ms`, of the server at
  // `address_hex`, or the error that server answered; kTimeout after `timeout_ms`, after which
  // nothing is written to `into` any more.
  virtual Status Fetch(const std::string& address_hex, const std::string& name, int64_t ctime_ms,
                       void* into, uint64_t bytes, int timeout_ms) = 0;
};

}  // namespace mcd
