#include "client/reference_script.h"

#include <unistd.h>

#include <charconv>

#include "client/records.h"
#include "protocol/not_held.h"
#include "redis/lua_scripts.h"

namespace mcd {

namespace {
// How long the marker of a release that the script answered may stay: it is popped at once by
// the BLPOP sent right behind the script, so this only bounds one whose client died.
constexpr const char* kMarkerTtl = "60";

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

ReferenceScript::ReferenceScript(RedisConnection& redis, const ClientOptions& opt,
                                 Transport& transport, std::optional<Holder> holder,
                                 ServerView& server)
    : redis_(redis),
      opt_(opt),
      transport_(transport),
      server_(server),
      holder_(holder),
      holder_id_(holder ? HolderId(holder->pid, holder->start) : ""),
      holders_key_(opt.keys.Holders(opt.node)),
      held_key_(holder ? opt.keys.Held(opt.node, holder_id_) : opt.keys.Unused()),
      events_key_(opt.keys.Events()),
      pid_(std::to_string(holder ? holder->pid : getpid())) {}

Status ReferenceScript::Load() {
  MCD_ASSIGN_OR_RETURN(RedisValue sha, redis_.Command({"SCRIPT", "LOAD", kRefScript}));
  MCD_ASSIGN_OR_RETURN(sha_, AsString(sha, "SCRIPT LOAD"));
  return Status::Ok();
}

Result<TensorRecord> ReferenceScript::Get(const std::string& name) {
  std::string key = opt_.keys.Tensor(name);
  std::string server = opt_.keys.Server(opt_.node);
  std::vector<std::string_view> argv = {
      "EVALSHA", sha_,      "5",        key,   server, holders_key_, held_key_, events_key_,
      "1",       opt_.node, holder_id_, pid_,  name,   "",           "",       kAnyEpoch};
  for (const std::string& field : TensorFieldNames()) argv.push_back(field);
  auto reply = redis_.Command(argv);
  if (!reply.ok() && IsNoScript(reply.status().message())) {
    MCD_RETURN_IF_ERROR(Load());
    argv[1] = sha_;
    reply = redis_.Command(argv);
  }
  if (!reply.ok()) return reply.status();
  bool taken = !reply->elements.empty() && reply->elements[0].str == "ok";
  auto record = Answer(name, reply.value());
  if (!record.ok() && taken) (void)Release(name, kAnyEpoch);  // a hash it cannot read: give it back
  return record;
}

Result<TensorRecord> ReferenceScript::Release(const std::string& name, const std::string& epoch,
                                              bool retried) {
  if (sha_ == kNotLoaded) MCD_RETURN_IF_ERROR(Load());
  MCD_ASSIGN_OR_RETURN(Transport::Outgoing out, transport_.Prepare(DeleteCommand(name, holder_)));
  std::string key = opt_.keys.Tensor(name);
  std::string server = opt_.keys.Server(opt_.node);
  std::vector<std::string_view> argv = {
      "EVALSHA",  sha_,        "7",    key,        server,    holders_key_, held_key_,
      events_key_, out.queue, out.reply_key, "-1", opt_.node, holder_id_, pid_,
      name,       out.body,    kMarkerTtl, epoch};
  for (const std::string& field : TensorFieldNames()) argv.push_back(field);
  MCD_RETURN_IF_ERROR(redis_.Append(argv));
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
    return Release(name, epoch, true);
  }
  auto popped = redis_.ReadReply();
  if (!script->elements.empty() && script->elements[0].str == "queued") {
    return transport_.ServerReply(out, std::move(popped));
  }
  if (!popped.ok()) return popped.status();
  return Answer(name, script.value(), true);
}

Result<TensorRecord> ReferenceScript::Answer(const std::string& name, RedisValue& reply,
                                             bool release) {
  if (reply.elements.empty()) return Status(ErrorCode::kUnexpectedReply, "reference script reply");
  const std::string& kind = reply.elements[0].str;
  std::string detail = reply.elements.size() > 1 ? reply.elements[1].str : "";
  if ((kind == "ok" || kind == "forgotten") && reply.elements.size() == 2) {
    if (release) return ReleasedRecord(name, reply.elements[1]);
    return RecordFromHmget(name, reply.elements[1]);
  }
  if (kind == "missing" && reply.elements.size() == 3)
    return server_.Missing(name, !detail.empty(), reply.elements[2].str);
  if (kind == "not_ready")
    return Status(ErrorCode::kNotReady, "tensor '" + name + "' is " + detail);
  if (kind == "wrong_node") {
    return Status(ErrorCode::kWrongNode,
                  "tensor '" + name + "' lives on node '" + detail + "', not '" + opt_.node + "'");
  }
  if (kind == "not_held") {
    return NotHeldStatus(name);
  }
  if (kind == "gone") {
    return Status(ErrorCode::kUnavailable,
                  "the mcd-serve instance that owns tensor '" + name + "' is not running");
  }
  return Status(ErrorCode::kUnexpectedReply, "reference script answered '" + kind + "'");
}

}  // namespace mcd
