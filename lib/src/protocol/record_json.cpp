// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Records and replies as JSON: what the tools print, what the server answers, and reading both.
#include "common/hex.h"
#include "protocol/json_codec.h"
#include "protocol/json_support.h"
#include "protocol/text.h"

namespace mcd {

namespace {

// The record's members, keys in sorted order, "refcount" only when asked; the object is left
// open, so that a reply can be assembled around it.
void WriteRecordFields(Writer& w, const TensorRecord& r, bool with_refcount) {
  w.StartObject();
  w.Key("bytes");
  w.Uint64(r.bytes);
  w.Key("creator_pid");
  w.Int64(r.creator_pid);
  w.Key("ctime");
  w.Int64(r.ctime_ms);
  w.Key("device");
  w.Int(r.device);
  WriteKeyString(w, "dtype", DTypeName(r.dtype));
  if (!r.epoch.empty()) WriteKeyString(w, "epoch", r.epoch);  // only a hash put back has one
  if (!r.holders.empty()) {                                   // only where read (RecordFromHash)
    w.Key("holders");
    w.StartArray();
    for (const Holder& h : r.holders) {
      w.StartObject();
      w.Key("pid");
      w.Int64(h.pid);
      w.Key("refs");
      w.Int64(h.refs);
      w.Key("start");
      w.Uint64(h.start);
      w.EndObject();
    }
    w.EndArray();
  }
  WriteKeyString(w, "ipc_handle_hex", HexEncode(r.ipc_handle));
  WriteKeyString(w, "ipc_kind", IpcKindName(r.ipc_kind));
  WriteKeyString(w, "lifetime", LifetimeName(r.lifetime));
  WriteKeyString(w, "name", r.name);
  WriteKeyString(w, "node", r.node);
  w.Key("offset");
  w.Uint64(r.offset);
  WriteKeyString(w, "owner", r.owner);
  if (r.lifetime == Lifetime::kStack) {
    w.Key("owner_pid");
    w.Int64(r.owner_pid);
    w.Key("owner_start");
    w.Uint64(r.owner_start);
  }
  if (with_refcount) {
    w.Key("refcount");
    w.Int64(r.refcount);
  }
  if (!r.set.empty()) WriteKeyString(w, "set", r.set);  // only a set's member has one
  w.Key("shape");
  WriteShape(w, r.shape);
  WriteKeyString(w, "state", r.state);
}

enum RecordField {
  kRName,
  kRDType,
  kRShape,
  kRDevice,
  kRBytes,
  kRIpcKind,
  kRHandle,
  kROffset,
  kRRefcount,
  kRState,
  kRCtime,
  kRNode,
  kROwner,
  kRLifetime,
  kRCreatorPid,
  kROwnerPid,
  kROwnerStart,
  kREpoch,
  kRSet,
  kRecordFieldCount
};
constexpr std::string_view kRecordKeys[kRecordFieldCount] = {
    "name",        "dtype",     "shape",       "device", "bytes", "ipc_kind", "ipc_handle_hex",
    "offset",      "refcount",  "state",       "ctime",  "node",  "owner",    "lifetime",
    "creator_pid", "owner_pid", "owner_start", "epoch",  "set"};

// A record object as RecordToJson writes it. Name, dtype, shape, device and bytes are required;
// the others default to what an old record lacks; keys of newer writers are skipped.
Result<TensorRecord> RecordFromObject(const rj::Value& object) {
  if (!object.IsObject())
    return Status(ErrorCode::kUnexpectedReply, "tensor record is not a JSON object");
  MemberIndex<kRecordFieldCount> m(object, kRecordKeys);
  auto malformed = [&](RecordField f, const char* why) {
    return Status(ErrorCode::kUnexpectedReply,
                  "malformed tensor record: \"" + std::string(kRecordKeys[f]) + "\" " + why);
  };
  auto text = [&](RecordField f, std::string_view fallback) -> Result<std::string> {
    if (m.at[f] == nullptr)
      return f <= kRBytes ? Result<std::string>(malformed(f, "is missing")) : std::string(fallback);
    if (!m.at[f]->IsString()) return malformed(f, "is not a string");
    return std::string(Text(*m.at[f]));
  };
  auto integer = [&](RecordField f) -> Result<int64_t> {
    if (m.at[f] == nullptr)
      return f <= kRBytes ? Result<int64_t>(malformed(f, "is missing")) : int64_t{0};
    if (!m.at[f]->IsInt64()) return malformed(f, "is not a 64-bit integer");
    return m.at[f]->GetInt64();
  };
  auto count = [&](RecordField f) -> Result<uint64_t> {
    if (m.at[f] == nullptr)
      return f <= kRBytes ? Result<uint64_t>(malformed(f, "is missing")) : uint64_t{0};
    if (!m.at[f]->IsUint64()) return malformed(f, "is not a non-negative integer");
    return m.at[f]->GetUint64();
  };
  TensorRecord r;
  MCD_ASSIGN_OR_RETURN(r.name, text(kRName, ""));
  MCD_ASSIGN_OR_RETURN(std::string dtype_name, text(kRDType, ""));
  auto dtype = ParseDType(dtype_name);
  if (!dtype) return Status(ErrorCode::kUnexpectedReply, "tensor record has an unknown dtype");
  r.dtype = *dtype;
  if (m.at[kRShape] == nullptr || !m.at[kRShape]->IsArray())
    return malformed(kRShape, "is not an array");
  for (const rj::Value& dim : m.at[kRShape]->GetArray()) {
    if (!dim.IsInt64()) return malformed(kRShape, "holds a value that is not an integer");
    r.shape.push_back(dim.GetInt64());
  }
  MCD_ASSIGN_OR_RETURN(int64_t device, integer(kRDevice));
  if (device < INT32_MIN || device > INT32_MAX) return malformed(kRDevice, "is out of range");
  r.device = static_cast<int>(device);
  MCD_ASSIGN_OR_RETURN(r.bytes, count(kRBytes));
  MCD_ASSIGN_OR_RETURN(std::string ipc_kind, text(kRIpcKind, ""));
  r.ipc_kind = ParseIpcKind(ipc_kind);
  MCD_ASSIGN_OR_RETURN(std::string handle_hex, text(kRHandle, ""));
  MCD_ASSIGN_OR_RETURN(r.ipc_handle, HexDecode(handle_hex));
  MCD_ASSIGN_OR_RETURN(r.offset, count(kROffset));
  MCD_ASSIGN_OR_RETURN(r.refcount, integer(kRRefcount));
  MCD_ASSIGN_OR_RETURN(r.state, text(kRState, ""));
  MCD_ASSIGN_OR_RETURN(r.ctime_ms, integer(kRCtime));
  MCD_ASSIGN_OR_RETURN(r.node, text(kRNode, ""));
  MCD_ASSIGN_OR_RETURN(r.owner, text(kROwner, ""));
  MCD_ASSIGN_OR_RETURN(std::string lifetime, text(kRLifetime, "heap"));
  r.lifetime = lifetime == "stack" ? Lifetime::kStack : Lifetime::kHeap;
  MCD_ASSIGN_OR_RETURN(r.creator_pid, integer(kRCreatorPid));
  MCD_ASSIGN_OR_RETURN(r.owner_pid, integer(kROwnerPid));
  MCD_ASSIGN_OR_RETURN(r.owner_start, count(kROwnerStart));
  MCD_ASSIGN_OR_RETURN(r.epoch, text(kREpoch, ""));
  MCD_ASSIGN_OR_RETURN(r.set, text(kRSet, ""));
  MCD_RETURN_IF_ERROR(ValidateRecord(r));
  return r;
}

}  // namespace

std::string RecordToJson(const TensorRecord& r) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  WriteRecordFields(w, r, true);
  w.EndObject();
  assert(w.IsComplete());  // every object and array opened here is closed
  return pooled.str();
}

