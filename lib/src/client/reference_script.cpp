// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "client/reference_script.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "client/records.h"
#include "protocol/not_held.h"
#include "protocol/text.h"
#include "redis/lua_scripts.h"
#include "redis/script_calls.h"

namespace mcd {

namespace {
// How long the marker of a release that the script answered may stay: it is popped at once by
// the BLPOP sent right behind the script, so this only bounds one whose client died.
constexpr const char* kMarkerTtl = "60";

// kUnexpectedReply unless the batched script answered for each of `count` tensors.
Status AnsweredAll(const ReferenceManyReply& answer, size_t count) {
  if (answer.answers.size() == count) return Status::Ok();
  return Status(ErrorCode::kUnexpectedReply, "batched reference script answered " +
                                                 std::to_string(answer.answers.size()) + " of " +
                                                 std::to_string(count));
}

// The record a release that took effect returns: the hash as the script read it, or, when a
// field of it does not pass validation (a hand-edited hash), the name, state and refcount alone.
// Failing there would report an error for a reference already given back, and a caller that
// retried would give back a second one.
TensorRecord ReleasedRecord(const std::string& name, RedisValue& hmget) {
  RedisValue values = hmget;
  auto full = RecordFromHmget(name, values);
  if (full.ok()) return std::move(full).value();
  TensorRecord record;
  record.name = name;
  const std::vector<std::string>& fields = TensorFieldNames();
  for (size_t i = 0; i < fields.size() && i < hmget.elements.size(); ++i) {
    const std::string& value = hmget.elements[i].str;
    if (fields[i] == "state") record.state = value;
    if (fields[i] == "refcount") {
      std::from_chars(value.data(), value.data() + value.size(), record.refcount);
    }
  }
  return record;
}
}  // namespace

ReferenceScript::ReferenceScript(RedisConnection& redis, std::string node, KeySpace keys,
                                 Transport& transport, std::optional<Holder> holder,
                                 ServerView& server)
    : redis_(redis),
      node_(std::move(node)),
      keys_(std::move(keys)),
      transport_(transport),
      server_(server),
      holder_(holder),
      holder_id_(holder ? HolderId(holder->pid, holder->start) : ""),
      holders_key_(keys_.Holders(node_)),
      held_key_(holder ? keys_.Held(node_, holder_id_) : keys_.Unused()),
      events_key_(keys_.Events()),
      server_key_(keys_.Server(node_)),
      unused_key_(keys_.Unused()),
      pid_(std::to_string(holder ? holder->pid : getpid())) {}

Status ReferenceScript::Load() {
  MCD_ASSIGN_OR_RETURN(RedisValue sha, redis_.Command({"SCRIPT", "LOAD", kRefScript}));
  MCD_ASSIGN_OR_RETURN(sha_, AsString(sha, "SCRIPT LOAD"));
  return Status::Ok();
}

ReferenceArgs ReferenceScript::Args(const std::string& name, const std::string& key,
                                    const std::string& server) const {
  ReferenceArgs args;
  args.tensor = key;
  args.heartbeat = server;
  args.holders = holders_key_;
  args.held = held_key_;
  args.events = events_key_;
  args.node = node_;
  args.holder = holder_id_;
  args.pid = pid_;
  args.name = name;
  args.fields = &TensorFieldNames();
  return args;
}

Result<TensorRecord> ReferenceScript::Get(const std::string& name) {
  std::string key = keys_.Tensor(name);
  std::string server = keys_.Server(node_);
  ReferenceArgs args = Args(name, key, server);
  std::vector<std::string_view> argv = ReferenceCall(sha_, args);
  auto reply = redis_.Command(argv);
  if (!reply.ok() && IsNoScript(reply.status().message())) {
    MCD_RETURN_IF_ERROR(Load());
    argv[kReferenceShaIndex] = sha_;
    reply = redis_.Command(argv);
  }
  if (!reply.ok()) return reply.status();
  auto answer = ParseReferenceReply(std::move(reply).value());
  if (!answer.ok()) return answer.status();
  bool taken = answer->kind == ReferenceReply::kOk;
  auto record = Answer(name, answer.value());
  // A hash it cannot read: give the reference back.
  if (!record.ok() && taken) (void)Release(name, kAnyEpoch, Whose::kTaken);
  return record;
}

const char* ReferenceScript::Mode(Whose whose) const {
  switch (whose) {
    case Whose::kTaken:
      return holder_ ? kReleaseOwn : kReleaseUnbound;
    case Whose::kCreated:
      return kReleaseUnbound;
    case Whose::kUnknown:
      break;
  }
  return kReleaseAny;
}

Command ReferenceScript::ReleaseCommand(const std::string& name, Whose whose) const {
  switch (whose) {
    case Whose::kTaken:
      return DeleteCommand(name, holder_, /*own_only=*/true);
    case Whose::kCreated:
      return DeleteCommand(name, std::nullopt);
    case Whose::kUnknown:
      break;
  }
  return DeleteCommand(name, holder_);
}

Result<TensorRecord> ReferenceScript::Release(const std::string& name, const std::string& epoch,
                                              Whose whose, bool retried) {
  if (sha_ == kNotLoaded) MCD_RETURN_IF_ERROR(Load());
  MCD_ASSIGN_OR_RETURN(Transport::Outgoing out, transport_.Prepare(ReleaseCommand(name, whose)));
  std::string key = keys_.Tensor(name);
  std::string server = keys_.Server(node_);
  ReferenceArgs args = Args(name, key, server);
  args.release = true;
  args.queue = out.queue;
  args.reply_list = out.reply_key;
  args.delete_command = out.body;
  args.marker_ttl_s = kMarkerTtl;
  args.epoch = epoch;
  args.mode = Mode(whose);
  MCD_RETURN_IF_ERROR(redis_.Append(ReferenceCall(sha_, args)));
  MCD_RETURN_IF_ERROR(redis_.Append({"BLPOP", out.reply_key, out.wait}));
  auto script = redis_.ReadReply();
  if (!script.ok()) return script.status();
  if (script->type == RedisValue::Type::kError) {
    // The script did not run (NOSCRIPT after a Redis restart, or an error), so nothing will
    // wake the BLPOP: drop the connection with it, and try once more on a fresh one.
    std::string error = script->str;
    MCD_RETURN_IF_ERROR(redis_.Reconnect());
    if (retried || !IsNoScript(error)) {
      return RedisErrorStatus("EVALSHA (reference script)", error);
    }
    MCD_RETURN_IF_ERROR(Load());
    return Release(name, epoch, whose, true);
  }
  auto popped = redis_.ReadReply();
  auto answer = ParseReferenceReply(std::move(script).value());
  if (answer.ok() && answer->kind == ReferenceReply::kQueued) {
    return transport_.ServerReply(out, std::move(popped));
  }
  if (!popped.ok()) return popped.status();
  if (!answer.ok()) return answer.status();
  return Answer(name, answer.value(), true, whose);
}

Result<std::vector<ReferenceManyItem>> ReferenceScript::ManyItems(
    const std::vector<std::string>& names, const std::vector<std::string>* epochs,
    const std::vector<Whose>* whose, std::vector<Transport::Outgoing>* out) {
  std::vector<ReferenceManyItem> items(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    ReferenceManyItem& item = items[i];
    item.tensor = keys_.Tensor(names[i]);
    item.name = names[i];
    item.reply_list = unused_key_;
    if (out == nullptr) continue;
    MCD_ASSIGN_OR_RETURN(Transport::Outgoing outgoing,
                         transport_.Prepare(ReleaseCommand(names[i], (*whose)[i])));
    item.reply_list = outgoing.reply_key;
    item.delete_command = outgoing.body;
    item.epoch = (*epochs)[i];
    item.mode = Mode((*whose)[i]);
    out->push_back(std::move(outgoing));
  }
  return items;
}

ReferenceManyArgs ReferenceScript::ManyArgs(const std::vector<ReferenceManyItem>& items,
                                            const std::string& queue) const {
  const bool release = !queue.empty();
  ReferenceManyArgs args;
  args.heartbeat = server_key_;
  args.holders = holders_key_;
  args.held = held_key_;
  args.events = events_key_;
  args.queue = release ? queue : unused_key_;
  args.release = release;
  args.node = node_;
  args.holder = holder_id_;
  args.pid = pid_;
  args.marker_ttl_s = kMarkerTtl;
  args.fields = &TensorFieldNames();
  args.items = &items;
  return args;
}

Status ReferenceScript::LoadMany() {
  MCD_ASSIGN_OR_RETURN(RedisValue sha, redis_.Command({"SCRIPT", "LOAD", kRefManyScript}));
  MCD_ASSIGN_OR_RETURN(many_sha_, AsString(sha, "SCRIPT LOAD"));
  return Status::Ok();
}

Result<RedisValue> ReferenceScript::CallMany(const std::vector<std::string>& argv,
                                             const std::string& set_record, RedisValue* record) {
  std::vector<std::string_view> call(argv.begin(), argv.end());
  if (set_record.empty()) return redis_.CommandRaw(call);
  // One transaction, one round trip: nothing runs between the script and the record's read.
  MCD_RETURN_IF_ERROR(redis_.Append({"MULTI"}));
  MCD_RETURN_IF_ERROR(redis_.Append(call));
  MCD_RETURN_IF_ERROR(redis_.Append({"HGETALL", set_record}));
  MCD_RETURN_IF_ERROR(redis_.Append({"EXEC"}));
  // Every reply is read before any is judged, so that none is left for the next command.
  RedisValue replies[4];
  for (RedisValue& reply : replies) {
    MCD_ASSIGN_OR_RETURN(reply, redis_.ReadReply());
  }
  // The script refused as it was queued (the transaction then ran nothing): its error, as the
  // script's reply, which the caller reads (NOSCRIPT: loaded again).
  if (replies[1].type == RedisValue::Type::kError) return std::move(replies[1]);
  const char* names[4] = {"MULTI", "EVALSHA (reference_many)", "HGETALL", "EXEC"};
  for (int i = 0; i < 4; ++i) {
    if (replies[i].type == RedisValue::Type::kError) {
      return RedisErrorStatus(names[i], replies[i].str);
    }
  }
  if (replies[3].elements.size() != 2) {
    return Status(ErrorCode::kUnexpectedReply, "EXEC of a set's reference script and record");
  }
  *record = std::move(replies[3].elements[1]);
  return std::move(replies[3].elements[0]);
}

Result<ReferenceManyReply> ReferenceScript::RunMany(std::vector<std::string>& argv,
                                                    const std::string& set_record,
                                                    RedisValue* record) {
  for (int attempt = 0;; ++attempt) {
    if (many_sha_ == kNotLoaded) MCD_RETURN_IF_ERROR(LoadMany());
    argv[kReferenceShaIndex] = many_sha_;
    MCD_ASSIGN_OR_RETURN(RedisValue reply, CallMany(argv, set_record, record));
    if (reply.type == RedisValue::Type::kError) {
      if (IsNoScript(reply.str) && attempt == 0) {
        many_sha_ = kNotLoaded;  // Redis lost it (a restart, SCRIPT FLUSH): once more
        continue;
      }
      return RedisErrorStatus("EVALSHA (reference_many)", reply.str);
    }
    return ParseReferenceManyReply(std::move(reply));
  }
}

Result<std::vector<TensorRecord>> ReferenceScript::GetMany(const std::vector<std::string>& names) {
  MCD_ASSIGN_OR_RETURN(std::vector<ReferenceManyItem> items,
                       ManyItems(names, nullptr, nullptr, nullptr));
  std::vector<std::string> argv = ReferenceManyCall(many_sha_, ManyArgs(items, std::string()));
  MCD_ASSIGN_OR_RETURN(ReferenceManyReply answer, RunMany(argv));
  return Taken(names, answer);
}

Result<std::vector<TensorRecord>> ReferenceScript::GetSet(const std::string& set) {
  static const std::vector<ReferenceManyItem> kNoItems;
  const std::string list = keys_.Set(set);
  const std::string record = keys_.SetRecord(set);
  ReferenceManyArgs args = ManyArgs(kNoItems, std::string());
  args.set_list = list;
  args.set_record = record;
  args.set_name = set;
  std::vector<std::string> argv = ReferenceManyCall(many_sha_, args);
  // The record is read by an HGETALL in the script's transaction (see reference_many.lua).
  RedisValue record_reply;
  MCD_ASSIGN_OR_RETURN(ReferenceManyReply answer, RunMany(argv, record, &record_reply));
  if (answer.failed == ReferenceManyReply::kNoMember) {
    Status missing = Answer(set, answer.refusal).status();
    if (missing.code() != ErrorCode::kNotFound) return missing;  // e.g. the server is gone
    return Status(ErrorCode::kNotFound, "no tensor set named '" + set + "'");
  }
  if (answer.failed) return Answer(answer.failed_name, answer.refusal).status();
  MCD_RETURN_IF_ERROR(AnsweredAll(answer, 1));
  std::vector<RedisValue>& pairs = record_reply.elements;
  if (record_reply.type != RedisValue::Type::kArray || pairs.empty() || pairs.size() % 2 != 0) {
    // The script found the record a hash, in the same transaction: not seen but for a Redis
    // that breaks its word. The reference just taken goes back.
    (void)Release(answer.leader, kAnyEpoch, Whose::kTaken);
    return Status(ErrorCode::kUnexpectedReply,
                  "tensor set '" + set + "': its record (" + record + ") could not be read" +
                      (record_reply.type == RedisValue::Type::kError ? ": " + record_reply.str
                                                                     : std::string()));
  }
  answer.members.reserve(pairs.size() / 2);
  for (size_t i = 0; i < pairs.size(); i += 2) {
    answer.members.emplace_back(std::move(pairs[i].str), std::move(pairs[i + 1].str));
  }
  // The leader's record first, with the count its reference made; each other member's is the
  // leader's with the member's own fields from the set's record in it.
  auto records = SetRecords(set, answer);
  // One it cannot read: the reference just taken goes back, as Get gives back its one.
  if (!records.ok()) (void)Release(answer.leader, kAnyEpoch, Whose::kTaken);
  return records;
}

Result<std::vector<TensorRecord>> ReferenceScript::SetRecords(const std::string& set,
                                                              ReferenceManyReply& answer) {
  MCD_ASSIGN_OR_RETURN(TensorRecord leader, Answer(answer.leader, answer.answers[0]));
  if (leader.set != set) {
    return Status(ErrorCode::kUnexpectedReply, "tensor set '" + set + "': its first member '" +
                                                   Printable(answer.leader, 255) +
                                                   "' is not of the set");
  }
  std::vector<TensorRecord> records;
  records.reserve(answer.members.size());
  records.push_back(leader);
  bool listed = false;  // the leader in the record too
  for (const auto& [name, value] : answer.members) {
    if (name == answer.leader) {
      listed = true;
      continue;
    }
    MCD_ASSIGN_OR_RETURN(TensorRecord member, MemberFromSetRecord(leader, name, value));
    // The leader is the member first by name (the server writes the list sorted), which is the
    // one ReleaseSet gives back.
    if (name < answer.leader) {
      return Status(ErrorCode::kUnexpectedReply, "tensor set '" + set + "': its list of members " +
                                                     "does not start with the first by name ('" +
                                                     Printable(name, 255) + "' before '" +
                                                     Printable(answer.leader, 255) + "')");
    }
    records.push_back(std::move(member));
  }
  if (!listed) {
    return Status(ErrorCode::kUnexpectedReply, "tensor set '" + set +
                                                   "': its record lacks its first member '" +
                                                   Printable(answer.leader, 255) + "'");
  }
  return records;
}

Result<std::vector<TensorRecord>> ReferenceScript::Taken(const std::vector<std::string>& names,
                                                         ReferenceManyReply& answer) {
  if (answer.failed) {
    const std::string& name =
        *answer.failed < names.size() ? names[*answer.failed] : answer.failed_name;
    return Answer(name, answer.refusal).status();
  }
  MCD_RETURN_IF_ERROR(AnsweredAll(answer, names.size()));
  std::vector<TensorRecord> records;
  records.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    auto record = Answer(names[i], answer.answers[i]);
    if (!record.ok()) {
      // A hash it cannot read: every reference just taken goes back, as Get gives back its one.
      std::vector<std::string> epochs(names.size(), kAnyEpoch);
      (void)ReleaseMany(names, epochs, std::vector<Whose>(names.size(), Whose::kTaken));
      return record.status();
    }
    records.push_back(std::move(record).value());
  }
  return records;
}

