// Server-side allocators (one interface, chosen per device) and the client-side openers that
// map what they export. Private to libmemcuda.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "memcuda/gpu_worker.h"
#include "memcuda/status.h"

namespace mcd {

struct Allocation {
  void* ptr = nullptr;
  uint64_t bytes = 0;
  std::string ipc_kind;
  std::string ipc_handle;  // raw bytes as stored in the hash
  uint64_t offset = 0;
};

// Every method runs on the device's GpuWorker thread, with that worker's context.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual const char* kind() const noexcept = 0;
  // Allocates `bytes`, zeroed when `zero` (the stream is synchronized before returning, so the
  // memory is ready to publish). kOutOfMemory names requested and available bytes.
  virtual Result<Allocation> Allocate(DeviceContext& ctx, uint64_t bytes, bool zero) = 0;
  // Frees an allocation of this allocator. Only at refcount 0: others may still map it otherwise.
  virtual Status Free(DeviceContext& ctx, const Allocation& allocation) = 0;
};

// POSIX shared memory, one object per tensor, named "<name_prefix><seq>".
std::unique_ptr<Allocator> MakeHostShmAllocator(std::string name_prefix);
// cudaMalloc + cudaIpcGetMemHandle.
std::unique_ptr<Allocator> MakeCudaIpcAllocator();

// Removes host shm objects whose names start with `name_prefix` (left by a dead instance).
// Returns how many were removed.
int RemoveHostShmObjects(const std::string& name_prefix);
// Unlinks one host shm object by name; missing objects are not an error.
void UnlinkHostShm(const std::string& shm_name);

// Client side: maps an exported allocation into this process. Runs on the client's worker for
// the device (CUDA kinds) or any thread (host_shm).
Result<void*> OpenMapping(DeviceContext& ctx, const std::string& ipc_kind,
                          const std::string& ipc_handle, uint64_t bytes, uint64_t offset);
Status CloseMapping(DeviceContext& ctx, const std::string& ipc_kind, void* ptr, uint64_t bytes,
                    uint64_t offset);

}  // namespace mcd
