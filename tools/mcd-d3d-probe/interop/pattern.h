// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Private: the byte pattern the interop probes write from CUDA kernels and check on the graphics
// side. Position-dependent and never zero, so an unwritten or misplaced byte cannot pass.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mcd {

// Byte `i` of the pattern for `seed`; the same on host and device.
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline unsigned char
    PatternByte(uint64_t i, uint32_t seed) {
  uint32_t x =
      static_cast<uint32_t>(i) * 2654435761u ^ (static_cast<uint32_t>(i >> 32) * 40503u) ^ seed;
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return static_cast<unsigned char>((x >> 24) | 1u);
}

// Fills `bytes` bytes at device address `dst` with the pattern, by a kernel on `stream`.
cudaError_t LaunchFillPattern(void* dst, size_t bytes, uint32_t seed, cudaStream_t stream);
// Fills a width x height array of 4-byte texels with the pattern (row-major, 4*width bytes a
// row), by a kernel writing through a surface object on `stream`; waits for it.
cudaError_t LaunchFillPatternSurface(cudaArray_t array, int width, int height, uint32_t seed,
                                     cudaStream_t stream);

}  // namespace mcd
