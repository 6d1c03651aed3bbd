// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// How many blocks of one size a ready stock holds: the rule both stocks follow, GPU memory's
// (ready_stock.cpp) and host shared memory's (host_stock.cpp). Private to libmemcuda.
#pragma once

#include <algorithm>
#include <cstdint>

#include "alloc/allocator.h"

namespace mcd {

// The demand for one size: one block more than the most tensors of the size alive at once over
// the last second or two (two Trims), less those alive now, at most kReadyPerSize; none once the
// size has not been created for kReadyIdleMs. So every tensor of a burst as large as the last
// one finds its block, and a create right after a delete takes another block than the one the
// delete gave back.
struct StockDemand {
  int live = 0;          // blocks of the size handed out and not freed yet
  int peak = 0;          // the most live at once, over the last two Trims or so
  int window_peak = 0;   // the most live at once since the last Trim
  bool created = false;  // a create of the size since the last Trim
  int64_t last_create_ms = 0;

  bool Idle(int64_t now_ms) const { return now_ms - last_create_ms > kReadyIdleMs; }

  int Target(int64_t now_ms) const {
    if (Idle(now_ms)) return 0;
    return std::max(0, std::min(kReadyPerSize, peak + 1 - live));
  }

  // A create of the size, before its block is handed out: demand seen before an idle spell is
  // forgotten.
  void Asked(int64_t now_ms) {
    if (Idle(now_ms)) peak = window_peak = live;
    last_create_ms = now_ms;
    created = true;
  }

  void HandOut() {
    ++live;
    window_peak = std::max(window_peak, live);
    peak = std::max(peak, live);
  }

  void Freed() {
    if (live > 0) --live;
  }

  // At each Trim while the size is created: demand older than the last window is forgotten.
  // False (nothing changed) when no create of the size came since the last Trim.
  bool NextWindow() {
    if (!created) return false;
    created = false;
    peak = std::max(window_peak, live);
    window_peak = live;
    return true;
  }
};

}  // namespace mcd
