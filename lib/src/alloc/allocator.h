// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Server-side allocators (one interface, chosen per device) and the client-side openers that
// map what they export. Private to libmemcuda.
#pragma once

#include <cuda_runtime_api.h>
#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "memcuda/gpu_worker.h"
#include "memcuda/protocol.h"
#include "memcuda/status.h"
#include "memcuda/unique_fd.h"

namespace mcd {

struct SharedBlock;

struct Allocation {
  void* ptr = nullptr;
  uint64_t bytes = 0;
  IpcKind ipc_kind = IpcKind::kUnknown;
  std::string ipc_handle;  // raw bytes as stored in the hash
  uint64_t offset = 0;
  // A member of a tensor set: its part of the set's one allocation, which goes when the last
  // member is freed (DeviceSet::Free). Allocators never see one: they get the whole.
  std::shared_ptr<SharedBlock> shared;
};

// The one allocation of a tensor set, and how many of its members are not freed yet. The
// server's main thread only.
struct SharedBlock {
  Allocation whole;
  size_t members = 0;
};

// Every method runs on the device's GpuWorker thread, with that worker's context.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual IpcKind kind() const noexcept = 0;
  // Allocates `bytes`, zeroed when `zero` (the stream is synchronized before returning, so the
  // memory is ready to publish). kOutOfMemory names requested and available bytes.
  virtual Result<Allocation> Allocate(DeviceContext& ctx, uint64_t bytes, bool zero) = 0;
  // Frees an allocation of this allocator. Only at refcount 0: others may still map it otherwise.
  virtual Status Free(DeviceContext& ctx, const Allocation& allocation) = 0;
  // Sets up device state before the first allocation (the pool is created and exported here).
  virtual Status Init(DeviceContext&) { return Status::Ok(); }
  // The pool's shareable descriptor (cuda_mempool; owned by the allocator), -1 for other kinds.
  // Thread-safe once Init() has returned.
  virtual int pool_fd() const noexcept { return -1; }
  // The export of a small allocation kept for the server's life, in the form of this kind's
  // ipc_handle (cuda_ipc: a cudaIpcMemHandle; cuda_mempool: a cudaMemPoolPtrExportData), which a
  // client opens once to pay the driver's per-process setup while its first Get waits on Redis
  // (MappingRegistry::PrefetchIpc and PrefetchPool). "" for other kinds, or while there is none.
  // Thread-safe.
  virtual std::string primer() const { return {}; }
  // Bytes of the pool in use by tensors right now (cuda_mempool), 0 for other kinds.
  virtual uint64_t PoolUsedBytes(DeviceContext&) { return 0; }
  // Work nobody waits for (a ready stock's; see WithReadyStock), posted by the server: Refill
  // after a create, Trim now and then (`everything`: at shutdown and before retrying an
  // allocation that ran out of memory). No-ops by default.
  virtual void Refill(DeviceContext&) {}
  virtual void Trim(DeviceContext&, bool /*everything*/) {}
  // Whether Refill has work since it last ran: an Allocate asked for a size the stock keeps.
  // The server reads it once the create's Allocate has returned, to post Refill only then.
  // Thread-safe.
  virtual bool RefillDue() const noexcept { return false; }
  // Bytes held ready for creates to come. Thread-safe.
  virtual uint64_t ReadyBytes() const noexcept { return 0; }
  // cuda_ipc: the bytes of the slabs small tensors are carved from, and those of them not carved
  // out for a tensor or the ready stock (slab_carver.h). 0 for other kinds. Thread-safe.
  virtual uint64_t SlabBytes() const noexcept { return 0; }
  virtual uint64_t SlabFreeBytes() const noexcept { return 0; }
};

struct PoolConfig {
  uint64_t max_bytes = 0;                   // 0: the whole device
  double max_fraction = 0;                  // > 0: this fraction of the device's memory instead
  uint64_t release_threshold = UINT64_MAX;  // bytes kept cached when the stream is idle
};

// Zeroes a new device allocation (when asked) and waits until the worker's stream has finished
// every write to it: a tensor is published only after that. Worker thread.
Status ZeroAndSynchronize(DeviceContext& ctx, void* ptr, uint64_t bytes, bool zero);

