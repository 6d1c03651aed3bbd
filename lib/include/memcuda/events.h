// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Lifecycle events: every change to a tensor, and every server start and stop, is appended to
// the Redis stream <prefix>:events by the same atomic script call that makes the change
// (memcuda(7), EVENTS). `mcd-ls --watch` prints them; the waits of Client (GetWhenReady,
// WaitFreed) block on them instead of polling.
//
// Thread affinity: an EventStream is used by one thread at a time (it owns one connection).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memcuda/export.h"
#include "memcuda/keys.h"
#include "memcuda/redis.h"
#include "memcuda/status.h"

namespace mcd {

struct MCD_API LifecycleEvent {
  std::string id;       // the stream entry's id "MS-SEQ": read after it to go on from here
  int64_t time_ms = 0;  // when Redis wrote it (ms since the epoch, Redis's clock), from the id
  // create, get, release, delete (the last reference went: the tensor is freed), reclaim (the
  // server gave back references of a process or server that is gone), server_start, server_stop;
  // and gap, which the reader makes (it is never in the stream): events after `id` were trimmed
  // from the capped stream (mcd-serve --event-history) before this reader read them. A gap's
  // time_ms is that of the first event kept after them.
  std::string event;
  std::string name;  // the tensor; "" for server events
  std::string node;
  int64_t refcount = 0;  // after the change (0: the tensor is freed)
  int64_t pid = 0;       // the process it is about: creator, holder, the one gone; 0 unknown
  // Why, where it says more: reclaim (holder_exited, owner_exited, server_stopped, server_lost,
  // stale), create (republished), server_start (took_over) and gap (trimmed); "" otherwise.
  std::string reason;
  // gap: how many events were lost; -1 when the reader cannot tell (it began at an id or a time
  // whose place in the history was trimmed before it read).
  int64_t missed = 0;
};

// One JSON object, the keys always in this order: id, time_ms, event, name, node, refcount, pid,
// reason; a gap adds missed (null when unknown).
MCD_API std::string EventToJson(const LifecycleEvent& event);

class MCD_API EventStream {
 public:
  // Opens a connection of its own, since reads block on it.
  static Result<std::unique_ptr<EventStream>> Open(const RedisUrl& url, const KeySpace& keys);
  ~EventStream();
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;

  // A position to read after: the newest event's id ("0-0" when there is none), so that the
  // next read returns what happens from now on.
  Result<std::string> Newest();
  // The position `age_ms` before now (Redis's clock): a read after it returns the events kept
  // since then. 0 reads from the oldest kept.
  Result<std::string> Since(int64_t age_ms);
  // The oldest event kept (nullopt-like: time_ms 0 when the stream is empty).
  Result<LifecycleEvent> Oldest();
  // Up to `count` events after `after`, oldest first, waiting up to `block_ms` (> 0) for the
  // first one to come (XREAD BLOCK: no polling); empty when none came in time. When the stream's
  // cap trimmed events after `after` before this read, a gap event comes first, with the count
  // lost when it is known: it is known after Newest() or a read of this stream that `after` ended,
  // and "0-0" means the oldest kept (no gap). Needs Redis 7 (XINFO's entries-added); without it
  // no gap is reported.
  Result<std::vector<LifecycleEvent>> Read(const std::string& after, int block_ms, int count = 256);
  // A fresh connection after a lost one (Redis restarted).
  Status Reconnect();

 private:
  EventStream(std::unique_ptr<RedisConnection> redis, std::string key);
  // The events after `after` and the stream's counters, read at one instant (MULTI), without
  // blocking; a gap first when there is one.
  Result<std::vector<LifecycleEvent>> ReadKept(const std::string& after, int count);
  // Blocks until an entry after `after` exists or `block_ms` ran out; true when one came.
  Result<bool> Block(const std::string& after, int block_ms);
  std::unique_ptr<RedisConnection> redis_;
  const std::string key_;
  // Where the last Newest() or read ended, and how many entries the stream had been given up to
  // there (-1: unknown): what a gap's count is measured from.
  std::string position_;
  int64_t position_number_ = -1;
};

}  // namespace mcd
