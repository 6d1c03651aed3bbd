// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// cuda_ipc: cudaMalloc + cudaIpcGetMemHandle. The handle is 64 raw bytes that any CUDA program
// on this machine opens with cudaIpcOpenMemHandle, with nothing from memcuda. Small tensors are
// carved from shared slabs (slab_carver.h): their hash names the slab's handle and the tensor's
// offset into it.
#include <cuda_runtime_api.h>

#include <mutex>

#include "alloc/allocator.h"
#include "alloc/slab_carver.h"
#include "common/process.h"
#include "gpu/cuda_check.h"

namespace mcd {

namespace {

Status OutOfMemory(const char* what, uint64_t bytes) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  cudaGetLastError();  // clear the sticky allocation error
  return Status(ErrorCode::kOutOfMemory, std::string(what) + ": requested " +
                                             std::to_string(bytes) + " bytes, " +
                                             std::to_string(free_bytes) + " of " +
                                             std::to_string(total_bytes) + " free on the device");
}

// Every export is a whole number of these. Another process's cudaIpcOpenMemHandle of an
// allocation whose size is not costs ~6.4 ms per GiB (the driver maps it in small pages), of one
// that is ~0.04 ms per GiB: 83 ms against 0.5 ms at 12.6 GiB, 8.2 ms against 0.13 ms at 1 GiB
// (driver 580.159.04, H100; docs/design.md, "Fast paths and knobs": Exports in whole 2 MiB).
constexpr uint64_t kExportGranularity = 2ull << 20;

uint64_t ExportBytes(uint64_t bytes) {
  return (bytes + kExportGranularity - 1) / kExportGranularity * kExportGranularity;
}

// cudaMalloc + cudaIpcGetMemHandle of `bytes` rounded up to kExportGranularity; the caller frees
// `ptr` on its own errors.
Result<SlabMemory> MallocExported(uint64_t bytes) {
  SlabMemory memory;
  if (bytes > UINT64_MAX - kExportGranularity) return OutOfMemory("cudaMalloc", bytes);
  cudaError_t err = cudaMalloc(&memory.base, ExportBytes(bytes));
  if (err == cudaErrorMemoryAllocation) return OutOfMemory("cudaMalloc", bytes);
  MCD_CUDA_RETURN(err);
  cudaIpcMemHandle_t handle{};
  err = cudaIpcGetMemHandle(&handle, memory.base);
  if (err != cudaSuccess) {
    cudaFree(memory.base);
    return CudaStatus(err, "cudaIpcGetMemHandle");
  }
  memory.handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return memory;
}

class CudaIpcAllocator final : public Allocator {
 public:
  explicit CudaIpcAllocator(uint64_t max_slab_bytes)
      : slabs_(max_slab_bytes,
               SlabBackend{MallocExported, [](const SlabMemory& m) { cudaFree(m.base); }}) {}

  IpcKind kind() const noexcept override { return IpcKind::kCudaIpc; }

  // Allocates the primer (once): a server that cannot is told so at start.
  Status Init(DeviceContext& ctx) override {
    if (!hook_added_) {
      ctx.AddResetHook([this] {
        slabs_.FreeAll();
        FreePrimer();
      });
      hook_added_ = true;
    }
    MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
    if (!primer().empty()) return Status::Ok();
    auto primer = MallocExported(kPrimerBytes);
    if (!primer.ok()) return primer.status();
    std::lock_guard<std::mutex> lock(primer_mutex_);
    primer_ = std::move(primer).value();
    return Status::Ok();
  }

  std::string primer() const override {
    std::lock_guard<std::mutex> lock(primer_mutex_);
    return primer_.handle;
  }

