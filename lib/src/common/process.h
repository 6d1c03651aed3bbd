// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Process identity helpers: a pid plus its start time names a process uniquely, so a reused pid
// does not keep a stack tensor alive.
#pragma once

#include <cstdint>
#include <string>

#include "memcuda/status.h"

namespace mcd {

// Start time of `pid` in clock ticks since boot (/proc/<pid>/stat field 22); 0 when it is gone.
uint64_t ProcessStartTime(int64_t pid);
// pidfd_open(pid, 0) as a raw system call (its glibc wrapper is newer than some glibc that runs
// this library): a descriptor that names the process, -1 with errno set when it cannot. The
// caller owns it (wrap it in a UniqueFd).
int PidfdOpen(int64_t pid);
// The inode number of a pidfd of `pid` where pidfds live in pidfs (64-bit Linux 6.9 on): one
// number per process, never reused while the machine runs, the same from every PID namespace.
// 0 on an older kernel, or when `pid` is gone.
uint64_t PidfdInode(int64_t pid);
// Names one process beyond its pid, which the kernel reuses: the inode of its pidfd where the
// kernel has pidfs (checked with one fstat), else its start time (a read of /proc/<pid>/stat).
struct ProcessIdentity {
  uint64_t pidfd_ino = 0;
  uint64_t start_time = 0;
};
// True when `pid` runs and (when start_time != 0) started at `start_time`. A zombie (exited,
// not yet reaped by its parent) does not run.
bool ProcessAlive(int64_t pid, uint64_t start_time);
// True when `pid` (started at `start_time`, when not 0) is on its way out; false when it cannot
// be read (gone, or hidden). A killed process keeps its pid, and stays alive to ProcessAlive and
// its pidfd, while the kernel tears down what it held (a GPU context's teardown took 1.4 s on an
// H100), but the kernel marks it exiting (PF_EXITING) at once. One read of /proc/<pid>/stat.
bool ProcessExiting(int64_t pid, uint64_t start_time);
// Whether a thread of process `pid` is named `name` (its /proc/<pid>/task/<tid>/comm, which
// every user may read): how a process shows what it is to others without being theirs.
bool ProcessHasThreadNamed(int64_t pid, const std::string& name);
// Where a pid names a process: this boot of this machine and this process's PID namespace, as
// "<boot id>/<PID namespace inode>" ("" when unreadable). Two processes with the same text can
// judge each other's pids; a pid from any other (another host, a container with PID namespace
// of its own, a boot since) says nothing here.
const std::string& PidSpace();
std::string HostName();
int64_t NowMs();     // wall clock, ms since the Unix epoch
int64_t SteadyMs();  // monotonic clock, ms: for intervals (idle times)
// `n` bytes from the kernel's CSPRNG (getrandom), or kInternal where it has none: ids that
// must not be guessed never fall back to anything weaker, and a library never aborts its host
// process for it. The one source of random bits.
Status SecureRandom(void* out, size_t n);
// A random hex id of `bytes` bytes from SecureRandom.
Result<std::string> RandomHex(size_t bytes);

}  // namespace mcd
