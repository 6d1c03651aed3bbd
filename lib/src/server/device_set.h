// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The devices a server serves: host memory always, GPUs as asked, each with the GpuWorker that
// runs every CUDA call for it and the allocator stack chosen for it (ready stock over slabs
// over cudaMalloc, or ready stock over an IPC pool). Also the pool socket that hands the pools'
// descriptors to clients. Main thread of the server, but for the byte counts and the heartbeat
// texts, which the heartbeat thread reads.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "ipc/fd_passing.h"
#include "memcuda/gpu_worker.h"
#include "server/tensor_table.h"

namespace mcd {

// What the devices need of the server's options; the defaults are ServerOptions' (its fields of
// the same names, memcuda/server.h).
struct DeviceSetOptions {
  bool all_devices = true;                       // every CUDA device on the machine
  std::vector<int> devices;                      // when !all_devices
  std::string allocator = "cuda";                // "cuda" or "pool"
  uint64_t pool_max_bytes = 0;                   // 0: the whole device
  double pool_max_fraction = 0;                  // > 0: this fraction of the device instead
  uint64_t pool_release_threshold = UINT64_MAX;  // bytes the pool keeps cached when idle
  uint64_t ready_max_bytes = 0;                  // zeroed ready stock per device, when > 0
  double ready_max_fraction = 0.25;              // else this fraction of the device; both 0: none
  uint64_t ipc_slab_max_bytes = 32ull << 20;     // "cuda": the largest slab; 0: none
  gid_t shm_group = static_cast<gid_t>(-1);      // host tensors shared with this group; -1: none
};

class DeviceSet {
 public:
  // Host memory (shm objects named "<shm_prefix><seq>") and the GPUs of `opt`; fails when a
  // GPU asked for cannot be served.
  static Result<std::unique_ptr<DeviceSet>> Open(const DeviceSetOptions& opt,
                                                 const std::string& shm_prefix);
  ~DeviceSet() { Stop(); }
  DeviceSet(const DeviceSet&) = delete;
  DeviceSet& operator=(const DeviceSet&) = delete;

  bool Serves(int device) const { return workers_.count(device) != 0; }
  size_t gpu_count() const { return workers_.size() - 1; }  // host memory is always served
  // "cpu,0,1": what a create may name, for errors and the heartbeat's devices.
  const std::string& devices_text() const { return devices_text_; }
  // "0:cuda_ipc,1:cuda_ipc,cpu:host_shm": the heartbeat's allocator.
  const std::string& allocator_text() const { return allocator_text_; }

  // Allocates on the device's worker and waits; then posts the ready stock's refill, so that it
  // runs while the commit travels.
  Result<Allocation> Allocate(int device, uint64_t bytes, bool zero);
  // Frees an allocation on its device's worker and waits for it; with `then`, posts the free
  // instead and `then` runs on the worker with the outcome (so it may only touch what is safe
  // from another thread: the outcome log, the log). An allocation under a Hold is freed when
  // the hold goes, and this returns Ok at once. A set member's frees its set's allocation once
  // it is the last member left (before that, Ok at once).
  Status Free(int device, const Allocation& allocation,
              std::function<void(const Status&)> then = nullptr);
  // Keeps GPU `allocation` from being freed (or its memory handed out again) until the returned
  // function runs, from any thread: UCX reads a tensor in place for another node meanwhile, and
  // an rm in that time must not free the memory under it.
  std::function<void()> Hold(int device, const Allocation& allocation);
  // `bytes` of pinned host memory (cudaMallocHost, on `device`'s worker) to stage a GPU
  // tensor's copy where UCX cannot read GPU memory: copies to and from it run at the link's
  // speed, where a pageable buffer's run at a fraction (docs/scale-out.md). Freed on that
  // worker when the last owner lets go.
  Result<std::shared_ptr<char>> PinnedBuffer(int device, uint64_t bytes);
  // Copies `bytes` from `src` to `dst`, one of them GPU memory of `device` and the other host
  // memory (`kind`), on the device's worker, after the jobs posted to it before; `done` runs
  // there with the outcome (or here, when the worker is stopping). Returns at once. Copies
  // between nodes stage GPU tensors through pinned host memory this way (server/node_copy).
  void CopyOnWorker(int device, void* dst, const void* src, uint64_t bytes, cudaMemcpyKind kind,
                    std::function<void(Status)> done);
  // Frees every allocation held, one worker job per device: shutdown. Returns how many went.
  size_t FreeAll(const std::map<int, std::vector<const Entry*>>& by_device);

  // Serves the pools' descriptors on `path` to `policy`'s peers (several GPUs with pools).
  Status StartPoolSocket(const std::string& path, const PeerPolicy& policy);
  bool has_pool_socket() const { return pool_server_ != nullptr; }
  // Closes the pool socket and stops the workers (their queued jobs run first). Idempotent.
  void Stop();

  // Heartbeat fields: "<device>:<value>,..." over the devices. PrimerText(kind): the hex of the
  // primer of each device whose allocator is of `kind`; PoolFdText: this process's descriptor
  // of each pool, which a client of the same user copies with pidfd_getfd.
  std::string PrimerText(IpcKind kind) const;
  std::string PoolFdText() const;
  uint64_t ReadyBytes() const { return SumOver(&Allocator::ReadyBytes); }
  uint64_t SlabBytes() const { return SumOver(&Allocator::SlabBytes); }
  uint64_t SlabFreeBytes() const { return SumOver(&Allocator::SlabFreeBytes); }
  // Bytes of the pools in use, asked of each pool's worker.
  uint64_t PoolUsedBytes();
  // Gives back the ready stock of sizes not created for a while (kReadyIdleMs).
  void TrimReadyStock();

 private:
  DeviceSet() = default;
  Status AddGpu(int device, const DeviceSetOptions& opt);
  std::string DeviceText(const std::function<std::string(const Allocator&)>& value_of) const;
  uint64_t SumOver(uint64_t (Allocator::*bytes)() const noexcept) const;

  // Free past the holds: on the device's worker, waited for, or posted with `then`.
  Status FreeOnWorker(int device, const Allocation& allocation,
                      std::function<void(const Status&)> then);

  // Allocations under a Hold, by device and address: how many holds, and the free deferred
  // until the last goes. Under holds_mutex_ (a hold goes on the copy service's thread).
  struct Held {
    int holds = 0;
    bool free_deferred = false;
    Allocation allocation;
    std::function<void(const Status&)> then;
  };
  std::mutex holds_mutex_;
  std::map<std::pair<int, void*>, Held> held_;

  std::map<int, std::unique_ptr<GpuWorker>> workers_;
  std::map<int, std::unique_ptr<Allocator>> allocators_;
  std::unique_ptr<FdServer> pool_server_;
  std::string devices_text_ = "cpu";
  std::string allocator_text_;
};

}  // namespace mcd
