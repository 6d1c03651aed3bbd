// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// cuda_mempool: the design's stream-ordered allocator made shareable. One IPC-capable pool per
// device (POSIX file-descriptor handles), owned by the device's worker; every allocation and free
// is ordered on the worker's single stream. The pool's descriptor reaches other processes over
// the server's Unix socket; each allocation is exported as 64 bytes of cudaMemPoolPtrExportData.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>

#include "alloc/allocator.h"
#include "gpu/cuda_check.h"
#include "memcuda/unique_fd.h"

namespace mcd {
namespace {

class CudaMempoolAllocator final : public Allocator {
 public:
  explicit CudaMempoolAllocator(PoolConfig config) : config_(config) {}
  IpcKind kind() const noexcept override { return IpcKind::kCudaMempool; }
  int pool_fd() const noexcept override { return fd_; }

  Status Init(DeviceContext& ctx) override {
    if (pool_ != nullptr) return Status::Ok();
    MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    MCD_CUDA_RETURN(cudaMemGetInfo(&free_bytes, &total_bytes));
    max_bytes_ =
        config_.max_fraction > 0
            ? static_cast<uint64_t>(config_.max_fraction * static_cast<double>(total_bytes))
            : config_.max_bytes;
    if (max_bytes_ == 0 || max_bytes_ > total_bytes) max_bytes_ = total_bytes;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = ctx.device();
    props.maxSize = max_bytes_;
    MCD_CUDA_RETURN(cudaMemPoolCreate(&pool_, &props));
    uint64_t threshold = config_.release_threshold;
    MCD_CUDA_RETURN(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
    // Must precede the first cudaMemPoolExportPointer.
    int fd = -1;
    MCD_CUDA_RETURN(
        cudaMemPoolExportToShareableHandle(&fd, pool_, cudaMemHandleTypePosixFileDescriptor, 0));
    fd_ = fd;
    // Teardown order at Reset: the stream is drained first, then the pool is trimmed and destroyed.
    ctx.AddResetHook([this] {
      FreePrimer();
      cudaMemPoolTrimTo(pool_, 0);
      cudaMemPoolDestroy(pool_);
      pool_ = nullptr;
      UniqueFd exported(fd_.exchange(-1));  // closed here
    });
    // The primer: a process's first cudaMemPoolImportPointer costs ~50-70 us more than later ones
    // (docs/design.md, "Fast paths and knobs": Primers), which a client pays while its first Get
    // waits on Redis by importing this pointer along with the pool (MappingRegistry::PrefetchPool).
    void* primer = nullptr;
    uint64_t used_before = PoolUsedBytes(ctx);
    MCD_CUDA_RETURN(cudaMallocFromPoolAsync(&primer, kPrimerBytes, pool_, ctx.stream()));
    primer_ptr_ = primer;
    MCD_CUDA_RETURN(cudaStreamSynchronize(ctx.stream()));
    primer_used_ = PoolUsedBytes(ctx) - used_before;  // as the pool counts it (rounded up)
    cudaMemPoolPtrExportData data{};
    MCD_CUDA_RETURN(cudaMemPoolExportPointer(&data, primer));
    std::lock_guard<std::mutex> lock(primer_mutex_);
    primer_.assign(reinterpret_cast<const char*>(&data), sizeof(data));
    return Status::Ok();
  }

  std::string primer() const override {
    std::lock_guard<std::mutex> lock(primer_mutex_);
    return primer_;
  }

  Result<Allocation> Allocate(DeviceContext& ctx, uint64_t bytes, bool zero) override {
    if (bytes > kMaxPoolTensorBytes) {
      return Status(ErrorCode::kTooLarge,
                    "requested " + std::to_string(bytes) +
                        " bytes: cuda_mempool tensors are limited to " +
                        std::to_string(kMaxPoolTensorBytes) +
                        " (another process's import of a larger pool pointer crashes the CUDA "
                        "driver); run mcd-serve --allocator cuda for larger tensors");
    }
    MCD_RETURN_IF_ERROR(Init(ctx));
    void* ptr = nullptr;
    cudaError_t err = cudaMallocFromPoolAsync(&ptr, bytes, pool_, ctx.stream());
    if (err == cudaErrorMemoryAllocation) {
      // Memory the pool keeps for reuse (freed blocks) may be where this request does not fit:
      // give it back, once every free on the stream is done, and try once more.
      cudaGetLastError();
      if (cudaStreamSynchronize(ctx.stream()) == cudaSuccess &&
          cudaMemPoolTrimTo(pool_, 0) == cudaSuccess) {
        err = cudaMallocFromPoolAsync(&ptr, bytes, pool_, ctx.stream());
      }
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      uint64_t used = PoolUsedBytes(ctx);
      size_t free_bytes = 0;
      size_t total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      uint64_t available =
          std::min<uint64_t>(max_bytes_ > used ? max_bytes_ - used : 0, free_bytes);
      return Status(ErrorCode::kOutOfMemory,
                    "cudaMallocFromPoolAsync: requested " + std::to_string(bytes) + " bytes, " +
                        std::to_string(available) + " available (pool maximum " +
                        std::to_string(max_bytes_) + ", " + std::to_string(used) + " in use)");
    }
    MCD_CUDA_RETURN(err);
    auto fail = [&](Status status) {
      cudaFreeAsync(ptr, ctx.stream());
      return status;
    };
    // Other processes import the pointer without any event: the allocation (and its zeroing)
    // must be complete in stream order before it is published.
    if (Status ready = ZeroAndSynchronize(ctx, ptr, bytes, zero); !ready.ok()) return fail(ready);
    cudaMemPoolPtrExportData data{};
    err = cudaMemPoolExportPointer(&data, ptr);
    if (err != cudaSuccess) return fail(CudaStatus(err, "cudaMemPoolExportPointer"));
    Allocation a;
    a.ptr = ptr;
    a.bytes = bytes;
    a.ipc_kind = kind();
    a.ipc_handle.assign(reinterpret_cast<const char*>(&data), sizeof(data));
    return a;
  }

  Status Free(DeviceContext& ctx, const Allocation& allocation) override {
    MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
    MCD_CUDA_RETURN(cudaFreeAsync(allocation.ptr, ctx.stream()));
    return Status::Ok();
  }

  uint64_t PoolUsedBytes(DeviceContext&) override {
    if (pool_ == nullptr) return 0;
    uint64_t used = 0;
    if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return used > primer_used_ ? used - primer_used_ : 0;  // tensors only: not the primer
  }

 private:
  static constexpr uint64_t kPrimerBytes = 4096;

  // Worker thread (at Reset).
  void FreePrimer() {
    if (primer_ptr_ != nullptr) cudaFree(primer_ptr_);  // Reset has drained the stream before
    primer_ptr_ = nullptr;
    primer_used_ = 0;
    std::lock_guard<std::mutex> lock(primer_mutex_);
    primer_.clear();
  }

  PoolConfig config_;
  uint64_t max_bytes_ = 0;
  cudaMemPool_t pool_ = nullptr;
  // Read by the pool socket's thread and the heartbeat (pool_fd) while the worker may reset it.
  std::atomic<int> fd_{-1};
  void* primer_ptr_ = nullptr;       // worker thread only
  uint64_t primer_used_ = 0;         // what the primer adds to the pool's used bytes
  mutable std::mutex primer_mutex_;  // the heartbeat thread reads the export data
  std::string primer_;               // cudaMemPoolPtrExportData of primer_ptr_, "" while none
};

}  // namespace

std::unique_ptr<Allocator> MakeCudaMempoolAllocator(PoolConfig config) {
  return std::make_unique<CudaMempoolAllocator>(config);
}

Result<cudaMemPool_t> ImportPool(DeviceContext& ctx, UniqueFd fd) {
  MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
  cudaMemPool_t pool = nullptr;
  // The import does not take the descriptor: it is closed when `fd` goes.
  cudaError_t err = cudaMemPoolImportFromShareableHandle(
      &pool, reinterpret_cast<void*>(static_cast<uintptr_t>(fd.get())),
      cudaMemHandleTypePosixFileDescriptor, 0);
  if (err != cudaSuccess) return CudaStatus(err, "cudaMemPoolImportFromShareableHandle");
  // An imported pool inherits no access settings: grant this process's device. Its resident
  // device always has access, and some drivers refuse to set it again: not an error then.
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = ctx.device();
  access.flags = cudaMemAccessFlagsProtReadWrite;
  if (cudaMemPoolSetAccess(pool, &access, 1) != cudaSuccess) cudaGetLastError();
  return pool;
}

Result<void*> OpenPoolPointer(DeviceContext& ctx, cudaMemPool_t pool, const std::string& handle,
                              uint64_t offset) {
  MCD_ASSIGN_OR_RETURN(auto data,
                       HandleFromBytes<cudaMemPoolPtrExportData>(handle, IpcKind::kCudaMempool));
  MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
  void* base = nullptr;
  MCD_CUDA_RETURN(cudaMemPoolImportPointer(&base, pool, &data));
  return static_cast<void*>(static_cast<char*>(base) + offset);
}

Status ClosePoolPointer(DeviceContext& ctx, void* ptr, uint64_t offset) {
  MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
  // An importer frees its import before the exporter frees the allocation (refcount order).
  // cudaFree, not cudaFreeAsync: a process's first cudaFreeAsync of an imported pointer takes
  // 7-13 ms in the call itself, cudaFree 3-4 us (scripts/probes/pool_free_probe.cu).
  MCD_CUDA_RETURN(cudaFree(static_cast<char*>(ptr) - offset));
  return Status::Ok();
}

}  // namespace mcd
