// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "common/spin.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace mcd {

int SpinMicros() {
  static const int micros = [] {
    if (const char* env = std::getenv("MCD_SPIN_US"); env != nullptr && *env != '\0') {
      return std::max(0, std::atoi(env));
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus >= 4 ? 200 : 0;
  }();
  return micros;
}

int ServerSpinMicros() {
  static const int micros = [] {
    if (const char* env = std::getenv("MCD_SERVER_SPIN_US"); env != nullptr && *env != '\0') {
      return std::max(0, std::atoi(env));
    }
    return SpinMicros() > 0 ? kServerSpinMicros : 0;
  }();
  return micros;
}

}  // namespace mcd
