// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What a fresh process pays the CUDA driver to open a tensor of an IPC memory pool, step by step,
// with nothing of memcuda in the way (the pool's primer, docs/design.md).
//
// The parent makes an IPC-capable pool on device 0 (first growing it to RESERVE bytes and giving
// them back to the pool, to see whether the pool's size matters), allocates 1 MiB from it and
// exports the pool and the pointer. It then starts five fresh processes of itself, each with the
// pool's descriptor inherited and the pointer's export data on its command line. Each brings up
// its CUDA context (untimed), then times: importing the pool, granting the device access, importing
// the pointer, and reading one byte through it. One line per process.
//
//   nvcc -O2 -o pool_import_probe scripts/probes/pool_import_probe.cu
//   ./pool_import_probe 0; ./pool_import_probe 1073741824
#include "pool_probe_common.h"

namespace {

using namespace probe;

int Child(int fd, const char* hex) {
  cudaMemPoolPtrExportData data = Unhex(hex);
  ContextUp();
  auto t0 = Clock::now();
  cudaMemPool_t pool = ImportPool(fd);
  auto t1 = Clock::now();
  GrantAccess(pool);
  auto t2 = Clock::now();
  void* ptr = nullptr;
  Check(cudaMemPoolImportPointer(&ptr, pool, &data), "cudaMemPoolImportPointer");
  auto t3 = Clock::now();
  char byte = 0;
  Check(cudaMemcpy(&byte, ptr, 1, cudaMemcpyDeviceToHost), "touch");
  auto t4 = Clock::now();
  std::printf("import %.0f  set_access %.0f  import_pointer %.0f  touch %.0f  total %.0f us\n",
              Us(t0, t1), Us(t1, t2), Us(t2, t3), Us(t3, t4), Us(t0, t4));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "child") return Child(std::atoi(argv[2]), argv[3]);
  size_t reserve = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 0;
  cudaMemPool_t pool = MakeIpcPool();
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  if (reserve > 0) {
    void* big = nullptr;
    Check(cudaMallocFromPoolAsync(&big, reserve, pool, stream), "grow the pool");
    Check(cudaFreeAsync(big, stream), "cudaFreeAsync");
  }
  void* ptr = nullptr;
  Check(cudaMallocFromPoolAsync(&ptr, 1 << 20, pool, stream), "cudaMallocFromPoolAsync");
  Check(cudaMemsetAsync(ptr, 1, 1 << 20, stream), "cudaMemsetAsync");
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::string fd_text = std::to_string(ExportForChildren(pool));
  std::string hex = Hex(ExportPointer(ptr));
  for (int i = 0; i < 5; ++i) RunFreshChild(argv[0], {"child", fd_text, hex});
  return 0;
}
