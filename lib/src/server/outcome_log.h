// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The server's record of what each command came to: one log line per command, and the counters
// that the heartbeat publishes (commands_ok, errors_<code>, commands_failed, and a histogram of
// the time each create, get and delete took the server: latency_<op>). Thread-safe: the workers
// record the outcome of the frees they run after a reply has gone out.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "memcuda/status.h"

namespace mcd {

class OutcomeLog {
 public:
  using Clock = std::chrono::steady_clock;
  // Counts the outcome and logs "<op> name=<name> outcome=<ok|code> us=<since t0> <extra>";
  // times create, get and delete in their histograms.
  void Record(const char* op, const std::string& name, const Status& status, Clock::time_point t0,
              const std::string& extra = "");
  uint64_t ok() const { return ok_.load(); }
  // (error name, count) for each code met at least once, in code order.
  std::vector<std::pair<std::string, uint64_t>> Errors() const;

  // Upper bounds (us) of the latency histogram's buckets; a last one holds the rest.
  static constexpr std::array<uint64_t, 11> kLatencyBoundsUs = {
      50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000, 1000000};
  // What the histograms time: the server's work on each op, and how long a command waited in
  // the queue (by the client's clock: RecordQueueWait).
  static constexpr std::array<const char*, 4> kTimedOps = {"create", "get", "delete", "queue_wait"};
  // A command taken from the queue that its client sent `waited_ms` ago.
  void RecordQueueWait(int64_t waited_ms);
  // For the heartbeat's latency_<op> of kTimedOps[op]: each bucket's upper bound in us and its
  // count (not cumulative), then the sum in us and the count: "50:12,100:3,...,+Inf:0;4520;17".
  std::string LatencyText(size_t op) const;

 private:
  static constexpr size_t kCodeCount = static_cast<size_t>(ErrorCode::kNotHeld) + 1;
  struct Histogram {
    std::array<std::atomic<uint64_t>, kLatencyBoundsUs.size() + 1> buckets{};
    std::atomic<uint64_t> sum_us{0};
    std::atomic<uint64_t> count{0};
  };
  static void Observe(Histogram& h, uint64_t us);
  std::atomic<uint64_t> ok_{0};
  std::array<std::atomic<uint64_t>, kCodeCount> errors_{};
  std::array<Histogram, kTimedOps.size()> latency_{};
};

}  // namespace mcd
