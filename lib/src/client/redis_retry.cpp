// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// RedisRetry (redis_retry.h): what a failed try of a client's Redis work means. The client's
// thread.
#include "client/redis_retry.h"

#include <algorithm>
#include <thread>

#include "common/process.h"

namespace mcd {

bool Backoff::Wait() {
  if (Clock::now() + std::chrono::milliseconds(pause_ms_) > deadline_) return false;
  std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms_));
  pause_ms_ = std::min(pause_ms_ * 2, 200);
  return true;
}

void RedisRetry::MarkAway() { away_ms_ = SteadyMs(); }

bool RedisRetry::AwayLately() const { return away_ms_ != 0 && SteadyMs() - away_ms_ < timeout_ms_; }

std::optional<Status> RedisRetry::AfterFailure(RedisConnection& redis, const char* what,
                                               bool repeatable, bool tried, Status failed,
                                               Backoff& backoff) {
  bool lost = !redis.connected();
  if (lost && tried && !repeatable && redis.awaiting_reply() &&
      failed.code() != ErrorCode::kTryAgain) {
    return Status(ErrorCode::kUnavailable,
                  std::string("Redis went away during the ") + what +
                      ", which may or may not have taken effect: check with mcd-ls before "
                      "repeating it (" +
                      failed.message() + ")");
  }
  // As at connect: after Redis was away, its heartbeat may be back only a moment later.
  bool heartbeat_due = failed.code() == ErrorCode::kUnavailable && AwayLately();
  if (failed.code() != ErrorCode::kTryAgain && !lost && !heartbeat_due) return failed;
  if (failed.code() == ErrorCode::kTryAgain || lost) MarkAway();
  if (backoff.Wait()) return std::nullopt;
  if (failed.code() == ErrorCode::kTryAgain || heartbeat_due) return failed;
  return Status(ErrorCode::kTryAgain, "Redis at " + redis_url_ + " did not come back within " +
                                          std::to_string(timeout_ms_) +
                                          " ms (restarting?): try again (" + failed.message() +
                                          ")");
}

}  // namespace mcd
