// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Process-wide: the mappings this process has opened, and the worker that runs this process's
// CUDA calls for each device. Private to libmemcuda's client.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "alloc/allocator.h"
#include "common/process.h"
#include "memcuda/gpu_worker.h"
#include "memcuda/protocol.h"
#include "memcuda/status.h"

namespace mcd {

class PinnedProcess;

// Where this process gets a server's pool descriptor for one device, as the heartbeat says:
// copied straight out of the server process where the kernel allows it (no exchange with a server
// thread that may be asleep), otherwise asked of the pool socket.
struct PoolSource {
  std::string socket;                           // pool_socket
  std::shared_ptr<const PinnedProcess> server;  // pid, pid_ino, pid_start; null: the socket only
  int fd = -1;                                  // the device's item of pool_fd
  int64_t server_pid = 0;                       // the heartbeat's pid: the socket's peer
};

// Process-wide: one worker per device for this process's CUDA calls, and the mappings it has
// opened: each tensor once per process, however often it is got, and each GPU allocation once
// however many of its tensors are open (tensors carved from one slab share it).
class MappingRegistry {
 public:
  static MappingRegistry& Get() {
    static MappingRegistry registry;
    return registry;
  }

  GpuWorker& Worker(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& worker = workers_[device];
    if (!worker) worker = std::make_unique<GpuWorker>(device);
    return *worker;
  }

  // Resolves where the pool of a server instance on a device comes from (its heartbeat).
  using SourceOf = std::function<Result<PoolSource>(const std::string& owner, int device)>;

  Result<void*> Open(const TensorRecord& r, const SourceOf& source_of);

  // Runs an open or close of a mapping: on the device's worker, where every CUDA call of this
  // process for that device runs; on the calling thread for host memory, whose mapping is plain
  // system calls (the hop to a worker would cost more than the mmap).
  Status RunMappingJob(int device, const std::function<Status(DeviceContext&)>& job) {
    if (device != kHostDevice) return Worker(device).Call(job);
    DeviceContext host(kHostDevice);
    return job(host);
  }

  // Starts importing the pool of server instance `owner` on `device` on that device's worker,
  // without waiting: a Get that is about to need it overlaps the import with its Redis round
  // trip (the Open job queues behind it on the same worker). Then imports and frees `primer`
  // (the heartbeat's pool_primer, when the server publishes one): a process's first pointer
  // import costs ~50-70 us more than later ones (docs/design.md, "Fast paths and knobs":
  // Primers), paid there too.
  // Errors are left to the Open. Only where this process has the device's CUDA context up
  // already: a process that maps host tensors only must not get a CUDA context from this.
  void PrefetchPool(const std::string& owner, int device, PoolSource source, std::string primer);

  // Opens, on `device`'s worker and without waiting, the small allocation that the server
  // publishes for this (the heartbeat's ipc_primer), and closes it again. A process's first
  // cudaIpcOpenMemHandle costs ~100-240 us more than the ones after it (docs/design.md, "Fast
  // paths and knobs": Primers): a Get that is about to open a cuda_ipc tensor overlaps that with
  // its Redis round trip (the Open job queues behind it on the same worker). Once per device and
  // process; errors are ignored (the tensor's own open reports what is wrong). Only where the
  // device's CUDA context is up already, as for PrefetchPool.
  void PrefetchIpc(int device, std::string handle);

  // Drops one open of the tensor; unmaps its allocation when no tensor of this process that
  // lies in it is open any more. Not found is fine (not opened here).
  Status Close(const TensorRecord& r);

  // Finds the record of an opened tensor by name (for Release without a record at hand), and,
  // given `at`, only one mapped at that address: two tensors of one name may both be open here
  // (a member of a set still held, freed since, and a new tensor of its name).
  std::optional<TensorRecord> FindByName(const std::string& name, const void* at = nullptr);

  ~MappingRegistry();

 private:
  struct Mapping {
    void* ptr = nullptr;
    int opens = 0;
    TensorRecord record;
  };
  // A GPU allocation this process has mapped, and how many of its open tensors lie in it.
  struct Base {
    int tensors = 0;
    TensorRecord opener;  // the tensor whose open mapped it; closing that unmaps it
    void* opener_ptr = nullptr;
    uint64_t allocation_bytes = 0;  // from the allocation's start (OpenMapping)
  };
  // A tensor: carved tensors share their slab's handle and differ in offset.
  static std::string Key(const TensorRecord& r) {
    // With its size: a mapping is handed again only for the bytes it was opened (and checked) for.
    return r.owner + "/" + IpcKindName(r.ipc_kind) + "/" + std::to_string(r.offset) + "/" +
           std::to_string(r.bytes) + "/" + r.ipc_handle;
  }
  // The allocation a tensor lies in, for the kinds whose open maps all of it (the driver maps a
  // whole cuda_ipc allocation or pool pointer; a host tensor maps only its own bytes): "" else.
  static std::string BaseKey(const TensorRecord& r) {
    if (r.ipc_kind != IpcKind::kCudaIpc && r.ipc_kind != IpcKind::kCudaMempool) return "";
    return r.owner + "/" + IpcKindName(r.ipc_kind) + "/" + std::to_string(r.device) + "/" +
           r.ipc_handle;
  }

  // The pointer of a tensor already open here (one more open), or of one in an allocation
  // already mapped here (no driver call, no hop to the worker); nullopt when neither.
  std::optional<void*> ReuseLocked(const std::string& key, const std::string& base_key,
                                   const TensorRecord& r);
  static std::string PoolKey(const std::string& owner, int device) {
    return owner + "/" + std::to_string(device);
  }

  std::optional<cudaMemPool_t> FindPool(const std::string& owner, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(PoolKey(owner, device));
    if (it == pools_.end()) return std::nullopt;
    return it->second;
  }

  // Worker thread of `device` only.
  Result<cudaMemPool_t> ImportPoolOf(DeviceContext& ctx, const std::string& owner, int device,
                                     const PoolSource& source);

  std::mutex mutex_;
  std::map<int, std::unique_ptr<GpuWorker>> workers_;
  std::map<std::string, Mapping> maps_;
  std::map<std::string, Base> bases_;           // by BaseKey
  std::map<std::string, cudaMemPool_t> pools_;  // imported pools by "<owner>/<device>"
  std::set<std::string> prefetching_;           // pool imports posted and not yet run
  std::set<int> primed_;                        // devices whose PrefetchIpc was posted
};

}  // namespace mcd
