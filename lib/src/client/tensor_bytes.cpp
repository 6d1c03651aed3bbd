// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The reads and writes of a tensor's bytes (client.h): copies between an opened tensor and host
// memory, host tensors with memcpy on the calling thread, device tensors on the device's worker
// (MappingRegistry), where every CUDA call of this process for that device runs. The client's
// thread, blocking on the worker for the copy.
#include <cuda_runtime_api.h>

#include <cstring>

#include "alloc/allocator.h"
#include "client/client_impl.h"
#include "client/mapping_registry.h"
#include "gpu/cuda_check.h"

namespace mcd {

namespace {

// Below this, a copy's page faults cost less than the calls that would spare them.
constexpr uint64_t kPopulateAtBytes = 1 << 20;

// `into_tensor`: dst is the tensor's memory (a write), else src is (a read).
Status Copy(const TensorView& view, void* dst, const void* src, uint64_t bytes, bool into_tensor) {
  if (bytes > view.record.bytes) {
    return Status(ErrorCode::kInvalidArgument, "copy of " + std::to_string(bytes) +
                                                   " bytes into a tensor of " +
                                                   std::to_string(view.record.bytes));
  }
  if (view.record.device == kHostDevice) {
    if (bytes >= kPopulateAtBytes && into_tensor) {
      // Into the tensor: each side's pages mapped in one call into the kernel, rather than one
      // fault a page during the copy (a 1 GiB host fill from a file on an H200 host: 638-1122
      // -> 415-720 ms); a tensor of 1 MiB or more whose pages /dev/shm cannot all hold is
      // refused here, where the copy would raise SIGBUS. The source's are only an aid.
      MCD_RETURN_IF_ERROR(PopulateHost(dst, bytes, /*for_write=*/true));
      (void)PopulateHost(const_cast<void*>(src), bytes, /*for_write=*/false);
    }
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  return MappingRegistry::Get().Worker(view.record.device).Call([&](DeviceContext& ctx) -> Status {
    MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
    MCD_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream()));
    MCD_CUDA_RETURN(cudaStreamSynchronize(ctx.stream()));
    return Status::Ok();
  });
}

}  // namespace

Status Client::Warmup(int device) {
  if (device == kHostDevice) return Status::Ok();
  return MappingRegistry::Get().Worker(device).Call(
      [](DeviceContext& ctx) { return ctx.EnsureGpu(); });
}

Status Client::CopyToHost(const TensorView& view, void* dst, uint64_t bytes) {
  MCD_RETURN_IF_ERROR(Copy(view, dst, view.data, bytes, /*into_tensor=*/false));
  return view.referenced ? Status::Ok() : impl_->StillThere(view.record);
}

Status Client::CopyFromHost(const TensorView& view, const void* src, uint64_t bytes) {
  return Copy(view, view.data, src, bytes, /*into_tensor=*/true);
}

}  // namespace mcd
