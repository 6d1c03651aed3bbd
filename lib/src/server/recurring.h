// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A failure that repeats (Redis refusing the take, the heartbeat not written): said when it
// starts and then once a minute while it lasts, not at every try. Private to the server.
#pragma once

#include <chrono>

namespace mcd {

class Recurring {
 public:
  using Clock = std::chrono::steady_clock;
  // Counts one more failure in a row; true when this one is to be said.
  bool Again() {
    auto now = Clock::now();
    if (count_++ == 0) since_ = now;
    if (count_ > 1 && now - said_ < std::chrono::minutes(1)) return false;
    said_ = now;
    return true;
  }
  int count() const { return count_; }  // failures in a row, 0 once it is over
  long long Seconds() const {
    return std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - since_).count();
  }
  void Over() { count_ = 0; }

 private:
  int count_ = 0;
  Clock::time_point since_, said_;
};

}  // namespace mcd
