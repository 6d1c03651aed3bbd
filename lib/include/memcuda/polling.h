// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

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

// Microseconds the server's serving loop polls its command socket for a client's next command
// (and the queue, every 50 us) before it goes back to its blocking take on Redis, whose waking
// costs a wake marker's round trip besides the thread's wake. MCD_SERVER_SPIN_US when set (0:
// off); otherwise kServerSpinMicros where SpinMicros() polls at all, else 0. Long enough for a
// client paced by its own work (a Python producer between two handovers) to find the loop awake
// (docs/design.md). Read once.
MCD_API int ServerSpinMicros();
inline constexpr int kServerSpinMicros = 1000;

}  // namespace mcd
