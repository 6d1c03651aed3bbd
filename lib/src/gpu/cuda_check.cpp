// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "gpu/cuda_check.h"

namespace mcd {

Status CudaStatus(cudaError_t err, const char* call) {
  // Reported here, so taken off the thread's last error: a later cudaGetLastError() on this
  // thread (after a kernel launch, say) must not see it again. A sticky error stays anyway.
  cudaGetLastError();
  std::string call_name(call);
  // Keep only the function name of the expression ("cudaMalloc(&p, n)" -> "cudaMalloc").
  if (auto paren = call_name.find('('); paren != std::string::npos) call_name.resize(paren);
  std::string message =
      call_name + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorStubLibrary:
    case cudaErrorCallRequiresNewerDriver:
      return Status(ErrorCode::kNoDevice, message);
    case cudaErrorMemoryAllocation:
      return Status(ErrorCode::kOutOfMemory, message);
    default:
      return Status(ErrorCode::kCudaError, message);
  }
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace mcd
