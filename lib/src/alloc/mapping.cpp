// Client side: open and close the mapping of an exported allocation, by ipc_kind.
#include "alloc/allocator.h"

namespace mcd {

Result<void*> OpenMapping(DeviceContext& ctx, const TensorRecord& r, const PoolImporter& import_pool) {
  switch (r.ipc_kind) {
    case IpcKind::kHostShm: return OpenHostShm(r.ipc_handle, r.bytes, r.offset);
    case IpcKind::kCudaIpc: return OpenCudaIpc(ctx, r.ipc_handle, r.offset);
    case IpcKind::kCudaMempool: {
      MCD_ASSIGN_OR_RETURN(cudaMemPool_t pool, import_pool(ctx));
      return OpenPoolPointer(ctx, pool, r.ipc_handle, r.offset);
    }
    case IpcKind::kUnknown: break;
  }
  return Status(ErrorCode::kUnsupported, "this client cannot open tensor '" + r.name +
                                             "': its ipc_kind is none of host_shm, cuda_ipc and cuda_mempool");
}

Status CloseMapping(DeviceContext& ctx, const TensorRecord& r, void* ptr) {
  switch (r.ipc_kind) {
    case IpcKind::kHostShm: return CloseHostShm(ptr, r.bytes, r.offset);
    case IpcKind::kCudaIpc: return CloseCudaIpc(ctx, ptr, r.offset);
    case IpcKind::kCudaMempool: return ClosePoolPointer(ctx, ptr, r.offset);
    case IpcKind::kUnknown: break;
  }
  return Status(ErrorCode::kUnsupported, "cannot close tensor '" + r.name + "' of an unknown ipc_kind");
}

}  // namespace mcd
