// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/queue_relay.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "server/recurring.h"

namespace mcd {

void QueueRelay::Start() {
  if (shared_.empty()) return;
  thread_ = std::thread([this] { Loop(); });
}

void QueueRelay::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void QueueRelay::Loop() {
  RedisOptions ropt;
  ropt.command_timeout_ms = 3000;  // past the BLMOVE's own second
  std::unique_ptr<RedisConnection> conn;
  Recurring failed;
  int backoff_ms = 100;
  while (!stop_) {
    if (!conn || !conn->connected()) {
      auto c = RedisConnection::Connect(redis_url_, ropt);
      if (!c.ok()) {
        if (failed.Again()) Log(LogLevel::kWarn, "shared queue relay: " + c.status().ToString());
        std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
        backoff_ms = std::min(backoff_ms * 2, 2000);
        continue;
      }
      conn = std::move(c).value();
    }
    // To the end the serving loop takes from last: FIFO with what was pushed there directly.
    auto moved = conn->Command({"BLMOVE", shared_, own_, "RIGHT", "LEFT", "1"});
    if (moved.ok()) {
      failed.Over();
      backoff_ms = 100;
      continue;
    }
    if (failed.Again()) {
      Log(LogLevel::kWarn,
          "shared queue relay (" + shared_ + " -> " + own_ + "): " + moved.status().ToString());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, 2000);
  }
}

}  // namespace mcd