Result<std::vector<TensorRecord>> ReferenceScript::ReleaseMany(
    const std::vector<std::string>& names, const std::vector<std::string>& epochs,
    const std::vector<Whose>& whose, bool retried) {
  if (names.empty()) return std::vector<TensorRecord>();
  if (many_sha_ == kNotLoaded) MCD_RETURN_IF_ERROR(LoadMany());
  std::vector<Transport::Outgoing> out;
  MCD_ASSIGN_OR_RETURN(std::vector<ReferenceManyItem> items,
                       ManyItems(names, &epochs, &whose, &out));
  std::vector<std::string> argv = ReferenceManyCall(many_sha_, ManyArgs(items, out.front().queue));
  MCD_RETURN_IF_ERROR(redis_.Append(std::vector<std::string_view>(argv.begin(), argv.end())));
  for (const Transport::Outgoing& o : out) {
    MCD_RETURN_IF_ERROR(redis_.Append({"BLPOP", o.reply_key, o.wait}));
  }
  auto script = redis_.ReadReply();
  if (!script.ok()) return script.status();
  if (script->type == RedisValue::Type::kError) {
    // As Release: nothing will wake the BLPOPs, so they go with the connection.
    std::string error = script->str;
    MCD_RETURN_IF_ERROR(redis_.Reconnect());
    if (retried || !IsNoScript(error)) {
      return RedisErrorStatus("EVALSHA (batched reference script)", error);
    }
    many_sha_ = kNotLoaded;
    return ReleaseMany(names, epochs, whose, true);
  }
  std::vector<Result<RedisValue>> popped;
  popped.reserve(out.size());
  for (size_t i = 0; i < out.size(); ++i) popped.push_back(redis_.ReadReply());
  MCD_ASSIGN_OR_RETURN(ReferenceManyReply answer,
                       ParseReferenceManyReply(std::move(script).value()));
  if (answer.failed) {
    if (*answer.failed >= names.size()) {
      return Status(ErrorCode::kUnexpectedReply, "batched reference script named no tensor");
    }
    return Answer(names[*answer.failed], answer.refusal, true, whose[*answer.failed]).status();
  }
  MCD_RETURN_IF_ERROR(AnsweredAll(answer, names.size()));
  // Every reference is given back by now (the queued ones by their delete commands, whose
  // replies say how): the first error to report is kept, the records of the rest returned.
  std::vector<TensorRecord> records;
  records.reserve(names.size());
  Status first = Status::Ok();
  for (size_t i = 0; i < names.size(); ++i) {
    Result<TensorRecord> record =
        answer.answers[i].kind == ReferenceReply::kQueued
            ? transport_.ServerReply(out[i], std::move(popped[i]))
            : (popped[i].ok() ? Answer(names[i], answer.answers[i], true, whose[i])
                              : Result<TensorRecord>(popped[i].status()));
    if (record.ok()) {
      records.push_back(std::move(record).value());
    } else if (first.ok()) {
      first = record.status();
    }
  }
  if (!first.ok()) return first;
  return records;
}