std::string RecordJsonHead(const TensorRecord& r) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  WriteRecordFields(w, r, false);
  assert(!w.IsComplete());
  return pooled.str();  // the object stays open
}

std::string RecordToJson(const TensorRecord& r, std::string_view key, std::string_view json) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  WriteRecordFields(w, r, true);
  w.Key(key.data(), static_cast<rj::SizeType>(key.size()));
  w.RawValue(json.data(), json.size(), rj::kArrayType);
  w.EndObject();
  return pooled.str();
}

Result<TensorRecord> RecordFromJson(std::string_view text) {
  PooledDocument pooled;
  Status parsed = ParseJson(text, 2, "tensor record", pooled);
  if (!parsed.ok()) return Status(ErrorCode::kUnexpectedReply, parsed.message());
  return RecordFromObject(pooled.doc());
}

Result<TensorRecord> RecordFromReply(std::string_view text) {
  PooledDocument pooled;
  Document& doc = pooled.doc();
  if (!ParseJson(text, 3, "server reply", pooled).ok() || !doc.IsObject()) {
    return Status(ErrorCode::kUnexpectedReply, "server reply is not a JSON object");
  }
  auto ok = doc.FindMember("ok");
  if (ok != doc.MemberEnd() && ok->value.IsBool() && ok->value.GetBool()) {
    auto tensor = doc.FindMember("tensor");
    if (tensor == doc.MemberEnd())
      return Status(ErrorCode::kUnexpectedReply, "reply has no tensor");
    return RecordFromObject(tensor->value);
  }
  std::string code = "internal";
  std::string message = "the server gave no reason";
  auto error = doc.FindMember("error");
  if (error != doc.MemberEnd() && error->value.IsObject()) {
    auto text_of = [&](const char* key, std::string& out) {
      auto member = error->value.FindMember(key);
      if (member != error->value.MemberEnd() && member->value.IsString())
        out = std::string(Text(member->value));
    };
    text_of("code", code);
    text_of("message", message);
  }
  return Status(ErrorCodeFromName(code).value_or(ErrorCode::kInternal), message);
}

