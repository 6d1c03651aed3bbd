// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The serving connection and every change committed on it. One owner: the server's main
// connection to Redis is held here alone, with the queue of replies due on it, so that no reply
// is read out of order by construction: the other modules reach Redis through Command (or
// Drained, for a call that takes a connection), which first reads every reply due and settles
// its commit. Every change a command makes (its hash, its reply, its removal from the processing
// list) is one call of the commit script, so it happens whole or not at all. A batch's commits go
// out pipelined, without waiting for their results, and a take of the next commands (plain
// LMOVEs) can travel on the same connection ahead of them; results are read back in the order
// sent (Drain) and handed to each commit's own continuation (see Continuation for the order they
// run in). NOSCRIPT (Redis restarted or flushed
// its scripts) is handled here, once for every caller. Main thread of the server only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memcuda/keys.h"
#include "memcuda/redis.h"
#include "redis/script_calls.h"
#include "server/request.h"

namespace mcd {

struct Pending;
// What the code that made a commit does with its result: run once, after every result read with
// it has been read. Within one drain they run in the order sent, except that one which uses the
// connection (Drained, Command, CommitNow) first drains all that is due, so the continuations
// of commits sent after its drain began run before the rest of its own drain's. Commits naming
// the same tensor still settle in the order sent: the server drains before it handles a command
// naming a tensor that is due (IsDue).
using Continuation = std::function<void(Pending&, Result<CommitResult>)>;

// A commit waiting to be sent with the rest of its batch, and its continuation.
struct Pending {
  std::vector<std::string> args;
  std::string name;  // the tensor it changes ("" for none)
  Continuation done;
  Route route;
  std::string req;  // a socket command's
  // A socket command's success reply, which the commit does not write to Redis: `reply`, and
  // for an "incr" the new refcount then tails[0] (still referenced) or tails[1] (freed).
  std::string reply;
  std::vector<std::string> tails;
};

// What a commit does to its tensor hash, with what the action needs: kHset the field/value
// pairs; kIncr the holder ("" for a reference bound to nobody), the change of the count and the
// reply's tails while the tensor is still referenced and once it is freed (after the new count),
// and whether a delete gives back only the holder's own reference (Command::own_only); kUnhold the
// holder (one that died). Views of the caller's strings, read within Make.
struct CommitChange {
  CommitAction action = CommitAction::kNone;
  const std::vector<std::string>* fields = nullptr;
  std::string_view holder;
  int delta = 0;
  std::string_view held_tail;
  std::string_view freed_tail;
  bool own_only = false;
  // kHsetMany, kDelMany: every member of the set the commit names (its `name`).
  const std::vector<CommitMember>* members = nullptr;
  // Del, Incr, Unhold of a member of a tensor set: the set, whose list and record lose the member
  // when its hash goes (Of).
  std::string_view set;

  // This change, of a tensor of set `set` ("" for none).
  CommitChange Of(std::string_view of_set) const {
    CommitChange change = *this;
    change.set = of_set;
    return change;
  }

  static CommitChange None() { return CommitChange{}; }
  static CommitChange Del() { return CommitChange{CommitAction::kDel}; }
  static CommitChange Hset(const std::vector<std::string>& fields) {
    return CommitChange{CommitAction::kHset, &fields};
  }
  static CommitChange Incr(std::string_view holder, int delta, std::string_view held_tail,
                           std::string_view freed_tail, bool own_only = false) {
    CommitChange change{CommitAction::kIncr, nullptr, holder, delta, held_tail, freed_tail};
    change.own_only = own_only;
    return change;
  }
  static CommitChange Unhold(std::string_view holder) {
    return CommitChange{CommitAction::kUnhold, nullptr, holder};
  }
  static CommitChange HsetMany(const std::vector<CommitMember>& members) {
    CommitChange change{CommitAction::kHsetMany};
    change.members = &members;
    return change;
  }
  static CommitChange DelMany(const std::vector<CommitMember>& members) {
    CommitChange change{CommitAction::kDelMany};
    change.members = &members;
    return change;
  }
};

// What the pipeline needs of the server's options.
struct CommitOptions {
  KeySpace keys;
  std::string node;
  int reply_ttl_s = 60;  // a queued command's reply
  int done_ttl_s = 60;   // its first result, by which a repeated req is recognised
  uint64_t event_history = 0;
};

// The serving connection, lent by CommitPipeline::Drained for the length of one call that needs
// it. The holder may leave replies on it that the pipeline does not know of (an Append not yet
// read), so while a lease lives the pipeline is not to be used: asserted. Move-only; lives no
// longer than the pipeline.
class ConnectionLease {
 public:
  ConnectionLease(ConnectionLease&& other) noexcept
      : redis_(other.redis_), lent_(std::exchange(other.lent_, nullptr)) {}
  ConnectionLease& operator=(ConnectionLease&&) = delete;
  ConnectionLease(const ConnectionLease&) = delete;
  ConnectionLease& operator=(const ConnectionLease&) = delete;
  ~ConnectionLease() {
    if (lent_ != nullptr) *lent_ = false;
  }
  RedisConnection& operator*() const { return *redis_; }
  RedisConnection* operator->() const { return redis_; }

