// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Private: what the interop probes share. They record timed steps into their report and run
// as one job on the device's GpuWorker.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "interop/interop.h"

namespace mcd {

class StepRecorder {
 public:
  explicit StepRecorder(InteropReport& report) : report_(report) {}

  // Runs `fn` (which returns "" or what went wrong), times it and records it. A failed
  // `availability` step is not a failure: it means this machine has no such path; it sets the
  // report's reason and is not recorded. Returns whether the step succeeded.
  bool Step(const std::string& name, const std::function<std::string()>& fn,
            bool availability = false) {
    auto t0 = std::chrono::steady_clock::now();
    std::string error = fn();
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (availability && !error.empty()) {
      report_.reason = error;
      return false;
    }
    report_.steps.push_back({name, error.empty(), ms, error.empty() ? detail_ : error});
    detail_.clear();
    return error.empty();
  }
  // Facts to attach to the step being run (sizes, handle types).
  void Detail(std::string detail) { detail_ = std::move(detail); }
  InteropReport& report() { return report_; }

 private:
  InteropReport& report_;
  std::string detail_;
};

// Runs `Probe(report, bytes).Run(ctx)` as one job on `worker`; never throws.
template <typename Probe>
InteropReport RunProbeOnWorker(GpuWorker& worker, const char* api, size_t bytes) {
  InteropReport report;
  report.api = api;
  Status ran = worker.Call([&](DeviceContext& ctx) {
    Probe probe(report, bytes);
    probe.Run(ctx);
    return Status::Ok();
  });
  if (!ran.ok() && report.reason.empty()) report.reason = ran.message();
  return report;
}

}  // namespace mcd
