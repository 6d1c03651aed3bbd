// cuda_ipc: cudaMalloc + cudaIpcGetMemHandle. The handle is 64 raw bytes that any CUDA program
// on this machine opens with cudaIpcOpenMemHandle, with nothing from memcuda.
#include <cuda_runtime_api.h>


#include "alloc/allocator.h"
#include "cuda_check.h"

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

class CudaIpcAllocator final : public Allocator {
 public:
  const char* kind() const noexcept override { return "cuda_ipc"; }

  Result<Allocation> Allocate(DeviceContext& ctx, uint64_t bytes, bool zero) override {
    MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err == cudaErrorMemoryAllocation) return OutOfMemory("cudaMalloc", bytes);
    MCD_CUDA_RETURN(err);
    auto fail = [&](Status status) {
      cudaFree(ptr);
      return status;
    };
    if (Status ready = ZeroAndSynchronize(ctx, ptr, bytes, zero); !ready.ok()) return fail(ready);
    cudaIpcMemHandle_t handle{};
    err = cudaIpcGetMemHandle(&handle, ptr);
    if (err != cudaSuccess) return fail(CudaStatus(err, "cudaIpcGetMemHandle"));
    Allocation a;
    a.ptr = ptr;
    a.bytes = bytes;
    a.ipc_kind = kind();
    a.ipc_handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
    return a;
  }

  Status Free(DeviceContext& ctx, const Allocation& allocation) override {
    MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
    MCD_CUDA_RETURN(cudaFree(allocation.ptr));
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Allocator> MakeCudaIpcAllocator() { return std::make_unique<CudaIpcAllocator>(); }

Status ZeroAndSynchronize(DeviceContext& ctx, void* ptr, uint64_t bytes, bool zero) {
  if (zero) MCD_CUDA_RETURN(cudaMemsetAsync(ptr, 0, bytes, ctx.stream()));
  MCD_CUDA_RETURN(cudaStreamSynchronize(ctx.stream()));
  return Status::Ok();
}

Result<void*> OpenCudaIpc(DeviceContext& ctx, const std::string& ipc_handle, uint64_t offset) {
  MCD_ASSIGN_OR_RETURN(auto handle, HandleFromBytes<cudaIpcMemHandle_t>(ipc_handle, "cuda_ipc"));
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
