// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What the pool probes share: an IPC pool on device 0 whose descriptor the probe's fresh child
// processes inherit, the export data of pointers passed to them as hex, and timing.
#pragma once

#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace probe {

using Clock = std::chrono::steady_clock;

inline double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

inline void Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

inline std::string Hex(const cudaMemPoolPtrExportData& data) {
  char out[129];
  for (int i = 0; i < 64; ++i)
    std::snprintf(out + 2 * i, 3, "%02x", static_cast<unsigned char>(data.reserved[i]));
  return out;
}

inline cudaMemPoolPtrExportData Unhex(const char* hex) {
  cudaMemPoolPtrExportData data{};
  for (int i = 0; i < 64; ++i) std::sscanf(hex + 2 * i, "%2hhx", &data.reserved[i]);
  return data;
}

// An IPC-capable pool on device 0 that keeps what is given back to it.
inline cudaMemPool_t MakeIpcPool() {
  Check(cudaSetDevice(0), "cudaSetDevice");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  Check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  unsigned long long keep_all = ~0ull;
  Check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all),
        "release threshold");
  return pool;
}

// The pool's descriptor, inherited by the children across exec.
inline int ExportForChildren(cudaMemPool_t pool) {
  int fd = -1;
  Check(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0),
        "cudaMemPoolExportToShareableHandle");
  fcntl(fd, F_SETFD, 0);
  return fd;
}

inline cudaMemPoolPtrExportData ExportPointer(void* ptr) {
  cudaMemPoolPtrExportData data;
  Check(cudaMemPoolExportPointer(&data, ptr), "cudaMemPoolExportPointer");
  return data;
}

// In a child: device 0's context up, untimed.
inline void ContextUp() {
  Check(cudaSetDevice(0), "cudaSetDevice");
  Check(cudaFree(nullptr), "context");
}

inline cudaMemPool_t ImportPool(int fd) {
  cudaMemPool_t pool;
  Check(cudaMemPoolImportFromShareableHandle(&pool,
                                             reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                             cudaMemHandleTypePosixFileDescriptor, 0),
        "cudaMemPoolImportFromShareableHandle");
  return pool;
}

inline void GrantAccess(cudaMemPool_t pool) {
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = 0;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  Check(cudaMemPoolSetAccess(pool, &access, 1), "cudaMemPoolSetAccess");
}

// Runs this program again as a fresh process with `args` (argv[1] on) and waits for it; returns
// its wait status.
inline int RunFreshChild(const char* argv0, const std::vector<std::string>& args) {
  std::vector<char*> argv = {const_cast<char*>(argv0)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace probe
