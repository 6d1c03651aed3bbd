// Process identity helpers: a pid plus its start time names a process uniquely, so a reused pid
// does not keep a stack tensor alive.
#pragma once

#include <cstdint>
#include <string>

namespace mcd {

// Start time of `pid` in clock ticks since boot (/proc/<pid>/stat field 22); 0 when it is gone.
uint64_t ProcessStartTime(int64_t pid);
// True when `pid` runs and (when start_time != 0) started at `start_time`.
bool ProcessAlive(int64_t pid, uint64_t start_time);
std::string HostName();
int64_t NowMs();  // wall clock, ms since the Unix epoch
int64_t SteadyMs();  // monotonic clock, ms: for intervals (idle times)
// A random hex id of `bytes` bytes (from /dev/urandom, falling back to time and pid).
std::string RandomHex(size_t bytes);

}  // namespace mcd
