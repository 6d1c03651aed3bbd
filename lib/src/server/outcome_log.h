// The server's record of what each command came to: one log line per command, and the counters
// that the heartbeat publishes (commands_ok, errors_<code>, commands_failed). Thread-safe: the
// workers record the outcome of the frees they run after a reply has gone out.
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
  // Counts the outcome and logs "<op> name=<name> outcome=<ok|code> us=<since t0> <extra>".
  void Record(const char* op, const std::string& name, const Status& status, Clock::time_point t0,
              const std::string& extra = "");
  uint64_t ok() const { return ok_.load(); }
  // (error name, count) for each code met at least once, in code order.
  std::vector<std::pair<std::string, uint64_t>> Errors() const;

 private:
  static constexpr size_t kCodeCount = static_cast<size_t>(ErrorCode::kNotHeld) + 1;
  std::atomic<uint64_t> ok_{0};
  std::array<std::atomic<uint64_t>, kCodeCount> errors_{};
};

}  // namespace mcd