 private:
  friend class CommitPipeline;
  ConnectionLease(RedisConnection& redis, bool& lent) : redis_(&redis), lent_(&lent) {
    lent = true;
  }
  RedisConnection* redis_;
  bool* lent_;
};

class CommitPipeline {
 public:
  CommitPipeline(std::unique_ptr<RedisConnection> redis, CommitOptions opt, std::string instance);

  // The serving connection, once every reply due on it was read and its commit settled: the
  // only way to it, for a call that needs one (a script, a claim of the heartbeat), lent until
  // the lease ends (with the call's full expression, for a temporary). Asking for it while a
  // drain is reading, or using the pipeline while it is lent, is a bug, asserted.
  ConnectionLease Drained();
  // One plain command on the serving connection, after every reply due.
  Result<RedisValue> Command(const std::vector<std::string_view>& argv) {
    return Drained()->Command(argv);
  }
  bool connected() const { return redis_->connected(); }
  // Where the commits append their events, for the server's other removals (DeleteIfCommand).
  const EventTarget& events() const { return events_; }
  // After a lost connection: the replies due fail (they had no answer), then the reconnect.
  Status Reconnect() { return Drained()->Reconnect(); }

  // Loads the commit script (after connecting, and whenever Redis lost it).
  Status LoadScript();
  // A commit of `change` on tensor `name` under `pre`, writing `reply` for command `raw` (the
  // list's; "" for internal actions) routed by `route`, and `event` when it changes the tensor.
  Pending Make(const Route& route, const std::string& raw, const std::string& req,
               const std::string& name, const std::string& reply, Pre pre,
               const CommitChange& change, const CommitEvent& event,
               Continuation done = nullptr) const;
  // Plans a commit for the current batch; Flush sends the batch.
  void Queue(Pending pending) { batch_.push_back(std::move(pending)); }
  bool has_queued() const { return !batch_.empty(); }
  // Sends the batch's commits without waiting for them, then reads what was due before them.
  void Flush();
  // Reads the first `count` replies due (all by default), in order, then settles their commits
  // (runs each one's continuation) and keeps a take's answer (TakeReply). Called directly only
  // where a decision waits for commits sent (Command and Drained call it for a use of the
  // connection). A settle that uses the connection drains the rest first; those commits name
  // other tensors (the server drains before handling a command that names one that is due).
  void Drain(size_t count = SIZE_MAX);
  // Runs one commit now, after draining what is due.
  Result<CommitResult> CommitNow(Pending pending);
  // True while a commit naming tensor `name` is sent and its result not yet read.
  bool IsDue(const std::string& name) const;

  // A busy server sends the next take before it handles the current batch, so that Redis
  // answers it meanwhile: the server then waits for Redis only when Redis is slower than the
  // handling. Plain LMOVEs into the processing list, `take size` of them (twice what the last
  // take got, 2 to 64).
  void SendTake();
  // The answer of the take sent ahead (the commands moved, oldest first), read (with every
  // reply due) if it was not yet.
  Result<RedisValue> TakeReply();

  // The success reply of a socket command whose commit went through, as the script would have
  // written it.
  static std::string SocketReply(const Pending& pending, const CommitResult& result);

 private:
  struct Due {  // a reply due on the connection: a commit's, or (take > 0) a take's LMOVEs
    int take = 0;
    Pending commit;
  };
  // Runs one commit on a connection with nothing due; after each NOSCRIPT loads the script and
  // runs it again (a few times at most).
  Result<CommitResult> RunCommit(Pending& pending);
  Status LoadScriptNow();  // on a connection with nothing due (or in a drain's reload)
  Result<RedisValue> ReadTake(int moves);
  static Result<CommitResult> ParseCommit(Result<RedisValue> reply);

  std::unique_ptr<RedisConnection> redis_;
  const CommitOptions opt_;
  const std::string instance_;
  const std::string queue_key_;  // the node's
  const std::string processing_key_;
  const std::string holders_key_;
  const EventTarget events_;
  std::string commit_sha_;
  std::vector<Pending> batch_;  // commits planned, not yet sent
  std::deque<Due> due_;         // replies due on the connection, in the order sent
  Status send_failed_;          // not ok: a send failed, so no reply will come
  std::optional<Result<RedisValue>> take_reply_;
  bool reading_ = false;  // a drain is reading replies: the connection is not to be used
  bool lent_ = false;     // a ConnectionLease lives: the pipeline is not to be used
  int take_size_ = 4;
};

}  // namespace mcd
