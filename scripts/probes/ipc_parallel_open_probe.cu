// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Whether the CUDA driver opens another process's allocations faster from several threads at
// once, with nothing of memcuda in the way: the parent makes GROUPS groups of COUNT allocations
// of SIZE bytes on device 0 and exports them; a fresh child (its context up before the clock)
// opens each group's handles with the number of threads given for it, reads one byte of each,
// and prints the group's wall time. Each group is fresh (made a moment before, never opened), so
// the rounds compare like with like.
//
//   nvcc -O2 -o ipc_parallel_open_probe scripts/probes/ipc_parallel_open_probe.cu -lpthread
//   ./ipc_parallel_open_probe 64 50331648 1,2,4,8,1,8
#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

std::vector<int> Threads(const char* list) {
  std::vector<int> out;
  for (const char* p = list; *p != '\0';) {
    out.push_back(std::atoi(p));
    while (*p != '\0' && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

int Child(const char* path, size_t count, const std::vector<int>& threads) {
  Check(cudaSetDevice(0), "cudaSetDevice");
  Check(cudaFree(nullptr), "context");
  FILE* in = std::fopen(path, "rb");
  std::vector<cudaIpcMemHandle_t> handles(count * threads.size());
  if (in == nullptr || std::fread(handles.data(), sizeof(cudaIpcMemHandle_t), handles.size(), in) !=
                           handles.size()) {
    std::fprintf(stderr, "cannot read the handles\n");
    return 1;
  }
  std::fclose(in);
  for (size_t g = 0; g < threads.size(); ++g) {
    std::vector<void*> ptrs(count, nullptr);
    std::atomic<size_t> next{0};
    std::atomic<int> failed{0};
    auto work = [&] {
      cudaSetDevice(0);
      for (size_t i; (i = next.fetch_add(1)) < count;) {
        if (cudaIpcOpenMemHandle(&ptrs[i], handles[g * count + i],
                                 cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
          failed.fetch_add(1);
          continue;
        }
        char byte = 0;
        if (cudaMemcpy(&byte, ptrs[i], 1, cudaMemcpyDeviceToHost) != cudaSuccess || byte != 7) {
          failed.fetch_add(1);
        }
      }
    };
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads[g]; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("threads %d: %zu opens+reads in %.2f ms (%.1f us each), %d failed\n", threads[g],
                count, ms, ms * 1000 / count, failed.load());
    std::fflush(stdout);
    for (void* p : ptrs)
      if (p != nullptr) cudaIpcCloseMemHandle(p);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--child") == 0) {
    return Child(argv[2], std::strtoull(argv[3], nullptr, 10), Threads(argv[4]));
  }
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s COUNT SIZE THREADS,THREADS,...\n", argv[0]);
    return 2;
  }
  size_t count = std::strtoull(argv[1], nullptr, 10);
  size_t size = std::strtoull(argv[2], nullptr, 10);
  std::vector<int> threads = Threads(argv[3]);
  Check(cudaSetDevice(0), "cudaSetDevice");
  std::vector<cudaIpcMemHandle_t> handles(count * threads.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    void* ptr = nullptr;
    Check(cudaMalloc(&ptr, size), "cudaMalloc");
    Check(cudaMemset(ptr, 7, 1), "cudaMemset");
    Check(cudaIpcGetMemHandle(&handles[i], ptr), "cudaIpcGetMemHandle");
  }
  Check(cudaDeviceSynchronize(), "sync");
  char path[] = "/tmp/ipc_parallel_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, handles.data(), handles.size() * sizeof(cudaIpcMemHandle_t)) < 0)
    return 1;
  close(fd);
  std::string cmd = std::string(argv[0]) + " --child " + path + " " + argv[1] + " " + argv[3];
  int rc = std::system(cmd.c_str());
  unlink(path);
  return rc == 0 ? 0 : 1;
}
