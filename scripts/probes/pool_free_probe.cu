// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What a process pays to give back pool pointers it imported (ClosePoolPointer's cudaFree):
// the first one, and those after it, by the way they are freed.
//
// The parent makes an IPC-capable pool on device 0, allocates eight 1 MiB blocks from it and
// exports the pool and the pointers. Then, for each way of freeing, three fresh processes of
// itself import the pool and the eight pointers, read a byte of each, and free them one by one,
// timing each free (the call, then the wait for the stream when there is one):
//   async-sync    cudaFreeAsync on a stream of the process's own, then cudaStreamSynchronize
//   async-legacy  cudaFreeAsync on the legacy default stream, then cudaStreamSynchronize(0)
//   free          cudaFree
//   async-later   cudaFreeAsync on the process's stream for all eight, one synchronize at the end
//   free-busy     cudaFree while a 20 ms kernel of the process runs on another stream (does the
//                 free wait for the device?)
// One line per process: the first free, then the median of the other seven, in us.
//
//   nvcc -O2 -o pool_free_probe scripts/probes/pool_free_probe.cu && ./pool_free_probe
#include <algorithm>

#include "pool_probe_common.h"

namespace {

using namespace probe;
constexpr size_t kMiB = 1 << 20;
constexpr int kPointers = 8;

// Keeps an SM busy for about `ns` nanoseconds.
__global__ void Spin(long long ns) {
  long long start = clock64();
  while (clock64() - start < ns * 2) {  // ~2 GHz: an order of magnitude is all that matters
  }
}

int Child(const std::string& how, int fd, char** hex) {
  cudaMemPoolPtrExportData data[kPointers];
  for (int i = 0; i < kPointers; ++i) data[i] = Unhex(hex[i]);
  ContextUp();
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaMemPool_t pool = ImportPool(fd);
  GrantAccess(pool);
  void* ptr[kPointers] = {};
  char byte = 0;
  for (int i = 0; i < kPointers; ++i) {
    Check(cudaMemPoolImportPointer(&ptr[i], pool, &data[i]), "cudaMemPoolImportPointer");
    Check(cudaMemcpy(&byte, ptr[i], 1, cudaMemcpyDeviceToHost), "read");
  }
  double call[kPointers] = {}, wait[kPointers] = {};
  cudaStream_t busy;
  Check(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking), "cudaStreamCreate");
  double spin_us = 0;               // how long the kernel runs alone
  const char* still_running = "-";  // after the first free: was the kernel still running?
  if (how == "free-busy") {
    auto s0 = Clock::now();
    Spin<<<1, 1, 0, busy>>>(20000000);
    Check(cudaStreamSynchronize(busy), "Spin alone");
    spin_us = Us(s0, Clock::now());
  }
  for (int i = 0; i < kPointers; ++i) {
    if (how == "free-busy") {
      Spin<<<1, 1, 0, busy>>>(20000000);
      Check(cudaGetLastError(), "Spin");
    }
    auto t0 = Clock::now();
    if (how == "free" || how == "free-busy") {
      Check(cudaFree(ptr[i]), "cudaFree");
    } else {
      Check(cudaFreeAsync(ptr[i], how == "async-legacy" ? cudaStream_t{} : stream),
            "cudaFreeAsync");
    }
    auto t1 = Clock::now();
    if (how == "free-busy" && i == 0)
      still_running = cudaStreamQuery(busy) == cudaErrorNotReady ? "yes" : "no";
    if (how == "async-sync") Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (how == "async-legacy")
      Check(cudaStreamSynchronize(cudaStream_t{}), "cudaStreamSynchronize");
    auto t2 = Clock::now();
    call[i] = Us(t0, t1);
    wait[i] = Us(t1, t2);
  }
  Check(cudaStreamSynchronize(busy), "busy stream");
  auto t3 = Clock::now();
  Check(cudaStreamSynchronize(stream), "final cudaStreamSynchronize");
  cudaGetLastError();
  double last_sync = Us(t3, Clock::now());
  auto median = [](double* v) {
    std::vector<double> rest(v + 1, v + kPointers);
    std::sort(rest.begin(), rest.end());
    return rest[rest.size() / 2];
  };
  std::printf(
      "%-12s first free: call %.0f wait %.0f  others (median): call %.0f wait %.0f  final sync "
      "%.0f us",
      how.c_str(), call[0], wait[0], median(call), median(wait), last_sync);
  if (how == "free-busy")
    std::printf("  (kernel alone %.0f us; still running after the first free: %s)", spin_us,
                still_running);
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 + kPointers && std::string(argv[1]) == "child")
    return Child(argv[2], std::atoi(argv[3]), argv + 4);
  cudaMemPool_t pool = MakeIpcPool();
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  std::string fd_text = std::to_string(ExportForChildren(pool));  // before any pointer's export
  std::vector<std::string> hex;
  for (int i = 0; i < kPointers; ++i) {
    void* p = nullptr;
    Check(cudaMallocFromPoolAsync(&p, kMiB, pool, stream), "cudaMallocFromPoolAsync");
    Check(cudaMemsetAsync(p, 1, kMiB, stream), "cudaMemsetAsync");
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    hex.push_back(Hex(ExportPointer(p)));
  }
  for (const char* how : {"async-sync", "async-legacy", "free", "async-later", "free-busy"}) {
    for (int i = 0; i < 3; ++i) {
      std::vector<std::string> args = {"child", how, fd_text};
      args.insert(args.end(), hex.begin(), hex.end());
      RunFreshChild(argv[0], args);
    }
  }
  return 0;
}
