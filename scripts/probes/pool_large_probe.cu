// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Whether a fresh process can import a large pointer of an IPC memory pool, with nothing of
// memcuda in the way: the parent makes an IPC-capable pool on device 0, allocates SIZE bytes from
// it and exports the pool and the pointer; a fresh child imports both, grants its device access
// and reads one byte, saying each step before it takes it (a crash shows where).
//
//   nvcc -O2 -o pool_large_probe scripts/probes/pool_large_probe.cu
//   ./pool_large_probe 4294967296; ./pool_large_probe 8589934592
#include "pool_probe_common.h"

namespace {

using namespace probe;

void Say(const char* step) {
  std::printf("child: %s\n", step);
  std::fflush(stdout);
}

int Child(int fd, const char* hex) {
  cudaMemPoolPtrExportData data = Unhex(hex);
  ContextUp();
  Say("importing the pool");
  cudaMemPool_t pool = ImportPool(fd);
  Say("granting access");
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = 0;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  if (cudaMemPoolSetAccess(pool, &access, 1) != cudaSuccess) cudaGetLastError();  // as memcuda
  Say("importing the pointer");
  void* ptr = nullptr;
  Check(cudaMemPoolImportPointer(&ptr, pool, &data), "cudaMemPoolImportPointer");
  Say("reading one byte");
  char byte = 0;
  Check(cudaMemcpy(&byte, ptr, 1, cudaMemcpyDeviceToHost), "cudaMemcpy");
  Say(byte == 7 ? "read 7: ok" : "read a wrong byte");
  Check(cudaFree(ptr), "cudaFree");
  return byte == 7 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "child") return Child(std::atoi(argv[2]), argv[3]);
  size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : (8ull << 30);
  cudaMemPool_t pool = MakeIpcPool();
  int fd = ExportForChildren(pool);
  void* ptr = nullptr;
  Check(cudaMallocFromPoolAsync(&ptr, bytes, pool, nullptr), "cudaMallocFromPoolAsync");
  Check(cudaMemset(ptr, 7, bytes), "cudaMemset");
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::printf("parent: %zu bytes allocated from the pool\n", bytes);
  std::fflush(stdout);
  int status = RunFreshChild(argv[0], {"child", std::to_string(fd), Hex(ExportPointer(ptr))});
  std::printf("parent: the child %s\n", WIFSIGNALED(status)        ? strsignal(WTERMSIG(status))
                                        : WEXITSTATUS(status) == 0 ? "read the byte"
                                                                   : "failed");
  Check(cudaFreeAsync(ptr, nullptr), "cudaFreeAsync");
  return status == 0 ? 0 : 1;
}
