// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-example-scale: an example compute process. It takes a reference to an f32 tensor, changes
// it in place (x = x * FACTOR + 1) with a kernel on the GPU (or a loop for host tensors), and
// gives the reference back; every other process sees the new values, nothing is copied.
//
//   mcd-example-scale NAME FACTOR [--node NODE]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "memcuda/client.h"
#include "memcuda/memcuda.h"

__global__ void ScaleKernel(float* x, unsigned long long n, float factor) {
  unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = x[i] * factor + 1.0f;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("%s\n", mcd_version_info());
    return 0;
  }
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf(
        "usage: mcd-example-scale NAME FACTOR [--node NODE]\n"
        "An example compute process: takes a reference to f32 tensor NAME, sets x = x * FACTOR + "
        "1\n"
        "in place (a CUDA kernel, or a loop for host tensors), gives the reference back.\n"
        "Redis from MCD_REDIS_URL, as for the tools. See mcd-example-scale(1).\n");
    return 0;
  }
  if ((argc != 3 && argc != 5) || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: mcd-example-scale NAME FACTOR [--node NODE]\n");
    return 64;
  }
  mcd::ClientOptions options;
  auto url = mcd::ResolveRedisUrl("");
  if (!url.ok())
    return std::fprintf(stderr, "mcd-example-scale: error: %s\n", url.status().message().c_str()),
           64;
  options.redis_url = url.value();
  if (argc == 5 && std::strcmp(argv[3], "--node") == 0) options.node = argv[4];
  float factor = std::strtof(argv[2], nullptr);

  auto client = mcd::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "mcd-example-scale: error: %s\n", client.status().message().c_str());
    return mcd::ExitCodeFor(client.status().code());
  }
  auto view = client.value()->Get(argv[1]);  // refcount+1, mapped in this process
  if (!view.ok()) {
    std::fprintf(stderr, "mcd-example-scale: error: %s\n", view.status().message().c_str());
    return mcd::ExitCodeFor(view.status().code());
  }
  if (view->record.dtype != mcd::DType::kF32) {
    std::fprintf(stderr, "mcd-example-scale: error: %s is not f32\n", argv[1]);
    (void)client.value()->Release(argv[1]);
    return 64;
  }
  unsigned long long n = view->record.bytes / sizeof(float);
  float* x = static_cast<float*>(view->data);
  int rc = 0;
  if (view->record.device == mcd::kHostDevice) {
    for (unsigned long long i = 0; i < n; ++i) x[i] = x[i] * factor + 1.0f;
  } else {
    // The mapping belongs to the device's primary context: bind it, launch, wait.
    cudaSetDevice(view->record.device);
    ScaleKernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(x, n, factor);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      std::fprintf(stderr, "mcd-example-scale: error: kernel: %s\n", cudaGetErrorString(err));
      rc = 70;
    }
  }
  auto released = client.value()->Release(argv[1]);  // unmaps, then refcount-1
  if (!released.ok()) {
    std::fprintf(stderr, "mcd-example-scale: error: %s\n", released.status().message().c_str());
    return mcd::ExitCodeFor(released.status().code());
  }
  if (rc == 0) std::printf("scaled %llu values of %s\n", n, argv[1]);
  return rc;
}
