// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "interop/interop.h"

namespace mcd {

bool InteropReport::passed() const {
  if (!available || steps.empty()) return false;
  for (const InteropStep& step : steps) {
    if (!step.ok) return false;
  }
  return true;
}

#if !defined(_WIN32)
InteropReport ProbeD3D11Interop(GpuWorker&, size_t) {
  InteropReport report;
  report.api = "d3d11";
  report.reason = "Direct3D 11 exists on Windows only";
  return report;
}
#endif

}  // namespace mcd
