// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A redis-server of this user's own, for machines where no Redis is configured. Public because
// two tools start one: `mcd-serve --spawn-redis` and mcd-bench (a throwaway one per run).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>

#include "memcuda/export.h"
#include "memcuda/redis.h"
#include "memcuda/status.h"

namespace mcd {

// A private redis-server on a Unix socket in the per-user runtime folder (the socket that
// DefaultRedisUrl() finds), for machines where no Redis is configured.
class MCD_API PrivateRedis {
 public:
  // Starts `redis_server` (a path or a name on PATH) and waits until it answers. A private
  // Redis already answering on the socket is used as it is: left running at the end while the
  // process that started (or adopted) it runs, else (that one was killed) adopted and stopped.
  // `dir`: where the socket goes instead of the runtime folder (then it must be new: mcd-bench).
  // `stop_with_caller`: the server gets SIGTERM when the calling thread ends, the process dying
  // however it dies included: for mcd-bench, whose Redis holds nothing worth keeping. mcd-serve's
  // outlives a crash of the server, so that the next one finds and cleans what it left.
  static Result<std::unique_ptr<PrivateRedis>> Start(
      const std::string& redis_server = "redis-server", const std::string& dir = "",
      bool stop_with_caller = false);
  ~PrivateRedis();  // stops the server and removes its socket
  PrivateRedis(const PrivateRedis&) = delete;
  PrivateRedis& operator=(const PrivateRedis&) = delete;
  const RedisUrl& url() const noexcept { return url_; }
  // The supervision of a Redis this process started or adopted: when it has died, reaps it (no
  // zombie) and starts it again, empty, on the same socket. True when it was restarted; an
  // error when it cannot be, or died more than kMaxRestartsPerMinute times in a minute. One
  // used as it is (its owner runs) is not this process's to restart.
  Result<bool> KeepRunning();
  static constexpr size_t kMaxRestartsPerMinute = 5;

 private:
  PrivateRedis() = default;
  Status Spawn();  // starts redis_server_ on url_ and waits until it answers
  int pid_ = -1;
  bool adopted_ = false;  // pid_ is not a child of this process
  uint64_t adopted_start_ = 0;
  RedisUrl url_;
  std::string owner_file_;    // who runs it (see private_redis.cpp)
  std::string redis_server_;  // "" for one used as it is
  std::string dir_;
  bool stop_with_caller_ = false;
  std::deque<std::chrono::steady_clock::time_point> deaths_;  // within the last minute
};

}  // namespace mcd
