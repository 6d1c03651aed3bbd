// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Private helpers turning CUDA runtime results into Status values that name the call.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "memcuda/status.h"

namespace mcd {

// Maps a CUDA error to a code: no device/driver -> kNoDevice, allocation -> kOutOfMemory,
// anything else -> kCudaError. The message reads "cudaMalloc: cudaErrorMemoryAllocation (out of
// memory)". Clears the calling thread's last error (cudaGetLastError).
Status CudaStatus(cudaError_t err, const char* call);

// Number of CUDA devices; 0 when there is no driver or no GPU.
int CudaDeviceCount();

}  // namespace mcd

// Evaluates a CUDA runtime call; returns a Status naming it from the enclosing function on error.
#define MCD_CUDA_RETURN(call)                         \
  do {                                                \
    cudaError_t mcd_cuda_err_ = (call);               \
    if (mcd_cuda_err_ != cudaSuccess) {               \
      return ::mcd::CudaStatus(mcd_cuda_err_, #call); \
    }                                                 \
  } while (false)
