// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Client's waits (client.h): a check, then a block on the event stream until an event that may
// change the check's answer, then the check again. The stream position is read before the first
// check, so a change that lands between a check and the block is read from the stream, not
// missed; and the block is XREAD BLOCK, so a waiting process costs nothing until Redis wakes it.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "memcuda/client.h"
#include "memcuda/events.h"
#include "memcuda/heartbeat.h"

namespace mcd {

namespace {

using Clock = std::chrono::steady_clock;

// The longest single block between two checks.
constexpr int kLongestBlockMs = 10000;
// The pause before the stream is opened again after Redis went away from it.
constexpr int kStreamRetryMs = 200;

// Whether a failure says only that Redis is away for now (restarting, loading, failing over):
// a wait outlasts it, to its own end.
bool RedisAway(const Status& status) {
  return status.code() == ErrorCode::kTryAgain || status.code() == ErrorCode::kUnavailable;
}

// Whether a get's failure means "not yet" to a wait: not there yet, being filled, or not to be
// told yet (Redis loading, a server putting its tensors back), until the wait's own end, whatever
// the client's timeout.
bool NotYet(const Status& status) {
  return status.code() == ErrorCode::kNotFound || status.code() == ErrorCode::kNotReady ||
         status.code() == ErrorCode::kTryAgain;
}

// Runs `check` until it answers true, blocking between tries until an event that `wakes` picks.
// True once `check` did, false when `timeout_ms` (< 0: never) ran out first.
Result<bool> WaitOnEvents(EventStream& events, int timeout_ms,
                          const std::function<Result<bool>()>& check,
                          const std::function<bool(const LifecycleEvent&)>& wakes) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  MCD_ASSIGN_OR_RETURN(std::string cursor, events.Newest());
  for (;;) {
    MCD_ASSIGN_OR_RETURN(bool done, check());
    if (done) return true;
    for (bool woken = false; !woken;) {
      int block_ms = kLongestBlockMs;
      if (timeout_ms >= 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) return false;
        block_ms = static_cast<int>(std::min<int64_t>(block_ms, left.count()));
      }
      auto read = events.Read(cursor, block_ms);
      if (!read.ok() && RedisAway(read.status())) {
        // The check then says whether Redis is back; an event made meanwhile is still read
        // from the cursor once the stream is open again.
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(block_ms, kStreamRetryMs)));
        (void)events.Reconnect();
        break;
      }
      MCD_ASSIGN_OR_RETURN(std::vector<LifecycleEvent> got, std::move(read));
      // A block that ended quiet checks again too: a change that wrote no event (a hash edited
      // by hand) is then seen within kLongestBlockMs. So does a gap: the event it waits for may
      // be among those trimmed before it read them.
      woken = got.empty();
      for (const LifecycleEvent& e : got) {
        cursor = e.id;
        woken = woken || e.event == "gap" || wakes(e);
      }
    }
  }
}

std::string Seconds(int timeout_ms) {
  std::string s = std::to_string(timeout_ms / 1000.0);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s + " s";
}

// The event stream a wait blocks on.
Result<std::unique_ptr<EventStream>> OpenEvents(Client& client) {
  MCD_RETURN_IF_ERROR(client.CanWait());
  return EventStream::Open(client.options().redis_url, client.options().keys);
}

// Runs `attempt` until it succeeds, blocking between tries until an event that `wakes` picks; its
// "not yet" failures (NotYet) are waited through, others end the wait. kTimeout says `what`
// "within" the timeout, with the last failure.
template <typename T>
Result<T> WaitToGet(Client& client, int timeout_ms, const std::function<Result<T>()>& attempt,
                    const std::function<bool(const LifecycleEvent&)>& wakes,
                    const std::string& what) {
  MCD_ASSIGN_OR_RETURN(auto events, OpenEvents(client));
  std::optional<Result<T>> got;
  auto check = [&]() -> Result<bool> {
    got = attempt();
    if (got->ok()) return true;
    if (NotYet(got->status())) return false;
    return got->status();
  };
  MCD_ASSIGN_OR_RETURN(bool ready, WaitOnEvents(*events, timeout_ms, check, wakes));
  if (!ready) {
    return Status(ErrorCode::kTimeout,
                  what + " within " + Seconds(timeout_ms) + " (" + got->status().message() + ")");
  }
  return std::move(*got);
}

}  // namespace

Status Client::CanWait() {
  // The node's server must write events, or a wait would block to its end for nothing.
  MCD_ASSIGN_OR_RETURN(HeartbeatRecord heartbeat, ServerRecord());
  if (heartbeat.event_history == 0) {
    return Status(ErrorCode::kUnavailable,
                  "the server of node '" + options().node +
                      "' keeps no lifecycle events (mcd-serve --event-history), which waits need");
  }
  return Status::Ok();
}

Result<TensorView> Client::GetWhenReady(const std::string& name, int timeout_ms,
                                        bool take_reference) {
  // Any change to the name, and a server start (a restarted server republishes what it holds).
  return WaitToGet<TensorView>(
      *this, timeout_ms, [&] { return take_reference ? Get(name) : Open(name); },
      [&](const LifecycleEvent& e) { return e.name == name || e.event == "server_start"; },
      "tensor '" + name + "' was not ready");
}

Result<std::vector<TensorView>> Client::GetSetWhenReady(const std::string& set, int timeout_ms) {
  // A change to any member's name (a set's members are committed together), and a server start.
  const std::string prefix = set + "/";
  return WaitToGet<std::vector<TensorView>>(
      *this, timeout_ms, [&] { return GetSet(set); },
      [&](const LifecycleEvent& e) {
        return e.name.compare(0, prefix.size(), prefix) == 0 || e.event == "server_start";
      },
      "tensor set '" + set + "' was not there");
}

Status Client::WaitFreed(const std::string& name, int64_t ctime_ms, int timeout_ms) {
  MCD_ASSIGN_OR_RETURN(auto events, OpenEvents(*this));
  int64_t refcount = 0;
  auto check = [&]() -> Result<bool> {
    auto record = Stat(name);
    if (!record.ok()) {
      if (record.status().code() == ErrorCode::kNotFound) return true;
      if (record.status().code() == ErrorCode::kTryAgain) return false;  // as in GetWhenReady
      return record.status();
    }
    refcount = record->refcount;
    return record->ctime_ms != ctime_ms;  // another tensor took the name: this one is gone
  };
  auto wakes = [&](const LifecycleEvent& e) { return e.name == name && e.refcount <= 0; };
  MCD_ASSIGN_OR_RETURN(bool freed, WaitOnEvents(*events, timeout_ms, check, wakes));
  if (!freed) {
    return Status(ErrorCode::kTimeout, "tensor '" + name + "' still had " +
                                           std::to_string(refcount) + " reference(s) after " +
                                           Seconds(timeout_ms));
  }
  return Status::Ok();
}

}  // namespace mcd
