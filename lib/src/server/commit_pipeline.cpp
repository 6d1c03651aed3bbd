#include "server/commit_pipeline.h"

#include <algorithm>
#include <cassert>

#include "common/log.h"
#include "redis/lua_scripts.h"

namespace mcd {

namespace {
const char* PreName(Pre pre) {
  switch (pre) {
    case Pre::kNone: return "none";
    case Pre::kAbsent: return "absent";
    case Pre::kMine: return "mine";
    case Pre::kCreating: return "creating";
  }
  return "none";
}
}  // namespace

std::vector<std::string> DeleteIfCommand(const ServerOptions& opt, const std::string& key,
                                         const std::string& field, const std::string& value,
                                         const CommitEvent& event, const std::string& name) {
  return {"EVAL",    kDeleteIfScript,
          "2",       key,
          opt.keys.Events(), field,
          value,     std::to_string(opt.event_history),
          event.kind, name,
          opt.node,  std::to_string(event.pid),
          event.reason};
}

CommitPipeline::CommitPipeline(std::unique_ptr<RedisConnection> redis, const ServerOptions& opt,
                               std::string instance)
    : redis_(std::move(redis)),
      opt_(opt),
      instance_(std::move(instance)),
      queue_key_(opt.keys.NodeQueue(opt.node)),
      processing_key_(opt.keys.Processing(opt.node)),
      holders_key_(opt.keys.Holders(opt.node)),
      events_key_(opt.keys.Events()),
      event_cap_(std::to_string(opt.event_history)) {}

RedisConnection& CommitPipeline::Drained() {
  assert(!reading_ && "the serving connection is used while a drain reads its replies");
  Drain();
  return *redis_;
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
                             const char* action, const CommitEvent& event,
                             const std::vector<std::string>& extra,
                             Continuation done) const {
  Pending p;
  p.route = route;
  p.name = name;
  p.done = std::move(done);
  // From the socket, the reply goes there: the commit writes none (and no first result: the
  // client never sends the command again) and has nothing to take off the processing list.
  bool socket = route.socket();
  bool incr = std::string_view(action) == "incr";
  bool holds = incr || std::string_view(action) == "unhold";
  const std::string holder = holds ? extra.at(0) : "";
  p.args = {"EVALSHA",
            commit_sha_,
            "7",
            name.empty() ? opt_.keys.Unused() : opt_.keys.Tensor(name),
            processing_key_,
            socket || req.empty() ? opt_.keys.Unused() : opt_.keys.Reply(req),
            socket || req.empty() ? opt_.keys.Unused() : opt_.keys.Done(req),
            holders_key_,
            holder.empty() ? opt_.keys.Unused() : opt_.keys.Held(opt_.node, holder),
            events_key_,
            socket ? "" : raw,
            socket ? "" : reply,
            std::to_string(opt_.reply_ttl_s),
            std::to_string(opt_.done_ttl_s),
            socket || req.empty() ? "0" : "1",
            PreName(pre),
            instance_,
            action,
            event_cap_,
            event.kind,
            name,
            opt_.node,
            std::to_string(event.pid),
            event.reason};
  p.args.insert(p.args.end(), extra.begin(), extra.end());
  if (socket) {
    p.req = req;
    p.reply = reply;
    if (incr) {
      // The script assembles no reply, so the tails stay here (SocketReply) and travel empty.
      p.tails = {extra.at(2), extra.at(3)};
      p.args[p.args.size() - 2].clear();
      p.args[p.args.size() - 1].clear();
    }
  }
  return p;
}

void CommitPipeline::Flush() {
  assert(!reading_ && "a commit is sent while a drain reads its replies");
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
  if (result.refcount <= 0) return pending.reply + "0" + pending.tails[1];
  return pending.reply + std::to_string(result.refcount) + pending.tails[0];
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
    pending.args[1] = commit_sha_;
  }
}

Result<CommitResult> CommitPipeline::ParseCommit(Result<RedisValue> result) {
  if (!result.ok()) return result.status();
  // A pipelined reply comes as a value even when it is an error (NOSCRIPT after SCRIPT FLUSH):
  // keep its text, which decides whether the script is loaded again.
  if (result->type == RedisValue::Type::kError)
    return Status(ErrorCode::kRedisError, "Redis EVALSHA: " + result->str);
  if (result->elements.empty()) return Status(ErrorCode::kUnexpectedReply, "commit script reply");
  const std::string& kind = result->elements[0].str;
  CommitResult out;
  out.kind = kind == "ok"         ? CommitResult::kOk
             : kind == "dup"      ? CommitResult::kDup
             : kind == "not_held" ? CommitResult::kNotHeld
                                  : CommitResult::kConflict;
  if (result->elements.size() > 1 && result->elements[1].type == RedisValue::Type::kInteger) {
    out.refcount = result->elements[1].integer;
  }
  return out;
}

}  // namespace mcd
