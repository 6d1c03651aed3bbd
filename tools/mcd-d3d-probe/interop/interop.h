// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Graphics <-> CUDA interop lifecycles owned by a GpuWorker (its DeviceContext):
// D3D11 on Windows, Vulkan external memory on Linux. Each probe creates the graphics resource,
// imports it into CUDA, moves data both ways with verification, and releases everything in the
// worker's release order (CUDA interop registrations, CUDA caches, then graphics resources). Used
// by mcd-d3d-probe(1).
#pragma once

#include <string>
#include <vector>

#include "memcuda/gpu_worker.h"
#include "memcuda/status.h"

namespace mcd {

struct InteropStep {
  std::string name;  // "create shared buffer", "import into CUDA", ...
  bool ok = false;
  double ms = 0;
  std::string detail;  // what failed, or facts worth printing (sizes, handle types)
};

struct InteropReport {
  std::string api;         // "vulkan" or "d3d11"
  bool available = false;  // the API and a matching device exist on this machine
  std::string reason;      // why not, when unavailable
  std::string device;      // the graphics adapter matched to the CUDA device
  std::vector<InteropStep> steps;
  bool passed() const;  // available and every step ok
};

// Both run their GPU work as jobs on `worker` (its device, thread and stream). Never throw.
// Vulkan: the loader is opened at run time, so a machine without one reports "unavailable".
InteropReport ProbeVulkanInterop(GpuWorker& worker, size_t bytes);
// D3D11 is compiled on Windows only; elsewhere it reports "unavailable".
InteropReport ProbeD3D11Interop(GpuWorker& worker, size_t bytes);

}  // namespace mcd
