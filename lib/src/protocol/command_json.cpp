// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The protocol's commands as JSON: ParseCommand, CommandToJson, and shapes.
#include "protocol/json_codec.h"
#include "protocol/json_support.h"
#include "protocol/text.h"

namespace mcd {

namespace {

// Reads an integer field that must be a JSON integer (not 2.5, not "2").
Result<int64_t> IntField(const rj::Value& value, const char* field) {
  if (value.IsInt64()) return value.GetInt64();
  if (value.IsUint64())
    return Status(ErrorCode::kTooLarge, std::string("\"") + field + "\" is too large");
  return Invalid(std::string("\"") + field + "\" must be an integer");
}

Result<std::string_view> StringField(const rj::Value& value, const char* field) {
  if (!value.IsString()) return Invalid(std::string("\"") + field + "\" must be a string");
  return Text(value);
}

// The fields a command may have, in the order ParseCommand reads them.
enum CommandField {
  kOp,
  kName,
  kReq,
  kNode,
  kPid,
  kSentMs,
  kDType,
  kShape,
  kDevice,
  kLifetime,
  kInit,
  kOwnerPid,
  kOwnerStart,
  kBytes,
  kCopyOf,
  kFill,
  kPidSpace,
  kMembers,
  kSet,
  kOwnOnly,
  kCommandFieldCount
};
constexpr std::string_view kCommandKeys[kCommandFieldCount] = {
    "op",      "name",   "req",       "node",    "pid",       "sent_ms",     "dtype",
    "shape",   "device", "lifetime",  "init",    "owner_pid", "owner_start", "bytes",
    "copy_of", "fill",   "pid_space", "members", "set",       "own_only"};

// owner_pid and owner_start: the process a stack tensor (create) or a reference (get, delete)
// is bound to.
Status ParseOwner(const MemberIndex<kCommandFieldCount>& m, Command& cmd) {
  if (m.at[kOwnerPid] != nullptr) {
    MCD_ASSIGN_OR_RETURN(cmd.owner_pid, IntField(*m.at[kOwnerPid], "owner_pid"));
    if (cmd.owner_pid <= 0) return Invalid("\"owner_pid\" must be positive");
  }
  if (m.at[kOwnerStart] != nullptr) {
    MCD_ASSIGN_OR_RETURN(int64_t start, IntField(*m.at[kOwnerStart], "owner_start"));
    if (start < 0) return Invalid("\"owner_start\" must not be negative");
    cmd.owner_start = static_cast<uint64_t>(start);
  }
  return Status::Ok();
}

Status ParseRequestId(const rj::Value& req, Command& cmd) {
  if (req.IsString()) {
    cmd.req = std::string(Text(req));
  } else if (req.IsInt64()) {
    cmd.req = std::to_string(req.GetInt64());
  } else if (req.IsUint64()) {
    cmd.req = std::to_string(req.GetUint64());
  } else {
    return Invalid("\"req\" must be a string");
  }
  if (cmd.req.empty() || cmd.req.size() > 128) return Invalid("\"req\" must be 1 to 128 bytes");
  for (char c : cmd.req) {
    if (!IsNameChar(c)) return Invalid("\"req\" holds characters outside [A-Za-z0-9._:/@+=,-]");
  }
  return Status::Ok();
}

// The text of the JSON value that starts at `at`, when it may be a req: a string up to its
// closing quote (escapes included), or anything else up to what may follow a value (whitespace,
// ',', '}' or ']'). "" when it is longer than a req can be, or runs to the end of `raw` (a number
// there may have lost digits).
std::string_view ValueText(std::string_view raw, size_t at) {
  constexpr size_t kMaxText = 2 + 128 * 6;  // 128 characters, each escaped as \uXXXX
  size_t end = at;
  if (at < raw.size() && raw[at] == '"') {
    for (end = at + 1; end < raw.size() && end - at < kMaxText && raw[end] != '"'; ++end) {
      if (raw[end] == '\\') ++end;
    }
    return end < raw.size() && raw[end] == '"' ? raw.substr(at, end + 1 - at) : "";
  }
  constexpr std::string_view kAfterValue = " \t\r\n,}]";
  auto after_value = [&](size_t i) { return kAfterValue.find(raw[i]) != std::string_view::npos; };
  while (end < raw.size() && end - at < kMaxText && !after_value(end)) ++end;
  return end < raw.size() && after_value(end) ? raw.substr(at, end - at) : "";
}

// The req of a command that cannot be read as a JSON object (cut short, too large, too deep,
// not an object): the first "req" key whose value ParseRequestId takes, as it takes it, so
// that its sender hears why instead of waiting out its timeout. "" when there is none.
std::string FindRequestId(std::string_view raw) {
  constexpr std::string_view kKey = "\"req\"";
  auto skip_space = [&](size_t at) {
    while (at < raw.size() &&
           (raw[at] == ' ' || raw[at] == '\t' || raw[at] == '\n' || raw[at] == '\r'))
      ++at;
    return at;
  };
  for (size_t key = raw.find(kKey); key != std::string_view::npos; key = raw.find(kKey, key + 1)) {
    size_t at = skip_space(key + kKey.size());
    if (at >= raw.size() || raw[at] != ':') continue;
    std::string_view text = ValueText(raw, skip_space(at + 1));
    if (text.empty()) continue;
    PooledDocument pooled;
    Command cmd;
    if (ParseJson(text, 1, "req", pooled).ok() && ParseRequestId(pooled.doc(), cmd).ok()) {
      return cmd.req;
    }
  }
  return "";
}

Status ParseShape(const rj::Value* shape, Command& cmd) {
  if (shape == nullptr) return Invalid("missing \"shape\"");
  if (!shape->IsArray()) return Invalid("\"shape\" must be an array of integers");
  if (shape->Size() > kMaxDims) {
    return Invalid("shape has " + std::to_string(shape->Size()) + " dimensions; the limit is " +
                   std::to_string(kMaxDims));
  }
  for (const rj::Value& dim : shape->GetArray()) {
    if (dim.IsDouble()) return Invalid("shape dimensions must be integers");
    MCD_ASSIGN_OR_RETURN(int64_t value, IntField(dim, "shape"));
    cmd.shape.push_back(value);
  }
  return Status::Ok();
}

Status ParseDeviceField(const rj::Value* device, Command& cmd) {
  if (device == nullptr) return Invalid("missing \"device\"");
  if (device->IsString()) {
    MCD_ASSIGN_OR_RETURN(cmd.device, ParseDevice(Text(*device)));
    return Status::Ok();
  }
  MCD_ASSIGN_OR_RETURN(int64_t ordinal, IntField(*device, "device"));
  if (ordinal < -1 || ordinal > 1023)
    return Invalid("device " + std::to_string(ordinal) + " is out of range");
  cmd.device = static_cast<int>(ordinal);
  return Status::Ok();
}

Status ParseDTypeField(const rj::Value* value, DType& out) {
  if (value == nullptr) return Invalid("missing \"dtype\"");
  MCD_ASSIGN_OR_RETURN(std::string_view dtype, StringField(*value, "dtype"));
  auto parsed_dtype = ParseDType(dtype);
  if (!parsed_dtype)
    return Invalid("unknown dtype \"" + Printable(dtype) + "\" (expected " + DTypeNames() + ")");
  out = *parsed_dtype;
  return Status::Ok();
}

// A create's own fields (dtype, shape, bytes, then CreatePlacement's).
Status ParseCreateFields(const MemberIndex<kCommandFieldCount>& m, Command& cmd) {
  MCD_RETURN_IF_ERROR(ParseDTypeField(m.at[kDType], cmd.dtype));
  MCD_RETURN_IF_ERROR(ParseShape(m.at[kShape], cmd));
  MCD_ASSIGN_OR_RETURN(cmd.bytes, ShapeBytes(cmd.shape, cmd.dtype));
  if (const rj::Value* bytes = m.at[kBytes]) {
    // Optional cross-check written by some clients; it must agree with shape x dtype.
    uint64_t stated = bytes->IsUint64() ? bytes->GetUint64() : ~cmd.bytes;
    if (stated != cmd.bytes)
      return Invalid("\"bytes\" does not match shape x dtype (" + std::to_string(cmd.bytes) + ")");
  }
  return Status::Ok();
}

// What a create and a create_set share: device, lifetime, init, copy_of, fill, pid_space.
Status ParsePlacement(const MemberIndex<kCommandFieldCount>& m, Command& cmd) {
  MCD_RETURN_IF_ERROR(ParseDeviceField(m.at[kDevice], cmd));
  if (m.at[kLifetime] != nullptr) {
    MCD_ASSIGN_OR_RETURN(std::string_view lifetime, StringField(*m.at[kLifetime], "lifetime"));
    if (lifetime != "heap" && lifetime != "stack")
      return Invalid("\"lifetime\" must be \"heap\" or \"stack\"");
    cmd.lifetime = lifetime == "stack" ? Lifetime::kStack : Lifetime::kHeap;
  }
  if (m.at[kInit] != nullptr) {
    MCD_ASSIGN_OR_RETURN(std::string_view init, StringField(*m.at[kInit], "init"));
    if (init != "zero" && init != "none") return Invalid("\"init\" must be \"zero\" or \"none\"");
    cmd.zero_init = init == "zero";
  }
  if (m.at[kCopyOf] != nullptr) {
    MCD_ASSIGN_OR_RETURN(std::string_view source, StringField(*m.at[kCopyOf], "copy_of"));
    Status valid = ValidateName(source);
    if (!valid.ok()) return Invalid("\"copy_of\": " + valid.message());
    cmd.copy_of = std::string(source);
  }
  if (const rj::Value* fill = m.at[kFill]) {
    if (!fill->IsBool()) return Invalid("\"fill\" must be true or false");
    cmd.fill = fill->GetBool();
    if (cmd.fill && cmd.pid == 0)
      return Invalid("a create with \"fill\" needs \"pid\": the process that fills it");
    if (cmd.fill && cmd.pid == kInitPid)
      return Invalid(
          "a create filled by pid 1 (init), which never exits, would never be removed "
          "were it not published");
    if (cmd.fill && !cmd.copy_of.empty())
      return Invalid(
          "\"fill\" and \"copy_of\" exclude each other: a copy is filled by the servers");
  }
  if (const rj::Value* space = m.at[kPidSpace]) {
    MCD_ASSIGN_OR_RETURN(std::string_view text, StringField(*space, "pid_space"));
    if (!cmd.fill) return Invalid("\"pid_space\" goes with \"fill\"");
    if (text.empty() || text.size() > 128) return Invalid("\"pid_space\" must be 1 to 128 bytes");
    cmd.pid_space = std::string(text);
  }
  if (cmd.lifetime == Lifetime::kStack && cmd.owner_pid == 0 && cmd.pid == 0) {
    return Invalid("a stack tensor needs \"pid\" or \"owner_pid\": the process it is bound to");
  }
  int64_t owner = cmd.owner_pid != 0 ? cmd.owner_pid : cmd.pid;
  if (cmd.lifetime == Lifetime::kStack && owner == kInitPid) {
    return Invalid(
        "a stack tensor bound to pid 1 (init), which never exits, would never be "
        "reclaimed");
  }
  return Status::Ok();
}

// A create_set's fields: "members" (the id of its members list), and a create's placement; the
// members bring their own dtypes and shapes.
Status ParseSetFields(const MemberIndex<kCommandFieldCount>& m, Command& cmd) {
  for (int f : {kDType, kShape, kBytes, kCopyOf, kSet}) {
    if (m.at[f] != nullptr)
      return Invalid("\"" + std::string(kCommandKeys[f]) + "\" is not for op \"create_set\"");
  }
  if (m.at[kMembers] == nullptr) return Invalid("missing \"members\"");
  Command id;  // the members list's id follows a req's rules
  Status valid = ParseRequestId(*m.at[kMembers], id);
  if (!valid.ok()) return Invalid("\"members\": " + valid.message());
  cmd.members = id.req;
  return ParsePlacement(m, cmd);
}

enum MemberField { kMName, kMDType, kMShape, kMemberFieldCount };
constexpr std::string_view kMemberKeys[kMemberFieldCount] = {"name", "dtype", "shape"};

}  // namespace

Result<SetMember> ParseSetMember(std::string_view raw, std::string_view set) {
  if (raw.size() > kMaxCommandBytes) {
    return Status(ErrorCode::kTooLarge, "set member is " + std::to_string(raw.size()) +
                                            " bytes; the limit is " +
                                            std::to_string(kMaxCommandBytes));
  }
  PooledDocument pooled;
  Document& doc = pooled.doc();
  MCD_RETURN_IF_ERROR(ParseJson(raw, 3, "set member", pooled));
  if (!doc.IsObject()) return Invalid("set member is not a JSON object");
  MemberIndex<kMemberFieldCount> m(doc, kMemberKeys);
  if (!m.repeated.empty())
    return Invalid("set member repeats the key \"" + Printable(m.repeated) + "\"");
  if (m.has_unknown) return Invalid("unknown set member field \"" + Printable(m.unknown) + "\"");
  if (m.at[kMName] == nullptr) return Invalid("set member without \"name\"");
  MCD_ASSIGN_OR_RETURN(std::string_view name, StringField(*m.at[kMName], "name"));
  MCD_RETURN_IF_ERROR(ValidateName(name));
  if (name.size() <= set.size() + 1 || name.substr(0, set.size()) != set ||
      name[set.size()] != '/') {
    return Invalid("set member '" + Printable(name) + "' is not named '" + std::string(set) +
                   "/...'");
  }
  SetMember member;
  member.name = std::string(name);
  Command shape;  // read as a create reads its own
  MCD_RETURN_IF_ERROR(ParseDTypeField(m.at[kMDType], member.dtype));
  MCD_RETURN_IF_ERROR(ParseShape(m.at[kMShape], shape));
  member.shape = std::move(shape.shape);
  MCD_ASSIGN_OR_RETURN(member.bytes, ShapeBytes(member.shape, member.dtype));
  return member;
}

std::string SetMemberToJson(const SetMember& member) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  w.StartObject();
  WriteKeyString(w, "name", member.name);
  WriteKeyString(w, "dtype", DTypeName(member.dtype));
  w.Key("shape");
  WriteShape(w, member.shape);
  w.EndObject();
  return pooled.str();
}

