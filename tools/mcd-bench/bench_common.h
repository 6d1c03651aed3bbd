// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What every part of mcd-bench shares: a row of results, the run's options, the stop signal,
// progress on stderr.
#pragma once

#include <cuda_runtime_api.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <thread>

#include "memcuda/client.h"
#include "memcuda/gpu_worker.h"
#include "tool_common.h"

namespace mcd::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

inline double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Row {
  std::string row, allocator;
  int device = 0;
  uint64_t bytes = 0;
  std::vector<double> us;  // one latency per operation
  double ops_per_s = 0;    // set for throughput rows; otherwise 1e6 / mean
  std::string note;
  double redis_cpu_us = -1;  // throughput rows: Redis's CPU time per operation (< 0: unknown)
  // Throughput rows: the server's CPU time per operation, and the share of the wall time its
  // command thread was on a CPU (< 0: unknown, e.g. no /proc entry for the server's pid).
  double server_cpu_us = -1, server_thread_busy = -1;
  // Throughput rows: the two steps of each pair apart (us holds their sums). Share rows: the
  // create in A, and in B the get + map and the touch (the rest of a share is the two hops
  // between the processes).
  std::vector<double> create_us = {}, delete_us = {}, get_us = {}, touch_us = {};
  // Share rows: B's release of each tensor afterwards (unmap and reference), outside the row's
  // time; the first is the process's first unmap.
  std::vector<double> release_us = {};
  // First-get rows: each fresh process's Client::Connect, outside the row's time.
  std::vector<double> connect_us = {};
};

inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// A figure for a row's note: rounded to a whole number.
inline std::string Whole(double x) { return std::to_string(static_cast<long>(x + 0.5)); }

// The NVIDIA kernel module's version (580.159.04, say), from /proc/driver/nvidia/version; ""
// where there is none. The CUDA calls give only the CUDA version the driver supports.
inline std::string NvidiaDriverVersion() {
  std::ifstream file("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(file, line)) return "";
  std::istringstream words(line);
  for (std::string word; words >> word;) {
    if (word.find('.') != std::string::npos &&
        word.find_first_not_of("0123456789.") == std::string::npos) {
      return word;
    }
  }
  return "";
}

struct Options {
  tools::CommonFlags flags;
  std::vector<uint64_t> sizes;
  int iterations = 200;
  double max_seconds = 5;
  std::vector<int> clients = {8};  // one throughput row per count
  int fresh = 20;
  int device = 0;  // the GPU of the GPU allocators' rows (--device)
  bool self_serve = false;
  bool gpu = true;
  std::string only;  // comma list of allocators to run (cuda_ipc,cuda_mempool,host_shm)
  std::vector<std::string> serve_args;  // --self-serve: more arguments for each mcd-serve
};

// Throughput clients per row at most: each is a process with its own Redis connection.
inline constexpr int kMaxClients = 256;

// The signal (SIGINT, SIGTERM, SIGHUP) that asked the run to stop, or 0. The run then stops at
// its next operation, gives back what it made and exits 128 + the signal; a second one kills.
inline volatile sig_atomic_t g_stop_signal = 0;
inline void OnStopSignal(int sig) { g_stop_signal = sig; }
inline bool Stopping() { return g_stop_signal != 0; }
inline void CatchStopSignals() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  action.sa_flags = static_cast<int>(SA_RESTART | SA_RESETHAND);
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &action, nullptr);
}
inline Status StoppedBySignal() {
  const char* name = g_stop_signal == SIGINT    ? "SIGINT"
                     : g_stop_signal == SIGTERM ? "SIGTERM"
                                                : "SIGHUP";
  return Status(ErrorCode::kStopped, std::string("stopped by ") + name);
}

// In a forked child: die with the bench, even when it is killed before it can stop its children.
inline void DieWithParent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);
}

inline bool Progress() { return isatty(STDERR_FILENO) == 1; }
inline void Say(const std::string& text) {
  if (Progress()) std::cerr << "\r\033[K" << text << std::flush;
}

}  // namespace mcd::bench
