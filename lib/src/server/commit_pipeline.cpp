// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/commit_pipeline.h"

#include <algorithm>
#include <cassert>

#include "common/log.h"
#include "protocol/json_codec.h"
#include "redis/lua_scripts.h"

namespace mcd {

CommitPipeline::CommitPipeline(std::unique_ptr<RedisConnection> redis, CommitOptions opt,
                               std::string instance)
    : redis_(std::move(redis)),
      opt_(std::move(opt)),
      instance_(std::move(instance)),
      queue_key_(opt_.keys.NodeQueue(opt_.node)),
      processing_key_(opt_.keys.Processing(opt_.node)),
      holders_key_(opt_.keys.Holders(opt_.node)),
      events_(EventTarget::Of(opt_.keys, opt_.event_history, opt_.node)) {}

ConnectionLease CommitPipeline::Drained() {
  assert(!reading_ && "the serving connection is used while a drain reads its replies");
  Drain();
  return ConnectionLease(*redis_, lent_);
}

Status CommitPipeline::LoadScript() {
  Drained();
  return LoadScriptNow();
}

Status CommitPipeline::LoadScriptNow() {
  MCD_ASSIGN_OR_RETURN(RedisValue sha, redis_->Command({"SCRIPT", "LOAD", kCommitScript}));
  MCD_ASSIGN_OR_RETURN(commit_sha_, AsString(sha, "SCRIPT LOAD"));
  return Status::Ok();
}

Pending CommitPipeline::Make(const Route& route, const std::string& raw, const std::string& req,
                             const std::string& name, const std::string& reply, Pre pre,
                             const CommitChange& change, const CommitEvent& event,
                             Continuation done) const {
  // From the socket, the reply goes there: the commit writes none (and no first result: the
  // client never sends the command again) and has nothing to take off the processing list.
  bool socket = route.socket();
  bool written = !socket && !req.empty();
  CommitArgs a;
  a.action = change.action;
  bool incr = a.action == CommitAction::kIncr;
  if (incr || a.action == CommitAction::kUnhold) a.holder = change.holder;
  // A set's commit names the set, whose key is its list of member keys.
  std::string tensor_key = name.empty()     ? opt_.keys.Unused()
                           : change.members ? opt_.keys.Set(name)
                                            : opt_.keys.Tensor(name);
  a.members = change.members;
  std::string set_list, set_record;
  if (change.members) set_record = opt_.keys.SetRecord(name);
  if (!change.members && !change.set.empty()) {
    set_list = opt_.keys.Set(change.set);
    set_record = opt_.keys.SetRecord(change.set);
  }
  a.set_list = set_list;
  a.set_record = set_record;
  std::string reply_key = written ? opt_.keys.Reply(req) : opt_.keys.Unused();
  std::string first_key = written ? opt_.keys.Done(req) : opt_.keys.Unused();
  std::string held_key =
      a.holder.empty() ? opt_.keys.Unused() : opt_.keys.Held(opt_.node, a.holder);
  a.tensor = tensor_key;
  a.processing = processing_key_;
  a.reply_list = reply_key;
  a.first_result = first_key;
  a.holders = holders_key_;
  a.held = held_key;
  a.events = events_.key;
  if (!socket) {
    a.raw = raw;
    a.reply = reply;
  }
  a.reply_ttl_s = opt_.reply_ttl_s;
  a.first_result_ttl_s = opt_.done_ttl_s;
  a.has_req = written;
  a.pre = pre;
  a.owner = instance_;
  a.event_cap = events_.cap;
  a.event = event;
  a.name = name;
  a.node = opt_.node;
  if (a.action == CommitAction::kHset) a.fields = change.fields;
  if (incr) {
    a.delta = change.delta;
    a.own_only = change.own_only;
    // From the socket the script assembles no reply, so the tails stay here (SocketReply) and
    // travel empty.
    if (!socket) {
      a.held_tail = change.held_tail;
      a.freed_tail = change.freed_tail;
    }
  }
  Pending p;
  p.args = CommitCall(commit_sha_, a);
  p.route = route;
  p.name = name;
  p.done = std::move(done);
  if (socket) {
    p.req = req;
    p.reply = reply;
    if (incr) p.tails = {std::string(change.held_tail), std::string(change.freed_tail)};
  }
  return p;
}

void CommitPipeline::Flush() {
  assert(!reading_ && "a commit is sent while a drain reads its replies");
  assert(!lent_ && "a commit is sent while the connection is lent");
  size_t earlier = due_.size();  // the last batch's commits, a take sent ahead
  std::vector<Pending> sent = std::move(batch_);
  batch_.clear();
  for (Pending& p : sent) {
    if (send_failed_.ok()) {
      std::vector<std::string_view> argv(p.args.begin(), p.args.end());
      send_failed_ = redis_->Append(argv);
    }
    due_.push_back(Due{0, std::move(p)});
  }
  // Sent now, not with the next read, so that Redis runs them while the server goes on.
  if (!sent.empty() && send_failed_.ok()) send_failed_ = redis_->FlushOutput();
  // Then what was due before them, which has mostly arrived by now.
  Drain(earlier);
}

bool CommitPipeline::IsDue(const std::string& name) const {
  return std::any_of(due_.begin(), due_.end(),
                     [&](const Due& d) { return d.take == 0 && d.commit.name == name; });
}

void CommitPipeline::SendTake() {
  assert(!reading_ && "a take is sent while a drain reads its replies");
  assert(!lent_ && "a take is sent while the connection is lent");
  // Plain LMOVEs in one write rather than a script: each moves one command atomically into the
  // processing list, and one that finds the queue empty costs Redis about a microsecond, where a
  // script call costs it ~15 (most of it the script machinery).
  Status sent;
  for (int i = 0; i < take_size_ && sent.ok(); ++i) {
    sent = redis_->Append({"LMOVE", queue_key_, processing_key_, "RIGHT", "LEFT"});
  }
  if (sent.ok()) sent = redis_->FlushOutput();
  if (!sent.ok() && send_failed_.ok()) send_failed_ = sent;
  due_.push_back(Due{take_size_, {}});
}

Result<RedisValue> CommitPipeline::TakeReply() {
  // Usually read already, with the commits sent before it (Flush); else read with all that is due.
  if (!take_reply_) Drain();
  if (!take_reply_) return Status(ErrorCode::kInternal, "no take was sent ahead");
  Result<RedisValue> out = std::move(*take_reply_);
  take_reply_.reset();
  return out;
}

Result<RedisValue> CommitPipeline::ReadTake(int moves) {
  if (!send_failed_.ok()) return send_failed_;
  RedisValue taken{RedisValue::Type::kArray, 0, "", {}};
  Status failed;
  for (int i = 0; i < moves; ++i) {
    Result<RedisValue> moved = redis_->ReadReply();
    if (!moved.ok()) return moved.status();  // the connection is gone: nothing more to read
    if (moved->type == RedisValue::Type::kError) {
      // An error answer (the queue is not a list, say): the answers after it are still read.
      if (failed.ok()) failed = Status(ErrorCode::kRedisError, "Redis LMOVE (take): " + moved->str);
    } else if (!moved->is_nil()) {
      taken.elements.push_back(std::move(moved.value()));
    }
  }
  // On failure, whatever was moved waits in the processing list for the resume after reconnecting.
  if (!failed.ok()) return failed;
  take_size_ = std::clamp(2 * static_cast<int>(taken.elements.size()), 2, 64);
  return taken;
}

void CommitPipeline::Drain(size_t count) {
  std::vector<Pending> sent;
  std::vector<Result<CommitResult>> results;
  bool reload = false;
  auto read = [&](size_t n) {
    for (; n > 0 && !due_.empty(); --n) {
      Due d = std::move(due_.front());
      due_.pop_front();
      if (d.take > 0) {
        take_reply_ = ReadTake(d.take);
        continue;
      }
      Result<RedisValue> reply =
          send_failed_.ok() ? redis_->ReadReply() : Result<RedisValue>(send_failed_);
      results.push_back(ParseCommit(std::move(reply)));
      if (!results.back().ok() && IsNoScript(results.back().status().message())) reload = true;
      sent.push_back(std::move(d.commit));
    }
  };
  assert(!reading_ && "a drain is entered while another one reads");
  assert(!lent_ && "a drain is entered while the connection is lent");
  reading_ = true;
  read(count);
  if (reload) read(due_.size());  // commits are run again on a connection with nothing due
  if (due_.empty()) send_failed_ = Status::Ok();
  if (reload) {
    // Redis restarted or SCRIPT FLUSH: the scripts ran nowhere, so load them and run them again.
    Status loaded = LoadScriptNow();
    Log(loaded.ok() ? LogLevel::kInfo : LogLevel::kWarn,
        loaded.ok()
            ? "Redis had lost the server's scripts (SCRIPT FLUSH?): loaded them again"
            : "Redis had lost the server's scripts and loading them failed: " + loaded.ToString());
    for (size_t i = 0; i < sent.size(); ++i) {
      if (!results[i].ok() && IsNoScript(results[i].status().message()))
        results[i] = RunCommit(sent[i]);
    }
  }
  reading_ = false;
  // Each commit's result goes to the code that made it; one that uses the connection drains
  // what is due after this batch first (Drained).
  for (size_t i = 0; i < sent.size(); ++i) {
    if (sent[i].done) sent[i].done(sent[i], std::move(results[i]));
  }
}

std::string CommitPipeline::SocketReply(const Pending& pending, const CommitResult& result) {
  if (pending.tails.empty()) return pending.reply;
  // As the commit script assembles an "incr" reply: the count, then how the tensor stands.
  return TensorReplyJson(pending.reply, result.refcount, pending.tails[0], pending.tails[1]);
}

Result<CommitResult> CommitPipeline::CommitNow(Pending pending) {
  Drained();
  return RunCommit(pending);
}

Result<CommitResult> CommitPipeline::RunCommit(Pending& pending) {
  // Each NOSCRIPT means Redis lost the script (again) before this commit ran: load it and run
  // it again. Bounded, so that a Redis that keeps flushing cannot hold the server here.
  for (int attempt = 1;; ++attempt) {
    std::vector<std::string_view> argv(pending.args.begin(), pending.args.end());
    Result<CommitResult> result =
        ParseCommit(redis_->CommandRaw(argv));  // errors read as pipelined ones
    if (result.ok() || !IsNoScript(result.status().message()) || attempt == 8) return result;
    MCD_RETURN_IF_ERROR(LoadScriptNow());
    pending.args[kCommitShaIndex] = commit_sha_;
  }
}

Result<CommitResult> CommitPipeline::ParseCommit(Result<RedisValue> result) {
  return ParseCommitReply(std::move(result));
}

}  // namespace mcd
