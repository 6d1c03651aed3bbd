// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Busy-polling before blocking: the process-wide policy.
//
// On a virtual machine, waking a thread that sleeps in the kernel costs tens of microseconds
// (the idle vCPU has to be brought back), which is more than the work of most steps of a
// lifecycle command. So a thread that expects an answer soon polls for a bounded time before it
// blocks. Idle processes still block: the spin only ever follows activity.
#pragma once

#include <chrono>

#include "memcuda/polling.h"

namespace mcd {

// Calls ready() until it returns true or the spin budget (SpinMicros, or `micros` when given)
// is spent. Returns ready()'s last answer.
template <typename Ready>
bool SpinUntil(Ready&& ready, int micros = SpinMicros()) {
  if (ready()) return true;
  if (micros <= 0) return false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  do {
    for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (ready()) return true;
    }
  } while (std::chrono::steady_clock::now() < deadline);
  return ready();
}

}  // namespace mcd
