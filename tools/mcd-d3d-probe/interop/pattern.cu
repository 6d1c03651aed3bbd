// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "interop/pattern.h"

namespace mcd {
namespace {

__global__ void FillPatternKernel(unsigned char* dst, size_t bytes, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = PatternByte(i, seed);
  }
}

__global__ void FillPatternSurfaceKernel(cudaSurfaceObject_t surface, int width, int height,
                                         uint32_t seed) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height) return;
  uint64_t i = (static_cast<uint64_t>(y) * width + x) * 4;
  uchar4 texel = make_uchar4(PatternByte(i, seed), PatternByte(i + 1, seed),
                             PatternByte(i + 2, seed), PatternByte(i + 3, seed));
  surf2Dwrite(texel, surface, x * 4, y);
}

}  // namespace

cudaError_t LaunchFillPattern(void* dst, size_t bytes, uint32_t seed, cudaStream_t stream) {
  unsigned blocks =
      static_cast<unsigned>((bytes + 255) / 256 < 65535 ? (bytes + 255) / 256 : 65535);
  FillPatternKernel<<<blocks, 256, 0, stream>>>(static_cast<unsigned char*>(dst), bytes, seed);
  return cudaGetLastError();
}

cudaError_t LaunchFillPatternSurface(cudaArray_t array, int width, int height, uint32_t seed,
                                     cudaStream_t stream) {
  cudaResourceDesc resource{};
  resource.resType = cudaResourceTypeArray;
  resource.res.array.array = array;
  cudaSurfaceObject_t surface = 0;
  cudaError_t err = cudaCreateSurfaceObject(&surface, &resource);
  if (err != cudaSuccess) return err;
  dim3 block(16, 16);
  dim3 grid((width + 15) / 16, (height + 15) / 16);
  FillPatternSurfaceKernel<<<grid, block, 0, stream>>>(surface, width, height, seed);
  err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  cudaDestroySurfaceObject(surface);
  return err;
}

}  // namespace mcd
