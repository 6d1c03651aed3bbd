// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Client side: open and close the mapping of an exported allocation, by ipc_kind.
#include <cuda_runtime_api.h>

#include "alloc/allocator.h"

namespace mcd {

namespace {

// cuMemGetAddressRange's signature (cuda.h), called through the runtime's entry point so that
// libmemcuda needs no link to libcuda, which a host without a GPU driver lacks.
using GetAddressRange = int (*)(unsigned long long* base, size_t* size, unsigned long long ptr);

}  // namespace

Result<uint64_t> AllocationBytes(const void* base) {
  // Looked up once: the entry point does not change while the process runs.
  static GetAddressRange get_range = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<GetAddressRange>(fn);
  }();
  if (get_range == nullptr) {
    return Status(ErrorCode::kCudaError, "the CUDA driver has no cuMemGetAddressRange");
  }
  unsigned long long start = 0;
  size_t size = 0;
  int rc = get_range(&start, &size, reinterpret_cast<unsigned long long>(base));
  if (rc != 0) {
    return Status(ErrorCode::kCudaError, "cuMemGetAddressRange: error " + std::to_string(rc));
  }
  // From `base` to the end of its allocation.
  return static_cast<uint64_t>(start + size - reinterpret_cast<unsigned long long>(base));
}

Status CheckWithin(const TensorRecord& r, uint64_t allocation_bytes) {
  if (r.offset <= allocation_bytes && r.bytes <= allocation_bytes - r.offset) return Status::Ok();
  return Status(ErrorCode::kUnexpectedReply, "tensor hash of '" + r.name + "' says \"offset\" " +
                                                 std::to_string(r.offset) + " and \"bytes\" " +
                                                 std::to_string(r.bytes) +
                                                 ", which reach past the end of its allocation (" +
                                                 std::to_string(allocation_bytes) + " bytes)");
}

Result<void*> OpenMapping(DeviceContext& ctx, const TensorRecord& r,
                          const PoolImporter& import_pool, uint64_t* allocation_bytes) {
  Result<void*> ptr = Status(ErrorCode::kInternal, "not opened");
  switch (r.ipc_kind) {
    case IpcKind::kHostShm:
      return OpenHostShm(r.ipc_handle, r.bytes, r.offset);  // checks its size
    case IpcKind::kCudaIpc:
      ptr = OpenCudaIpc(ctx, r.ipc_handle, r.offset);
      break;
    case IpcKind::kCudaMempool: {
      MCD_ASSIGN_OR_RETURN(cudaMemPool_t pool, import_pool(ctx));
      ptr = OpenPoolPointer(ctx, pool, r.ipc_handle, r.offset);
      break;
    }
    case IpcKind::kUnknown:
      return Status(ErrorCode::kUnsupported,
                    "this client cannot open tensor '" + r.name +
                        "': its ipc_kind is none of host_shm, cuda_ipc and cuda_mempool");
  }
  if (!ptr.ok()) return ptr;
  // The hash names the offset and size: a tensor must lie inside the allocation it opened, or a
  // reader would be handed memory outside it.
  void* base = static_cast<char*>(ptr.value()) - r.offset;
  auto size = AllocationBytes(base);
  Status within = size.ok() ? CheckWithin(r, size.value()) : size.status();
  if (!within.ok()) {
    (void)CloseMapping(ctx, r, ptr.value());
    return within;
  }
  if (allocation_bytes != nullptr) *allocation_bytes = size.value();
  return ptr;
}

Status CloseMapping(DeviceContext& ctx, const TensorRecord& r, void* ptr) {
  switch (r.ipc_kind) {
    case IpcKind::kHostShm:
      return CloseHostShm(ptr, r.bytes, r.offset);
    case IpcKind::kCudaIpc:
      return CloseCudaIpc(ctx, ptr, r.offset);
    case IpcKind::kCudaMempool:
      return ClosePoolPointer(ctx, ptr, r.offset);
    case IpcKind::kUnknown:
      break;
  }
  return Status(ErrorCode::kUnsupported,
                "cannot close tensor '" + r.name + "' of an unknown ipc_kind");
}

}  // namespace mcd