// POSIX shared memory, one object per tensor, named "<name_prefix><seq>": readable and
// writable by the server's user only, or (`group` not -1) by that group's members too, as the
// server's sockets are (--pool-group). Its Allocate and Free are thread-safe (WithHostStock
// calls them from a thread of its own too).
std::unique_ptr<Allocator> MakeHostShmAllocator(std::string name_prefix,
                                                gid_t group = static_cast<gid_t>(-1));
// cudaMalloc + cudaIpcGetMemHandle; tensors small enough for slabs of up to max_slab_bytes
// are carved from shared slabs (SlabCarver, slab_carver.h; 0: every tensor alone).
std::unique_ptr<Allocator> MakeCudaIpcAllocator(uint64_t max_slab_bytes);
// cudaMallocFromPoolAsync on the worker's stream from an IPC-capable pool (POSIX fd handles);
// cudaMemPoolExportPointer data in ipc_handle. Tensors above kMaxPoolTensorBytes are refused
// (kTooLarge).
std::unique_ptr<Allocator> MakeCudaMempoolAllocator(PoolConfig config);
// The largest cuda_mempool tensor. Another process's cudaMemPoolImportPointer of a larger pool
// pointer crashes inside the CUDA driver (SIGSEGV): with driver 580.159.04 on an H200, 5 GiB and
// 5.125 GiB import, 5.25 GiB and more crash (scripts/probes/pool_large_probe.cu). No consumer
// could open such a tensor, so the server refuses to make it.
inline constexpr uint64_t kMaxPoolTensorBytes = 5ull << 30;

// A stock of zeroed blocks in front of a GPU allocator, so that a create of a size created
// recently takes a block that is ready (zeroed, exported, synchronized) instead of waiting for
// an allocation, a memset and a stream synchronization on its path.
// - It follows demand, per size: a size is stocked once a create asked for it, and its stock
//   aims at one block more than the most tensors of the size alive at once over the last second
//   or two, less those alive now (at most kReadyPerSize blocks). Refill (posted after a create)
//   allocates what is missing, off the create's path; past kReadyAheadFreely held in all, only
//   while the device keeps kReadyFreeReserve of its memory free after the block.
// - A freed block of a stocked size goes back to the stock instead of being freed, zeroed on
//   the worker's stream on its way; a create takes a block whose zeroing has finished, one
//   handed out before first (other processes open it faster), or waits for the oldest: a block
//   never carries a former tenant's bytes.
// - Bounded: only sizes up to half the limit (two blocks of a size fit: one handed out while
//   the other is zeroed), the limit in all. Blocks above a size's demand go back at the next
//   Trim (every second), a size not created for kReadyIdle all of it; all of it before an
//   allocation is retried after running out of memory, and at shutdown.
// The limit: `bytes` when > 0, else `fraction` of the device's memory (read at Init); both 0
// returns `inner` itself.
struct ReadyLimit {
  uint64_t bytes = 0;
  double fraction = 0;
};
inline constexpr int kReadyPerSize = 8;
inline constexpr int64_t kReadyIdleMs = 2000;
inline constexpr double kReadyFreeReserve = 0.25;
inline constexpr uint64_t kReadyAheadFreely = 256ull << 20;
std::unique_ptr<Allocator> WithReadyStock(std::unique_ptr<Allocator> inner, ReadyLimit limit);
// The same in front of host shared memory (`inner` from MakeHostShmAllocator), for the creates
// that ask for no zeroing (a copy, a fill, which write every byte themselves; init none): one of a
// size created recently takes an object whose pages exist already (FillHostShm) instead of
// one whose pages the kernel makes and zeroes as they are first touched. Its demand rule and
// bounds are the GPU stock's, the limit's fraction being of /dev/shm's size; its blocks are made
// and given back on a thread of its own, and each is a new object: a freed tensor's object is
// unlinked, never stocked again. Both 0 returns `inner` itself.
std::unique_ptr<Allocator> WithHostStock(std::unique_ptr<Allocator> inner, ReadyLimit limit);

