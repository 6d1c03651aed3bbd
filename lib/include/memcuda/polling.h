// The process-wide polling policy of libmemcuda's waits. Public because mcd-bench records it
// beside its results: the same build measures differently with polling on and off.
#pragma once

#include "memcuda/export.h"

namespace mcd {

// Microseconds a waiting thread of this process polls before it sleeps (for a Redis reply, a GPU
// worker's result, the worker's next job). MCD_SPIN_US when set (0: off); otherwise 200 on
// machines with 4 or more online CPUs and 0 on smaller ones, where a polling thread would take the
// CPU from the thread it waits for. Read once.
MCD_API int SpinMicros();

}  // namespace mcd
