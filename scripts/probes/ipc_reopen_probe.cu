// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What a process pays to open cuda_ipc tensors that share one allocation (a slab,
// docs/design.md) against tensors of their own, with nothing of memcuda in the way.
//
// The parent allocates on device 0 one 16 MiB slab and 16 allocations of 1 MiB, and exports a
// cudaIpcMemHandle of each. It then starts three fresh processes of itself with the handles on
// the command line. Each brings up its CUDA context (untimed), opens one 1 MiB allocation (the
// process's first open), then the 15 others one by one, then the slab 16 times (a tensor each,
// as memcuda's client opens a carved tensor), timing every cudaIpcOpenMemHandle and the first
// one-byte read after it. One line per process: medians in microseconds.
//
//   nvcc -O2 -o ipc_reopen_probe scripts/probes/ipc_reopen_probe.cu && ./ipc_reopen_probe
#include <algorithm>

#include "pool_probe_common.h"

namespace {

using namespace probe;
constexpr size_t kMiB = 1 << 20;
constexpr int kTensors = 16;

std::string HexOf(const cudaIpcMemHandle_t& handle) {
  char out[129];
  for (int i = 0; i < 64; ++i)
    std::snprintf(out + 2 * i, 3, "%02x", static_cast<unsigned char>(handle.reserved[i]));
  return out;
}

cudaIpcMemHandle_t HandleOf(const char* hex) {
  cudaIpcMemHandle_t handle{};
  for (int i = 0; i < 64; ++i)
    std::sscanf(hex + 2 * i, "%2hhx", reinterpret_cast<unsigned char*>(&handle.reserved[i]));
  return handle;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Child(char** hex) {
  cudaIpcMemHandle_t alone[kTensors];
  for (int i = 0; i < kTensors; ++i) alone[i] = HandleOf(hex[i]);
  cudaIpcMemHandle_t slab = HandleOf(hex[kTensors]);
  ContextUp();
  void* ptr[kTensors] = {};
  std::vector<double> own, own_read, shared, shared_read;
  double first = 0;
  char byte = 0;
  for (int i = 0; i < kTensors; ++i) {
    auto t0 = Clock::now();
    Check(cudaIpcOpenMemHandle(&ptr[i], alone[i], cudaIpcMemLazyEnablePeerAccess), "open alone");
    auto t1 = Clock::now();
    Check(cudaMemcpy(&byte, ptr[i], 1, cudaMemcpyDeviceToHost), "read");
    auto t2 = Clock::now();
    if (i == 0) {
      first = Us(t0, t1);
    } else {
      own.push_back(Us(t0, t1));
      own_read.push_back(Us(t1, t2));
    }
  }
  void* base[kTensors] = {};
  for (int i = 0; i < kTensors; ++i) {
    auto t0 = Clock::now();
    Check(cudaIpcOpenMemHandle(&base[i], slab, cudaIpcMemLazyEnablePeerAccess), "open slab");
    auto t1 = Clock::now();
    Check(cudaMemcpy(&byte, static_cast<char*>(base[i]) + i * kMiB, 1, cudaMemcpyDeviceToHost),
          "read");
    shared.push_back(Us(t0, t1));
    shared_read.push_back(Us(t1, Clock::now()));
    if (base[i] != base[0]) std::printf("slab opened at two addresses\n");
  }
  for (int i = 0; i < kTensors; ++i) Check(cudaIpcCloseMemHandle(ptr[i]), "close alone");
  // The driver counts the slab's opens: it stays mapped until the last close.
  for (int i = kTensors - 1; i > 0; --i) Check(cudaIpcCloseMemHandle(base[i]), "close slab");
  Check(cudaMemcpy(&byte, base[0], 1, cudaMemcpyDeviceToHost), "read after 15 closes");
  Check(cudaIpcCloseMemHandle(base[0]), "last close");
  std::printf(
      "first open %.1f | further own allocations: open %.1f, first read %.1f | the slab: first "
      "open %.1f, "
      "again %.1f (max %.1f), first read of each tensor %.1f\n",
      first, Median(own), Median(own_read), shared[0], Median({shared.begin() + 1, shared.end()}),
      *std::max_element(shared.begin() + 1, shared.end()),
      Median({shared_read.begin() + 1, shared_read.end()}));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == kTensors + 3 && std::string(argv[1]) == "--child") return Child(argv + 2);
  Check(cudaSetDevice(0), "cudaSetDevice");
  std::vector<std::string> args = {argv[0], "--child"};
  for (int i = 0; i < kTensors; ++i) {
    void* p = nullptr;
    Check(cudaMalloc(&p, kMiB), "cudaMalloc");
    cudaIpcMemHandle_t h;
    Check(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle");
    args.push_back(HexOf(h));
  }
  void* slab = nullptr;
  Check(cudaMalloc(&slab, kTensors * kMiB), "cudaMalloc slab");
  Check(cudaMemset(slab, 1, kTensors * kMiB), "memset");
  cudaIpcMemHandle_t h;
  Check(cudaIpcGetMemHandle(&h, slab), "cudaIpcGetMemHandle slab");
  args.push_back(HexOf(h));
  Check(cudaDeviceSynchronize(), "sync");
  for (int run = 0; run < 3; ++run) {
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argvv;
      for (auto& a : args) argvv.push_back(a.data());
      argvv.push_back(nullptr);
      execv("/proc/self/exe", argvv.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (status != 0) return 1;
  }
  return 0;
}
