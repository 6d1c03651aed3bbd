// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The shared queue's relay: a thread of its own that moves each command pushed onto the shared
// lifecycle list (`tensor_lifecycle`, the minimal form, which a plain `redis-cli LPUSH` uses) into
// this node's queue (`tensor_lifecycle:<node>`), where the serving loop takes it. Each move is
// one BLMOVE, atomic in Redis, so a command is never lost nor doubled between the two lists.
// With several nodes on one Redis, every server relays: a command lands on whichever server was
// waiting first, which forwards it on when it names another node (CommandApplier).
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "memcuda/redis.h"

namespace mcd {

class QueueRelay {
 public:
  // Relays from `shared_queue` ("" for none: Start does nothing) to `node_queue`, on a
  // connection of its own to `redis_url`.
  QueueRelay(RedisUrl redis_url, std::string shared_queue, std::string node_queue)
      : redis_url_(std::move(redis_url)),
        shared_(std::move(shared_queue)),
        own_(std::move(node_queue)) {}
  ~QueueRelay() { Stop(); }
  QueueRelay(const QueueRelay&) = delete;
  QueueRelay& operator=(const QueueRelay&) = delete;

  void Start();
  // Returns within about a second (the BLMOVE's timeout).
  void Stop();

 private:
  void Loop();

  const RedisUrl redis_url_;
  const std::string shared_;
  const std::string own_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace mcd
