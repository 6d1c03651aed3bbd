// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Where the cost of a fresh process's first cudaMemPoolImportPointer goes (the pool's primer,
// docs/design.md): once per process, or per chunk of the pool?
//
// The parent makes an IPC-capable pool on device 0 and allocates from it: A (1 MiB), a 256 MiB
// spacer, B (1 MiB, so in another chunk than A) and C (1 MiB, right after B), and exports the
// pool and the three pointers. Then, six times, it allocates one more 1 MiB block D (as a tensor
// created after the pool was shared) and starts a fresh process of itself, which imports the
// pool and the pointers A, B, C, D in that order, timing each, then reads a byte of B (the
// process's first read) and of D. One line per process.
//
//   nvcc -O2 -o pool_pointer_probe scripts/probes/pool_pointer_probe.cu && ./pool_pointer_probe
#include "pool_probe_common.h"

namespace {

using namespace probe;
constexpr size_t kMiB = 1 << 20;

int Child(int fd, char** hex) {
  cudaMemPoolPtrExportData data[4];
  for (int i = 0; i < 4; ++i) data[i] = Unhex(hex[i]);  // parsed before anything is timed
  ContextUp();
  auto t0 = Clock::now();
  cudaMemPool_t pool = ImportPool(fd);
  GrantAccess(pool);
  Clock::time_point t[5] = {Clock::now()};
  void* ptr[4] = {};
  for (int i = 0; i < 4; ++i) {
    Check(cudaMemPoolImportPointer(&ptr[i], pool, &data[i]), "cudaMemPoolImportPointer");
    t[i + 1] = Clock::now();
  }
  char byte = 0;
  Check(cudaMemcpy(&byte, ptr[1], 1, cudaMemcpyDeviceToHost), "read B");
  auto t6 = Clock::now();
  Check(cudaMemcpy(&byte, ptr[3], 1, cudaMemcpyDeviceToHost), "read D");
  auto t7 = Clock::now();
  std::printf(
      "pool+access %.0f  A (first) %.0f  B (other chunk) %.0f  C (next to B) %.0f  D (made later) "
      "%.0f  "
      "read B %.0f  read D %.0f us\n",
      Us(t0, t[0]), Us(t[0], t[1]), Us(t[1], t[2]), Us(t[2], t[3]), Us(t[3], t[4]), Us(t[4], t6),
      Us(t6, t7));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "child") return Child(std::atoi(argv[2]), argv + 3);
  cudaMemPool_t pool = MakeIpcPool();
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  void *a = nullptr, *spacer = nullptr, *b = nullptr, *c = nullptr;
  Check(cudaMallocFromPoolAsync(&a, kMiB, pool, stream), "A");
  Check(cudaMallocFromPoolAsync(&spacer, 256 * kMiB, pool, stream), "spacer");
  Check(cudaMallocFromPoolAsync(&b, kMiB, pool, stream), "B");
  Check(cudaMallocFromPoolAsync(&c, kMiB, pool, stream), "C");
  Check(cudaMemsetAsync(b, 1, kMiB, stream), "cudaMemsetAsync");
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::string fd_text = std::to_string(ExportForChildren(pool));
  std::string hex_a = Hex(ExportPointer(a)), hex_b = Hex(ExportPointer(b)),
              hex_c = Hex(ExportPointer(c));
  for (int i = 0; i < 6; ++i) {
    void* d = nullptr;
    Check(cudaMallocFromPoolAsync(&d, kMiB, pool, stream), "D");
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    RunFreshChild(argv[0], {"child", fd_text, hex_a, hex_b, hex_c, Hex(ExportPointer(d))});
  }
  return 0;
}