std::string ErrorReplyJson(const std::string& req, const char* op, const Status& status) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  w.StartObject();
  w.Key("ok");
  w.Bool(false);
  w.Key("error");
  w.StartObject();
  WriteKeyString(w, "code", ErrorName(status.code()));
  WriteKeyString(w, "message", status.message());
  w.EndObject();
  if (!req.empty()) WriteKeyString(w, "req", req);
  if (op != nullptr) WriteKeyString(w, "op", op);
  w.EndObject();
  assert(w.IsComplete());
  return pooled.str();
}

std::string ReplyHeadJson(const std::string& req, Op op) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  w.StartObject();
  w.Key("ok");
  w.Bool(true);
  WriteKeyString(w, "op", OpName(op));
  if (!req.empty()) WriteKeyString(w, "req", req);
  w.Key("tensor");
  // Left open at the tensor, whose ':' the writer would put before the next value: the caller
  // appends the record and the closing braces.
  return pooled.str() + ":";
}

TensorReplyParts TensorReplyHead(const std::string& req, Op op, std::string_view record_head) {
  static constexpr std::string_view kRefcount = R"(,"refcount":)";
  TensorReplyParts parts{ReplyHeadJson(req, op), "}}", R"(},"freed":true})"};
  // Room for the count and the longest tail too, so that the reply grows in place.
  parts.head.reserve(parts.head.size() + record_head.size() + kRefcount.size() + 40);
  parts.head.append(record_head).append(kRefcount);
  if (op == Op::kDelete || op == Op::kAbandon) parts.held_tail = R"(},"freed":false})";
  return parts;
}

std::string TensorReplyJson(std::string head, long long refcount, std::string_view held_tail,
                            std::string_view freed_tail) {
  if (refcount <= 0) return std::move(head.append("0").append(freed_tail));
  return std::move(head.append(std::to_string(refcount)).append(held_tail));
}

std::string TensorReplyJson(const std::string& req, Op op, std::string_view record_head,
                            long long refcount) {
  TensorReplyParts parts = TensorReplyHead(req, op, record_head);
  return TensorReplyJson(std::move(parts.head), refcount, parts.held_tail, parts.freed_tail);
}

}  // namespace mcd
