// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "redis/script_calls.h"

#include <cstdlib>

#include "redis/lua_scripts.h"

namespace mcd {

namespace {
const char* PreName(Pre pre) {
  switch (pre) {
    case Pre::kNone:
      return "none";
    case Pre::kAbsent:
      return "absent";
    case Pre::kMine:
      return "mine";
    case Pre::kCreating:
      return "creating";
  }
  return "none";
}

const char* ActionName(CommitAction action) {
  switch (action) {
    case CommitAction::kNone:
      return "none";
    case CommitAction::kHset:
      return "hset";
    case CommitAction::kDel:
      return "del";
    case CommitAction::kIncr:
      return "incr";
    case CommitAction::kUnhold:
      return "unhold";
    case CommitAction::kHsetMany:
      return "hset_many";
    case CommitAction::kDelMany:
      return "del_many";
  }
  return "none";
}

// A reply of Command (an error reply is a failed Result) or of ReadReply (an error is a value).
Result<RedisValue> Answered(Result<RedisValue> reply, const char* script) {
  if (!reply.ok()) return reply.status();
  if (reply->type == RedisValue::Type::kError) return RedisErrorStatus(script, reply->str);
  return std::move(reply).value();
}

Result<int64_t> IntegerReply(Result<RedisValue> reply, const char* script) {
  MCD_ASSIGN_OR_RETURN(RedisValue value, Answered(std::move(reply), script));
  if (value.type != RedisValue::Type::kInteger) {
    return Status(ErrorCode::kUnexpectedReply, std::string(script) + " answered no integer");
  }
  return value.integer;
}
}  // namespace

std::vector<std::string> CommitCall(std::string_view sha, const CommitArgs& a) {
  size_t extra = a.action == CommitAction::kHset     ? (a.fields ? a.fields->size() : 0)
                 : a.action == CommitAction::kIncr   ? 5
                 : a.action == CommitAction::kUnhold ? 1
                                                     : 0;
  const size_t members = a.members != nullptr ? a.members->size() : 0;
  if (a.members != nullptr) {
    for (const CommitMember& m : *a.members) extra += 3 + m.fields.size();
  }
  std::vector<std::string> argv;
  argv.reserve(24 + extra);
  for (std::string_view arg : {std::string_view("EVALSHA"), sha}) argv.emplace_back(arg);
  // KEYS[8] the set's record and the members after it (a set's commit); KEYS[8] and KEYS[9] the
  // set's list and record (a member's own commit); nothing more (a tensor of no set).
  const size_t set_keys = a.members != nullptr ? 1 : (a.set_list.empty() ? 0 : 2);
  argv.push_back(std::to_string(7 + set_keys + members));
  for (std::string_view arg :
       {a.tensor, a.processing, a.reply_list, a.first_result, a.holders, a.held, a.events}) {
    argv.emplace_back(arg);
  }
  if (set_keys == 2) argv.emplace_back(a.set_list);
  if (set_keys > 0) argv.emplace_back(a.set_record);
  if (a.members != nullptr) {
    for (const CommitMember& m : *a.members) argv.push_back(m.key);
  }
  for (std::string_view arg : {a.raw, a.reply}) argv.emplace_back(arg);
  argv.push_back(std::to_string(a.reply_ttl_s));
  argv.push_back(std::to_string(a.first_result_ttl_s));
  argv.emplace_back(a.has_req ? "1" : "0");
  argv.emplace_back(PreName(a.pre));
  argv.emplace_back(a.owner);
  argv.emplace_back(ActionName(a.action));
  argv.push_back(std::to_string(a.event_cap));
  argv.emplace_back(a.event.kind);
  argv.emplace_back(a.name);
  argv.emplace_back(a.node);
  argv.push_back(std::to_string(a.event.pid));
  argv.emplace_back(a.event.reason);
  switch (a.action) {
    case CommitAction::kHset:
      if (a.fields) argv.insert(argv.end(), a.fields->begin(), a.fields->end());
      break;
    case CommitAction::kIncr:
      argv.emplace_back(a.holder);
      argv.push_back(std::to_string(a.delta));
      argv.emplace_back(a.held_tail);
      argv.emplace_back(a.freed_tail);
      argv.emplace_back(a.own_only ? "1" : "0");
      break;
    case CommitAction::kUnhold:
      argv.emplace_back(a.holder);
      break;
    case CommitAction::kHsetMany:
    case CommitAction::kDelMany:
      for (const CommitMember& m : *a.members) {
        argv.push_back(m.name);
        argv.push_back(std::to_string(m.fields.size()));
        argv.insert(argv.end(), m.fields.begin(), m.fields.end());
      }
      break;
    default:
      break;
  }
  return argv;
}

Result<CommitResult> ParseCommitReply(Result<RedisValue> result) {
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

std::vector<std::string> ReferenceManyCall(std::string_view sha, const ReferenceManyArgs& a) {
  const size_t fields = a.fields ? a.fields->size() : 0;
  static const std::vector<ReferenceManyItem> kNone;
  const std::vector<ReferenceManyItem>& items = a.items != nullptr ? *a.items : kNone;
  std::vector<std::string> argv;
  argv.reserve(15 + fields + 6 * items.size());
  for (std::string_view arg : {std::string_view("EVALSHA"), sha}) argv.emplace_back(arg);
  argv.push_back(std::to_string(5 + (a.set_list.empty() ? 2 * items.size() : 2)));
  for (std::string_view key : {a.heartbeat, a.holders, a.held, a.events, a.queue}) {
    argv.emplace_back(key);
  }
  if (!a.set_list.empty()) {
    argv.emplace_back(a.set_list);
    argv.emplace_back(a.set_record);
  }
  for (const ReferenceManyItem& item : items) {
    argv.push_back(item.tensor);
    argv.push_back(item.reply_list);
  }
  const bool of_set = !a.set_list.empty();
  std::string_view delta = a.release ? "-1" : (of_set ? "set" : "1");
  for (std::string_view arg : {delta, a.node, a.holder, a.pid, a.marker_ttl_s}) {
    argv.emplace_back(arg);
  }
  argv.push_back(std::to_string(fields));
  if (a.fields) argv.insert(argv.end(), a.fields->begin(), a.fields->end());
  if (of_set) argv.emplace_back(a.set_name);
  for (const ReferenceManyItem& item : items) {
    argv.push_back(item.name);
    argv.push_back(item.delete_command);
    argv.push_back(item.epoch);
    argv.emplace_back(item.mode);
  }
  return argv;
}

Result<ReferenceManyReply> ParseReferenceManyReply(RedisValue reply) {
  std::vector<RedisValue>& e = reply.elements;
  ReferenceManyReply out;
  if (e.size() >= 3 && e[0].str == "failed" && e[1].type == RedisValue::Type::kInteger &&
      e[1].integer >= 0) {
    if (e.size() == 4) out.failed_name = std::move(e[3].str);
    out.failed =
        e[1].integer == 0 ? ReferenceManyReply::kNoMember : static_cast<size_t>(e[1].integer - 1);
    MCD_ASSIGN_OR_RETURN(out.refusal, ParseReferenceReply(std::move(e[2])));
    return out;
  }
  if ((e.size() != 2 && e.size() != 3) || e[0].str != "ok") {
    return Status(ErrorCode::kUnexpectedReply, "batched reference script reply");
  }
  if (e.size() == 3) {  // a set's: the leader's name
    if (e[1].elements.size() != 1 || e[2].str.empty()) {
      return Status(ErrorCode::kUnexpectedReply, "set reference script reply");
    }
    out.leader = std::move(e[2].str);
  }
  out.answers.reserve(e[1].elements.size());
  for (RedisValue& answer : e[1].elements) {
    MCD_ASSIGN_OR_RETURN(ReferenceReply parsed, ParseReferenceReply(std::move(answer)));
    out.answers.push_back(std::move(parsed));
  }
  return out;
}

std::vector<std::string> SetMembersCall(const std::string& members_key, size_t max_members,
                                        size_t max_bytes) {
  return {"EVAL",      kSetMembersScript,           "1",
          members_key, std::to_string(max_members), std::to_string(max_bytes)};
}

Result<std::vector<std::string>> ParseSetMembersReply(Result<RedisValue> reply) {
  MCD_ASSIGN_OR_RETURN(RedisValue value, Answered(std::move(reply), "EVAL (set_members)"));
  std::vector<RedisValue>& e = value.elements;
  if (e.size() == 2 && e[0].str == "ok") {
    std::vector<std::string> members;
    members.reserve(e[1].elements.size());
    for (RedisValue& member : e[1].elements) members.push_back(std::move(member.str));
    return members;
  }
  if (e.size() == 2 && e[0].str == "too_many") {
    return Status(ErrorCode::kTooLarge, std::to_string(e[1].integer) + " members, over the limit");
  }
  if (e.size() == 3 && e[0].str == "too_large") {
    return Status(ErrorCode::kTooLarge, "member " + std::to_string(e[1].integer) + " is " +
                                            std::to_string(e[2].integer) + " bytes long");
  }
  return Status(ErrorCode::kUnexpectedReply, "set_members script reply");
}

std::vector<std::string> DeleteIfCall(const DeleteIfArgs& a) {
  std::vector<std::string> argv;
  argv.reserve(13);
  const bool of_set = !a.set.empty();
  for (std::string_view arg : {std::string_view("EVAL"), std::string_view(kDeleteIfScript),
                               std::string_view(of_set ? "4" : "2"), a.key, a.events}) {
    argv.emplace_back(arg);
  }
  if (of_set) {
    argv.emplace_back(a.set_list);
    argv.emplace_back(a.set_record);
  }
  argv.emplace_back(a.field);
  argv.emplace_back(a.value);
  argv.push_back(std::to_string(a.event_cap));
  argv.emplace_back(a.event.kind);
  argv.emplace_back(a.name);
  argv.emplace_back(a.node);
  argv.push_back(std::to_string(a.event.pid));
  argv.emplace_back(a.event.reason);
  if (of_set) argv.emplace_back(a.set);
  return argv;
}

std::vector<std::string> DeleteIfCommand(const EventTarget& events, const std::string& key,
                                         const std::string& field, const std::string& value,
                                         const CommitEvent& event, const std::string& name,
                                         const KeySpace* keys, const std::string& set) {
  std::string set_list, set_record;
  DeleteIfArgs args;
  if (keys != nullptr && !set.empty()) {
    set_list = keys->Set(set);
    set_record = keys->SetRecord(set);
    args.set = set;
    args.set_list = set_list;
    args.set_record = set_record;
  }
  args.key = key;
  args.events = events.key;
  args.field = field;
  args.value = value;
  args.event_cap = events.cap;
  args.event = event;
  args.name = name;
  args.node = events.node;
  return DeleteIfCall(args);
}

Result<bool> ParseDeleteIfReply(Result<RedisValue> reply) {
  MCD_ASSIGN_OR_RETURN(int64_t deleted, IntegerReply(std::move(reply), "EVAL (delete_if)"));
  return deleted == 1;
}

std::vector<std::string_view> ForwardCall(const ForwardArgs& a) {
  return {"EVAL", kForwardScript, "3", a.processing, a.queue, a.heartbeat, a.raw};
}

Result<bool> ParseForwardReply(Result<RedisValue> reply) {
  MCD_ASSIGN_OR_RETURN(int64_t forwarded, IntegerReply(std::move(reply), "EVAL (forward)"));
  return forwarded == 1;
}

std::vector<std::string_view> ForgetHolderCall(const ForgetHolderArgs& a) {
  return {"EVAL", kForgetHolderScript, "2", a.holders, a.held, a.holder, a.instance};
}

Result<int64_t> ParseForgetHolderReply(Result<RedisValue> reply) {
  return IntegerReply(std::move(reply), "EVAL (forget_holder)");
}

std::vector<std::string_view> ReferenceCall(std::string_view sha, const ReferenceArgs& a) {
  std::vector<std::string_view> argv;
  argv.reserve(19 + (a.fields ? a.fields->size() : 0));
  if (a.release) {
    argv = {"EVALSHA", sha,      "7",     a.tensor,         a.heartbeat,    a.holders,
            a.held,    a.events, a.queue, a.reply_list,     "-1",           a.node,
            a.holder,  a.pid,    a.name,  a.delete_command, a.marker_ttl_s, a.epoch,
            a.mode};
  } else {
    // A get has no delete command, no reply list, no epoch to check and no mode.
    argv = {"EVALSHA", sha,      "5",   a.tensor, a.heartbeat, a.holders, a.held,    a.events, "1",
            a.node,    a.holder, a.pid, a.name,   "",          "",        kAnyEpoch, ""};
  }
  if (a.fields) argv.insert(argv.end(), a.fields->begin(), a.fields->end());
  return argv;
}

Result<ReferenceReply> ParseReferenceReply(RedisValue reply) {
  if (reply.elements.empty()) return Status(ErrorCode::kUnexpectedReply, "reference script reply");
  std::vector<RedisValue>& e = reply.elements;
  const std::string& kind = e[0].str;
  ReferenceReply out{ReferenceReply::kOk, {}, {}, {}};
  if ((kind == "ok" || kind == "forgotten") && e.size() == 2) {
    out.kind = kind == "ok" ? ReferenceReply::kOk : ReferenceReply::kForgotten;
    out.values = std::move(e[1]);
    return out;
  }
  if (e.size() > 1) out.detail = std::move(e[1].str);
  if (kind == "missing" && e.size() == 3) {
    out.kind = ReferenceReply::kMissing;
    out.settled = std::move(e[2].str);
  } else if (kind == "not_ready") {
    out.kind = ReferenceReply::kNotReady;
  } else if (kind == "wrong_node") {
    out.kind = ReferenceReply::kWrongNode;
  } else if (kind == "not_held") {
    out.kind = ReferenceReply::kNotHeld;
  } else if (kind == "gone") {
    out.kind = ReferenceReply::kGone;
  } else if (kind == "queued") {
    out.kind = ReferenceReply::kQueued;
  } else {
    return Status(ErrorCode::kUnexpectedReply, "reference script answered '" + kind + "'");
  }
  return out;
}

std::vector<std::string_view> RedeemGrantCall(const RedeemGrantArgs& a) {
  return {"EVAL", kRedeemGrantScript, "1", a.grant, a.expected};
}

Result<bool> ParseRedeemGrantReply(Result<RedisValue> reply) {
  if (!reply.ok()) return reply.status();
  return reply->type == RedisValue::Type::kInteger && reply->integer == 1;
}

std::vector<std::string> HeartbeatCall(const HeartbeatArgs& a) {
  std::vector<std::string> argv = {"EVAL",
                                   kHeartbeatScript,
                                   "2",
                                   std::string(a.heartbeat),
                                   std::string(a.events),
                                   std::string(a.instance),
                                   std::string(a.replace),
                                   std::to_string(a.ttl_s),
                                   std::to_string(a.event_cap),
                                   a.held_before ? "1" : ""};
  if (a.fields) {
    argv.reserve(argv.size() + 2 * a.fields->size());
    for (const auto& [field, value] : *a.fields) {
      argv.push_back(field);
      argv.push_back(value);
    }
  }
  return argv;
}

Result<std::optional<HeartbeatHolder>> ParseHeartbeatReply(Result<RedisValue> reply) {
  if (!reply.ok()) return reply.status();
  if (reply->type == RedisValue::Type::kError)
    return Status(ErrorCode::kRedisError, "Redis: " + reply->str);
  std::vector<RedisValue>& e = reply->elements;
  if (e.empty()) return Status(ErrorCode::kUnexpectedReply, "heartbeat script reply");
  if (e[0].str == "ok") return std::optional<HeartbeatHolder>();
  if (e[0].str != "held" || e.size() != 6)
    return Status(ErrorCode::kUnexpectedReply, "heartbeat script answered '" + e[0].str + "'");
  // {"held", instance, pid, pid_start, pttl, pid_space}. The holder's pid and pid_start are read
  // leniently, unlike the heartbeat's codec: anyone may have written that hash, and one whose pid
  // is no number reads as pid 0, which names no process, so the claim takes it for stale rather
  // than failing on it and leaving the node unserved.
  HeartbeatHolder holder;
  holder.instance = std::move(e[1].str);
  holder.pid = std::atoll(e[2].str.c_str());
  holder.pid_start = std::strtoull(e[3].str.c_str(), nullptr, 10);
  holder.pttl_ms = e[4].integer;
  holder.expires = e[4].integer != -1;
  holder.pid_space = std::move(e[5].str);
  return std::optional<HeartbeatHolder>(std::move(holder));
}

}  // namespace mcd
