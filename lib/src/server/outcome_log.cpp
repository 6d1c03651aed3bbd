// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/outcome_log.h"

#include <cstring>

#include "common/log.h"

namespace mcd {

void OutcomeLog::Record(const char* op, const std::string& name, const Status& status,
                        Clock::time_point t0, const std::string& extra) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
  if (status.ok()) {
    ok_++;
  } else {
    errors_[static_cast<size_t>(status.code()) % kCodeCount]++;
  }
  for (size_t i = 0; i + 1 < kTimedOps.size(); ++i) {
    if (std::strcmp(op, kTimedOps[i]) == 0)
      Observe(latency_[i], us > 0 ? static_cast<uint64_t>(us) : 0);
  }
  LogLevel level = status.ok() ? LogLevel::kInfo : LogLevel::kWarn;
  if (!LogEnabled(level)) return;
  std::string line = std::string(op) + " name=" + (name.empty() ? "-" : name) +
                     " outcome=" + (status.ok() ? "ok" : ErrorName(status.code())) +
                     " us=" + std::to_string(us);
  if (!extra.empty()) line += " " + extra;
  if (!status.ok()) line += " reason=\"" + status.message() + "\"";
  Log(level, line);
}

void OutcomeLog::Observe(Histogram& h, uint64_t us) {
  size_t bucket = 0;
  while (bucket < kLatencyBoundsUs.size() && us > kLatencyBoundsUs[bucket]) ++bucket;
  h.buckets[bucket]++;
  h.sum_us += us;
  h.count++;
}

void OutcomeLog::RecordQueueWait(int64_t waited_ms) {
  // A client's clock ahead of the server's reads as no wait at all.
  Observe(latency_[kTimedOps.size() - 1],
          waited_ms > 0 ? static_cast<uint64_t>(waited_ms) * 1000 : 0);
}

std::string OutcomeLog::LatencyText(size_t op) const {
  const Histogram& h = latency_.at(op);
  std::string text;
  for (size_t i = 0; i < h.buckets.size(); ++i) {
    std::string bound = i < kLatencyBoundsUs.size() ? std::to_string(kLatencyBoundsUs[i]) : "+Inf";
    text += (i ? "," : "") + bound + ":" + std::to_string(h.buckets[i].load());
  }
  return text + ";" + std::to_string(h.sum_us.load()) + ";" + std::to_string(h.count.load());
}

std::vector<std::pair<std::string, uint64_t>> OutcomeLog::Errors() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t c = 1; c < kCodeCount; ++c) {
    uint64_t n = errors_[c].load();
    if (n != 0) out.emplace_back(ErrorName(static_cast<int32_t>(c)), n);
  }
  return out;
}

}  // namespace mcd