Result<Command> ParseCommand(std::string_view raw, std::string* req_out) {
  auto unreadable = [&](Status status) {
    if (req_out != nullptr) *req_out = FindRequestId(raw);
    return status;
  };
  if (raw.size() > kMaxCommandBytes) {
    return unreadable(Status(ErrorCode::kTooLarge, "command is " + std::to_string(raw.size()) +
                                                       " bytes; the limit is " +
                                                       std::to_string(kMaxCommandBytes)));
  }
  PooledDocument pooled;
  Document& doc = pooled.doc();
  Status parsed = ParseJson(raw, kMaxJsonDepth, "command", pooled);
  if (!parsed.ok()) return unreadable(parsed);
  if (!doc.IsObject()) return unreadable(Invalid("command is not a JSON object"));
  MemberIndex<kCommandFieldCount> m(doc, kCommandKeys);

  Command cmd;
  // The request id first, so that every later error can be answered.
  if (m.at[kReq] != nullptr) {
    MCD_RETURN_IF_ERROR(ParseRequestId(*m.at[kReq], cmd));
    if (req_out != nullptr) *req_out = cmd.req;
  }
  if (!m.repeated.empty())
    return Invalid("command repeats the key \"" + Printable(m.repeated) + "\"");
  if (m.has_unknown) return Invalid("unknown field \"" + Printable(m.unknown) + "\"");

  if (m.at[kOp] == nullptr) return Invalid("missing \"op\"");
  MCD_ASSIGN_OR_RETURN(std::string_view op, StringField(*m.at[kOp], "op"));
  if (op == "create") {
    cmd.op = Op::kCreate;
  } else if (op == "get") {
    cmd.op = Op::kGet;
  } else if (op == "delete") {
    cmd.op = Op::kDelete;
  } else if (op == "publish") {
    cmd.op = Op::kPublish;
  } else if (op == "abandon") {
    cmd.op = Op::kAbandon;
  } else if (op == "create_set") {
    cmd.op = Op::kCreateSet;
  } else {
    return Invalid("unknown op \"" + Printable(op) +
                   "\" (expected create, get, delete, publish, abandon or create_set)");
  }
  if (m.at[kName] == nullptr) return Invalid("missing \"name\"");
  MCD_ASSIGN_OR_RETURN(std::string_view name, StringField(*m.at[kName], "name"));
  const bool makes = cmd.op == Op::kCreate || cmd.op == Op::kCreateSet;
  MCD_RETURN_IF_ERROR(makes ? ValidateNewName(name) : ValidateName(name));
  cmd.name = std::string(name);
  if (m.at[kNode] != nullptr) {
    MCD_ASSIGN_OR_RETURN(std::string_view node, StringField(*m.at[kNode], "node"));
    if (node.empty() || node.size() > 255) return Invalid("\"node\" must be 1 to 255 bytes");
    cmd.node = std::string(node);
  }
  if (m.at[kPid] != nullptr) {
    MCD_ASSIGN_OR_RETURN(cmd.pid, IntField(*m.at[kPid], "pid"));
    if (cmd.pid < 0) return Invalid("\"pid\" must not be negative");
  }
  if (m.at[kSentMs] != nullptr) {
    MCD_ASSIGN_OR_RETURN(cmd.sent_ms, IntField(*m.at[kSentMs], "sent_ms"));
    if (cmd.sent_ms < 0) return Invalid("\"sent_ms\" must not be negative");
  }
  MCD_RETURN_IF_ERROR(ParseOwner(m, cmd));
  if (const rj::Value* own = m.at[kOwnOnly]) {
    if (cmd.op != Op::kDelete) return Invalid("\"own_only\" is only valid for op \"delete\"");
    if (!own->IsBool()) return Invalid("\"own_only\" must be true or false");
    cmd.own_only = own->GetBool();
    if (cmd.own_only && cmd.owner_pid == 0)
      return Invalid("\"own_only\" needs \"owner_pid\": the process whose reference it is");
  }
  if (cmd.op == Op::kGet && cmd.owner_pid == kInitPid) {
    return Invalid(
        "\"owner_pid\" 1 is init, which never exits: a reference bound to it would "
        "never be given back");
  }
  if (cmd.op == Op::kCreate) {
    if (m.at[kMembers] != nullptr || m.at[kSet] != nullptr)
      return Invalid("\"members\" and \"set\" are not for op \"create\" (see create_set)");
    MCD_RETURN_IF_ERROR(ParseCreateFields(m, cmd));
    MCD_RETURN_IF_ERROR(ParsePlacement(m, cmd));
    return cmd;
  }
  if (cmd.op == Op::kCreateSet) {
    MCD_RETURN_IF_ERROR(ParseSetFields(m, cmd));
    return cmd;
  }
  if ((cmd.op == Op::kPublish || cmd.op == Op::kAbandon) && cmd.pid == 0)
    return Invalid(std::string(OpName(cmd.op)) +
                   " needs \"pid\": the process that filled the tensor");
  if (const rj::Value* set = m.at[kSet]) {
    if (cmd.op != Op::kPublish && cmd.op != Op::kAbandon)
      return Invalid("\"set\" is only valid for op \"publish\" and \"abandon\"");
    if (!set->IsBool()) return Invalid("\"set\" must be true or false");
    cmd.set = set->GetBool();
  }
  for (int f = kDType; f < kCommandFieldCount; ++f) {
    if (f == kOwnerPid || f == kOwnerStart || f == kSet || f == kOwnOnly) continue;
    if (m.at[f] != nullptr)
      return Invalid("\"" + std::string(kCommandKeys[f]) + "\" is only valid for op \"create\"");
  }
  return cmd;
}

