// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Trying a client's Redis work again while Redis is away for a while (restarting, loading, failing
// over), within the client's timeout: the pauses between tries (Backoff), what a failed try means
// (another try, or the error to report), and when Redis was last found away, since a Redis back
// from that has no live heartbeat until its server writes it again. Used by one Client, so by
// one thread at a time.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "memcuda/redis.h"
#include "memcuda/status.h"

namespace mcd {

// Pauses between tries within a timeout: 20 ms, doubling up to 200 ms. Wait() sleeps and says
// whether there is time for another try.
class Backoff {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Backoff(int timeout_ms)
      : deadline_(Clock::now() + std::chrono::milliseconds(timeout_ms)) {}
  bool Wait();

 private:
  Clock::time_point deadline_;
  int pause_ms_ = 20;
};

class RedisRetry {
 public:
  // `timeout_ms`: how long Redis may stay away; `redis_url`: named (redacted) in the error.
  RedisRetry(int timeout_ms, std::string redis_url)
      : timeout_ms_(timeout_ms), redis_url_(std::move(redis_url)) {}

  int timeout_ms() const { return timeout_ms_; }
  // Redis was found away now.
  void MarkAway();
  // Whether Redis was found away within the timeout: a Redis back from that has no live
  // heartbeat until the server writes it again, so "no server" then is waited through too.
  bool AwayLately() const;

  // Runs `op` again while Redis answers that it is loading, busy or failing over (kTryAgain:
  // it did not run), while the connection is lost before any of the op's requests left (it
  // did not run either), and, where `repeatable`, while the connection is lost or refused
  // (Redis restarting), until the timeout. A lost connection that does not come back in time
  // is kTryAgain; one lost with a request of an op that is not repeatable sent and unanswered
  // leaves its outcome unknown; "no server" just after Redis was away is waited through too.
  // A template, not a std::function: it wraps every get and release.
  template <typename Op>
  auto Run(RedisConnection& redis, const char* what, bool repeatable, Op op) -> decltype(op()) {
    Backoff backoff(timeout_ms_);
    for (;;) {
      // A connection Redis closed since the last request (a restart) is found before the op
      // is sent, and reconnected first (refused: still lost).
      if (!repeatable) redis.DropIfClosedByPeer();
      Status failed = redis.connected() ? Status::Ok() : redis.Reconnect();
      bool tried = failed.ok();
      if (tried) {
        auto result = op();
        if (result.ok()) return result;
        failed = result.status();
      }
      std::optional<Status> final_status =
          AfterFailure(redis, what, repeatable, tried, std::move(failed), backoff);
      if (final_status) return *std::move(final_status);
    }
  }

 private:
  // After a try of Run that failed with `failed` (`tried`: the op ran): the status to return,
  // or nullopt once the backoff waited for another try.
  std::optional<Status> AfterFailure(RedisConnection& redis, const char* what, bool repeatable,
                                     bool tried, Status failed, Backoff& backoff);

  const int timeout_ms_;
  const std::string redis_url_;
  int64_t away_ms_ = 0;  // SteadyMs when Redis was last found away; 0: never
};

}  // namespace mcd