Result<TensorRecord> ReferenceScript::Answer(const std::string& name, ReferenceReply& reply,
                                             bool release, Whose whose) {
  switch (reply.kind) {
    case ReferenceReply::kOk:
    case ReferenceReply::kForgotten:
      if (release) return ReleasedRecord(name, reply.values);
      return RecordFromHmget(name, reply.values);
    case ReferenceReply::kMissing:
      return server_.Missing(name, !reply.detail.empty(), reply.settled);
    case ReferenceReply::kNotReady:
      return Status(ErrorCode::kNotReady, "tensor '" + name + "' is " + reply.detail);
    case ReferenceReply::kWrongNode:
      return Status(ErrorCode::kWrongNode, "tensor '" + name + "' lives on node '" + reply.detail +
                                               "', not '" + node_ + "'");
    case ReferenceReply::kNotHeld:
      if (whose == Whose::kCreated || !holder_) {  // it asked for one bound to nobody
        return NotHeldStatus(name, NotHeldFor::kUnbound);
      }
      return NotHeldStatus(name, whose == Whose::kTaken ? NotHeldFor::kTaken : NotHeldFor::kAny);
    case ReferenceReply::kGone:
      return Status(ErrorCode::kUnavailable,
                    "the mcd-serve instance that owns tensor '" + name + "' is not running");
    case ReferenceReply::kQueued:
      break;
  }
  return Status(ErrorCode::kUnexpectedReply, "reference script answered 'queued'");
}

}  // namespace mcd
