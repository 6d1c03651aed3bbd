// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-bench's child processes (the same binary, run with --child): the consumer of the share row,
// the fresh process of the first-get row, the throughput clients; and what the parent and the
// children share to talk to each other and to Redis.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"

namespace mcd::bench {

// Every tensor a run makes, its children's too, is named bench.<the bench's pid>.<row>.<i>, so
// that what a failed or stopped row leaves can be found and given back.
std::string TensorPrefix(pid_t bench);
std::string TensorName(pid_t bench, const std::string& row, int i);
// This binary's path, for its children and for the mcd-serve beside it.
std::string SelfExe();

struct Child {
  pid_t pid = -1;
  FILE* to = nullptr;    // child's stdin
  FILE* from = nullptr;  // child's stdout
};

// Starts this binary with `args`, its stdin and stdout piped to the returned streams.
Child SpawnChild(const std::vector<std::string>& args);
// One whole line, however long: a throughput client sends every latency it measured on one
// line (8 bytes or so each, so tens of kilobytes).
std::string ReadLine(FILE* f);
// Sends `line` to the child and returns its one-line answer.
std::string Ask(Child& child, const std::string& line);
// Closes the child's streams and waits for it; its exit code (70 when it did not exit).
int WaitChild(Child& c);
// Reads one element through the mapping: proves the memory is reachable from this process.
Status Touch(const TensorView& view);
Result<std::unique_ptr<Client>> Connect(const tools::CommonFlags& flags);
// User + system CPU seconds in a /proc/<pid>[/task/<tid>]/stat file; negative when unreadable.
double ProcCpuSeconds(const std::string& stat_path);
// Gives back every reference still held on a tensor of this run (TensorPrefix), on a connection
// of its own. Returns how many tensors it found: none after rows that all went through.
Result<size_t> GiveBackRunTensors(const tools::CommonFlags& flags);
// For the child processes, which have nothing to clean up.
std::unique_ptr<Client> ConnectOrDie(const tools::CommonFlags& flags);

// Consumer of the share row: for each name on stdin, get + map + touch, answer "ok GET_US
// TOUCH_US"; on "release NAME" unmap it and give the reference back, and answer "done US".
int ChildShare(const tools::CommonFlags& flags, int device);
// A fresh process: connect and warm the CUDA context, then time the first Get + touch. Prints
// the get's time and the connect's.
int ChildFirstGet(const tools::CommonFlags& flags, int device, const std::string& name);
// A fresh process as ChildFirstGet's, with a Redis connection of its own instead of a client:
// its context up, then one PING timed, the floor of a first get's round trip to a Redis that
// was idle while the process started. Prints the round trip's time.
int ChildFirstRtt(const tools::CommonFlags& flags, int device);
// Throughput client: create + delete pairs for `seconds`; prints how many, then each pair's
// create and delete latencies, on one line.
int ChildChurn(const tools::CommonFlags& flags, int device, uint64_t bytes, double seconds, int id);

}  // namespace mcd::bench
