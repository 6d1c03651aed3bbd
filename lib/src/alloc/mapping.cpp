// Client side: open and close the mapping of an exported allocation, by ipc_kind.
#include "alloc/allocator.h"

namespace mcd {

Result<void*> OpenMapping(DeviceContext& ctx, const TensorRecord& r, const PoolImporter& import_pool) {
  if (r.ipc_kind == "host_shm") return OpenHostShm(r.ipc_handle, r.bytes, r.offset);
  if (r.ipc_kind == "cuda_ipc") return OpenCudaIpc(ctx, r.ipc_handle, r.offset);
  if (r.ipc_kind == "cuda_mempool") {
    MCD_ASSIGN_OR_RETURN(cudaMemPool_t pool, import_pool(ctx));
    return OpenPoolPointer(ctx, pool, r.ipc_handle, r.offset);
  }
  return Status(ErrorCode::kUnsupported, "this client cannot open ipc_kind \"" + r.ipc_kind + "\"");
}

Status CloseMapping(DeviceContext& ctx, const TensorRecord& r, void* ptr) {
  if (r.ipc_kind == "host_shm") return CloseHostShm(ptr, r.bytes, r.offset);
  if (r.ipc_kind == "cuda_ipc") return CloseCudaIpc(ctx, ptr, r.offset);
  if (r.ipc_kind == "cuda_mempool") return ClosePoolPointer(ctx, ptr, r.offset);
  return Status(ErrorCode::kUnsupported, "cannot close ipc_kind \"" + r.ipc_kind + "\"");
}

}  // namespace mcd