std::string CommandToJson(const Command& cmd) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  w.StartObject();
  WriteKeyString(w, "op", OpName(cmd.op));
  WriteKeyString(w, "name", cmd.name);
  if (!cmd.req.empty()) WriteKeyString(w, "req", cmd.req);
  if (cmd.node) WriteKeyString(w, "node", *cmd.node);
  if (cmd.pid != 0) {
    w.Key("pid");
    w.Int64(cmd.pid);
  }
  if (cmd.sent_ms != 0) {
    w.Key("sent_ms");
    w.Int64(cmd.sent_ms);
  }
  if (cmd.op == Op::kCreateSet) WriteKeyString(w, "members", cmd.members);
  if (cmd.set) {
    w.Key("set");
    w.Bool(true);
  }
  if (cmd.op == Op::kCreate || cmd.op == Op::kCreateSet) {
    if (cmd.op == Op::kCreate) {
      WriteKeyString(w, "dtype", DTypeName(cmd.dtype));
      w.Key("shape");
      WriteShape(w, cmd.shape);
    }
    w.Key("device");
    w.Int(cmd.device);
    if (cmd.lifetime != Lifetime::kHeap) WriteKeyString(w, "lifetime", LifetimeName(cmd.lifetime));
    if (!cmd.zero_init) WriteKeyString(w, "init", "none");
    if (!cmd.copy_of.empty()) WriteKeyString(w, "copy_of", cmd.copy_of);
    if (cmd.fill) {
      w.Key("fill");
      w.Bool(true);
      if (!cmd.pid_space.empty()) WriteKeyString(w, "pid_space", cmd.pid_space);
    }
  }
  if (cmd.owner_pid != 0) {
    w.Key("owner_pid");
    w.Int64(cmd.owner_pid);
  }
  if (cmd.owner_start != 0) {
    w.Key("owner_start");
    w.Uint64(cmd.owner_start);
  }
  if (cmd.own_only) {
    w.Key("own_only");
    w.Bool(true);
  }
  w.EndObject();
  assert(w.IsComplete());  // every object and array opened here is closed
  return pooled.str();
}

std::string ShapeToJson(const std::vector<int64_t>& shape) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  WriteShape(w, shape);
  assert(w.IsComplete());
  return pooled.str();
}

Result<std::vector<int64_t>> ShapeFromJson(std::string_view text) {
  PooledDocument pooled;
  Document& doc = pooled.doc();
  Status parsed = ParseJson(text, 1, "shape", pooled);
  std::vector<int64_t> out;
  bool ok = parsed.ok() && doc.IsArray() && doc.Size() <= kMaxDims * 4;
  for (size_t i = 0; ok && i < doc.Size(); ++i) {
    ok = doc[static_cast<rj::SizeType>(i)].IsInt64();
    if (ok) out.push_back(doc[static_cast<rj::SizeType>(i)].GetInt64());
  }
  if (!ok) return Invalid("shape \"" + Printable(text) + "\" is not a JSON array of integers");
  return out;
}

}  // namespace mcd