// Removes host shm objects of this user whose names start with `name_prefix` (left by a dead
// instance). Returns how many were removed.
int RemoveHostShmObjects(const std::string& name_prefix);
// /dev/shm's size and the bytes left in it; both 0 where it cannot be read.
struct ShmSpace {
  uint64_t total = 0;
  uint64_t available = 0;
};
ShmSpace ReadShmSpace();
// Makes every page of host shm object `shm_name` (`bytes` long) now, zeroed, without mapping
// it: a later mapping then finds them rather than have the kernel make each at its first touch.
// kOutOfMemory when /dev/shm cannot hold them; ok, nothing made, where the file system cannot.
Status FillHostShm(const std::string& shm_name, uint64_t bytes);
// Unlinks one host shm object by name; missing objects are not an error.
void UnlinkHostShm(const std::string& shm_name);
// True when the host shm object `shm_name` exists and belongs to this process's user: the only
// objects a server removes on the word of a hash, which anyone with Redis credentials can write.
bool HostShmIsOwn(const std::string& shm_name);

// The fixed-size CUDA export `T` held in a hash's raw `ipc_handle` bytes, or kUnexpectedReply
// when the size is wrong (a hash written by something else).
template <typename T>
Result<T> HandleFromBytes(const std::string& bytes, IpcKind ipc_kind) {
  static_assert(sizeof(T) == kCudaHandleBytes, "ValidateRecord checks handles of this size");
  if (bytes.size() != sizeof(T)) {
    return Status(ErrorCode::kUnexpectedReply, std::string(IpcKindName(ipc_kind)) + " handle is " +
                                                   std::to_string(bytes.size()) + " bytes, not " +
                                                   std::to_string(sizeof(T)));
  }
  T handle{};
  std::memcpy(&handle, bytes.data(), sizeof(T));
  return handle;
}

// Client side: maps an exported allocation into this process, on the client's worker for the
// record's device. `import_pool` yields this process's import of the owning server's pool
// (cuda_mempool only; called on the same worker thread).
using PoolImporter = std::function<Result<cudaMemPool_t>(DeviceContext&)>;
// A GPU tensor must lie inside the allocation it opens (kUnexpectedReply, nothing left open,
// otherwise); `allocation_bytes`, when given, is set to the allocation's size from the tensor's
// base (the opened pointer less its offset), for tensors that share the allocation.
Result<void*> OpenMapping(DeviceContext& ctx, const TensorRecord& record,
                          const PoolImporter& import_pool, uint64_t* allocation_bytes = nullptr);
// The bytes from `base` to the end of the device allocation that holds it (cuMemGetAddressRange,
// on the calling thread's current context); and whether `record` lies within that many.
Result<uint64_t> AllocationBytes(const void* base);
Status CheckWithin(const TensorRecord& record, uint64_t allocation_bytes);
Status CloseMapping(DeviceContext& ctx, const TensorRecord& record, void* ptr);
// Imports a pool from its shareable descriptor and enables access from the context's device.
Result<cudaMemPool_t> ImportPool(DeviceContext& ctx, UniqueFd fd);

// The per-kind halves of OpenMapping/CloseMapping.
Result<void*> OpenHostShm(const std::string& name, uint64_t bytes, uint64_t offset);
Status CloseHostShm(void* ptr, uint64_t bytes, uint64_t offset);
// Maps every page of the host memory [ptr, ptr + bytes) now, for a caller about to go through
// all of it (a copy between nodes): one call into the kernel rather than a fault a page, which
// costs far more inside a VM. kOutOfMemory where the pages cannot all be had (a full /dev/shm:
// writing them would raise SIGBUS); ok, the pages left to fault in as they are touched, on a
// kernel without MADV_POPULATE_* (before Linux 5.14).
Status PopulateHost(void* ptr, uint64_t bytes, bool for_write);
Result<void*> OpenCudaIpc(DeviceContext& ctx, const std::string& handle, uint64_t offset);
Status CloseCudaIpc(DeviceContext& ctx, void* ptr, uint64_t offset);
Result<void*> OpenPoolPointer(DeviceContext& ctx, cudaMemPool_t pool, const std::string& handle,
                              uint64_t offset);
Status ClosePoolPointer(DeviceContext& ctx, void* ptr, uint64_t offset);

}  // namespace mcd