  Result<Allocation> Allocate(DeviceContext& ctx, uint64_t bytes, bool zero) override {
    MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
    Allocation a;
    if (slabs_.Carves(bytes)) {
      auto block = slabs_.Take(bytes, SteadyMs());
      if (block.ok()) {
        a = std::move(block).value();
      } else if (block.status().code() != ErrorCode::kOutOfMemory) {
        return block.status();
      }  // else no room for a whole slab: the tensor alone may still fit
    }
    if (a.ptr == nullptr) {
      auto alone = MallocExported(bytes);
      if (!alone.ok() && alone.status().code() == ErrorCode::kOutOfMemory &&
          slabs_.EmptySlabBytes() > 0) {
        slabs_.Trim(/*everything=*/true, SteadyMs(), 0);
        alone = MallocExported(bytes);
      }
      if (!alone.ok()) return alone.status();
      a.ptr = alone->base;
      a.ipc_handle = std::move(alone->handle);
      a.bytes = bytes;
      // Every process that opens the tensor maps its allocation whole: the rounding too holds no
      // other tenant's bytes.
      if (uint64_t tail = ExportBytes(bytes) - bytes; tail > 0) {
        cudaError_t zeroed =
            cudaMemsetAsync(static_cast<char*>(a.ptr) + bytes, 0, tail, ctx.stream());
        if (zeroed != cudaSuccess) {
          cudaFree(a.ptr);
          return CudaStatus(zeroed, "cudaMemsetAsync");
        }
      }
    }
    a.ipc_kind = kind();
    if (Status ready = ZeroAndSynchronize(ctx, a.ptr, bytes, zero); !ready.ok()) {
      (void)Free(ctx, a);
      return ready;
    }
    return a;
  }

  Status Free(DeviceContext& ctx, const Allocation& allocation) override {
    MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
    if (slabs_.Give(allocation)) return Status::Ok();
    MCD_CUDA_RETURN(cudaFree(allocation.ptr));
    return Status::Ok();
  }

  void Trim(DeviceContext&, bool everything) override {
    slabs_.Trim(everything, SteadyMs(), kReadyIdleMs);
  }
  // The empty slabs kept for creates to come.
  uint64_t ReadyBytes() const noexcept override { return slabs_.EmptySlabBytes(); }
  uint64_t SlabBytes() const noexcept override { return slabs_.SlabBytes(); }
  uint64_t SlabFreeBytes() const noexcept override { return slabs_.FreeBytes(); }

 private:
  // The driver's allocation granularity: the smallest allocation of its own.
  static constexpr uint64_t kPrimerBytes = 2 << 20;

  void FreePrimer() {
    std::lock_guard<std::mutex> lock(primer_mutex_);
    if (primer_.base != nullptr) cudaFree(primer_.base);
    primer_ = SlabMemory{};
  }

  SlabCarver slabs_;
  bool hook_added_ = false;
  mutable std::mutex primer_mutex_;  // the heartbeat thread reads the handle
  SlabMemory primer_;
};

}  // namespace

std::unique_ptr<Allocator> MakeCudaIpcAllocator(uint64_t max_slab_bytes) {
  return std::make_unique<CudaIpcAllocator>(max_slab_bytes);
}

Status ZeroAndSynchronize(DeviceContext& ctx, void* ptr, uint64_t bytes, bool zero) {
  if (zero) MCD_CUDA_RETURN(cudaMemsetAsync(ptr, 0, bytes, ctx.stream()));
  MCD_CUDA_RETURN(cudaStreamSynchronize(ctx.stream()));
  return Status::Ok();
}

Result<void*> OpenCudaIpc(DeviceContext& ctx, const std::string& ipc_handle, uint64_t offset) {
  MCD_ASSIGN_OR_RETURN(auto handle,
                       HandleFromBytes<cudaIpcMemHandle_t>(ipc_handle, IpcKind::kCudaIpc));
  MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
  void* base = nullptr;
  MCD_CUDA_RETURN(cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess));
  return static_cast<void*>(static_cast<char*>(base) + offset);
}

Status CloseCudaIpc(DeviceContext& ctx, void* ptr, uint64_t offset) {
  MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
  MCD_CUDA_RETURN(cudaIpcCloseMemHandle(static_cast<char*>(ptr) - offset));
  return Status::Ok();
}

}  // namespace mcd
