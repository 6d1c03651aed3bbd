// Reading: RapidJSON's SAX reader fills a document through DepthLimit, which refuses nesting
// deeper than the caller allows before anything deeper is built (iterative parsing, so no
// recursion on hostile input either); the document lives in a pool on the stack. Writing:
// RapidJSON's Writer, after UnicodeSafe has replaced invalid UTF-8.
#include "protocol/json_codec.h"

#include <rapidjson/document.h>
#include <rapidjson/encodedstream.h>
#include <rapidjson/encodings.h>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdint>

#include "protocol/text.h"

namespace mcd {

namespace rj = rapidjson;

namespace {

using Pool = rj::MemoryPoolAllocator<>;
// Nodes and the parser's stacks both in the pool.
using Document = rj::GenericDocument<rj::UTF8<>, Pool, Pool>;
using Reader = rj::GenericReader<rj::UTF8<>, rj::UTF8<>, Pool>;

// A document whose nodes and parsing stacks live in a buffer on the caller's stack: a command or
// a reply fits in it, so reading one allocates nothing (a larger text spills into the heap).
class PooledDocument {
 public:
  PooledDocument() : pool_(buffer_, sizeof(buffer_)), doc_(&pool_, 256, &pool_) {}
  Document& doc() { return doc_; }
  Pool& pool() { return pool_; }

 private:
  char buffer_[8192];
  Pool pool_;
  Document doc_;
};

// Forwards the reader's events to the document, and stops at nesting deeper than `max_depth`.
class DepthLimit {
 public:
  DepthLimit(Document& doc, int max_depth) : doc_(doc), max_depth_(max_depth) {}
  bool Null() { return doc_.Null(); }
  bool Bool(bool b) { return doc_.Bool(b); }
  bool Int(int i) { return doc_.Int(i); }
  bool Uint(unsigned u) { return doc_.Uint(u); }
  bool Int64(int64_t i) { return doc_.Int64(i); }
  bool Uint64(uint64_t u) { return doc_.Uint64(u); }
  bool Double(double d) { return doc_.Double(d); }
  bool RawNumber(const char* str, rj::SizeType length, bool copy) {
    return doc_.RawNumber(str, length, copy);
  }
  bool String(const char* str, rj::SizeType length, bool copy) {
    return doc_.String(str, length, copy);
  }
  bool Key(const char* str, rj::SizeType length, bool copy) { return doc_.Key(str, length, copy); }
  bool StartObject() { return Enter() && doc_.StartObject(); }
  bool EndObject(rj::SizeType members) { return Leave() && doc_.EndObject(members); }
  bool StartArray() { return Enter() && doc_.StartArray(); }
  bool EndArray(rj::SizeType elements) { return Leave() && doc_.EndArray(elements); }
  bool too_deep() const { return too_deep_; }

 private:
  bool Enter() {
    too_deep_ = ++depth_ > max_depth_;
    return !too_deep_;
  }
  bool Leave() {
    --depth_;
    return true;
  }
  Document& doc_;
  int max_depth_;
  int depth_ = 0;
  bool too_deep_ = false;
};

// Parses `text` (not NUL-terminated; a NUL byte in it is an error, not its end) into `doc`.
Status ParseJson(std::string_view text, int max_depth, const char* what, PooledDocument& pooled) {
  Document& doc = pooled.doc();
  rj::ParseResult result;
  bool too_deep = false;
  auto generate = [&](Document& handler) {
    DepthLimit limit(handler, max_depth);
    rj::MemoryStream memory(text.data(), text.size());
    rj::EncodedInputStream<rj::UTF8<>, rj::MemoryStream> in(memory);
    Reader reader(&pooled.pool(), 256);
    result = reader.Parse<rj::kParseIterativeFlag | rj::kParseValidateEncodingFlag>(in, limit);
    too_deep = limit.too_deep();
    // The reader takes a NUL byte for the end of its input: whatever follows one is refused here.
    if (!result.IsError() && in.Tell() != text.size()) {
      result.Set(rj::kParseErrorDocumentRootNotSingular, in.Tell());
    }
    return !result.IsError();
  };
  doc.Populate(generate);
  if (too_deep) {
    return Invalid(std::string(what) + " nests deeper than " + std::to_string(max_depth) +
                   " levels");
  }
  if (result.IsError()) {
    return Invalid(std::string(what) + " is not valid JSON (byte " +
                   std::to_string(result.Offset()) + ": " + rj::GetParseError_En(result.Code()) +
                   ")");
  }
  return Status::Ok();
}

std::string_view Text(const rj::Value& value) {
  return {value.GetString(), value.GetStringLength()};
}

// `text` as valid UTF-8: each invalid sequence replaced by U+FFFD, so that what is written is
// JSON whatever a hand-written hash or a Redis error held.
std::string UnicodeSafe(std::string_view text) {
  rj::MemoryStream memory(text.data(), text.size());
  rj::EncodedInputStream<rj::UTF8<>, rj::MemoryStream> in(memory);
  rj::GenericStringBuffer<rj::UTF8<>> valid;
  while (in.Tell() < text.size()) {
    size_t start = in.Tell();
    unsigned codepoint = 0;
    if (rj::UTF8<>::Decode(in, &codepoint)) {
      rj::UTF8<>::Encode(valid, codepoint);
    } else {
      if (in.Tell() == start) in.Take();  // always move on
      rj::UTF8<>::Encode(valid, 0xFFFDu);
    }
  }
  return std::string(valid.GetString(), valid.GetSize());
}

using Buffer = rj::GenericStringBuffer<rj::UTF8<>, Pool>;
using Writer = rj::Writer<Buffer, rj::UTF8<>, rj::UTF8<>, Pool>;

// A writer whose output and nesting stack live in a buffer on the caller's stack: writing a
// command, a reply or a record allocates only the string it returns.
class PooledWriter {
 public:
  PooledWriter() : pool_(buffer_, sizeof(buffer_)), out_(&pool_, 1024), writer_(out_, &pool_, 8) {}
  Writer& w() { return writer_; }
  std::string str() const { return std::string(out_.GetString(), out_.GetSize()); }

 private:
  char buffer_[4096];
  Pool pool_;
  Buffer out_;
  Writer writer_;
};

// True when every byte is below 0x80. Or-ing them all, without an early exit, lets the compiler
// check many bytes at a time: names, handles and owners are short ASCII.
bool IsAscii(std::string_view text) {
  unsigned char any = 0;
  for (char c : text) any = static_cast<unsigned char>(any | static_cast<unsigned char>(c));
  return any < 0x80;
}

void WriteString(Writer& w, std::string_view text) {
  if (IsAscii(text)) {
    w.String(text.data(), static_cast<rj::SizeType>(text.size()));
    return;
  }
  std::string safe = UnicodeSafe(text);
  w.String(safe.data(), static_cast<rj::SizeType>(safe.size()));
}

void WriteKeyString(Writer& w, const char* key, std::string_view text) {
  w.Key(key);
  WriteString(w, text);
}

void WriteShape(Writer& w, const std::vector<int64_t>& shape) {
  w.StartArray();
  for (int64_t dim : shape) w.Int64(dim);
  w.EndArray();
}

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
  w.Key("shape");
  WriteShape(w, r.shape);
  WriteKeyString(w, "state", r.state);
}

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
  kDType,
  kShape,
  kDevice,
  kLifetime,
  kInit,
  kOwnerPid,
  kOwnerStart,
  kBytes,
  kCommandFieldCount
};
constexpr std::string_view kCommandKeys[kCommandFieldCount] = {
    "op",     "name",     "req",  "node",      "pid",         "dtype", "shape",
    "device", "lifetime", "init", "owner_pid", "owner_start", "bytes"};

// Indexes an object's members by `keys`: each known key's value (nullptr when absent), the first
// unknown key and the first repeated one.
template <size_t N>
struct MemberIndex {
  const rj::Value* at[N] = {};
  std::string_view unknown;
  std::string_view repeated;
  bool has_unknown = false;

  MemberIndex(const rj::Value& object, const std::string_view (&keys)[N]) {
    for (auto m = object.MemberBegin(); m != object.MemberEnd(); ++m) {
      std::string_view key = Text(m->name);
      size_t f = 0;
      while (f < N && keys[f] != key) ++f;
      if (f == N) {
        for (auto earlier = object.MemberBegin(); earlier != m && repeated.empty(); ++earlier) {
          if (Text(earlier->name) == key) repeated = key;
        }
        if (!has_unknown) unknown = key;
        has_unknown = true;
      } else if (at[f] != nullptr) {
        if (repeated.empty()) repeated = key;
      } else {
        at[f] = &m->value;
      }
    }
  }
};

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

// A create's own fields (dtype, shape, device, lifetime, init, owner, bytes).
Status ParseCreateFields(const MemberIndex<kCommandFieldCount>& m, Command& cmd) {
  if (m.at[kDType] == nullptr) return Invalid("missing \"dtype\"");
  MCD_ASSIGN_OR_RETURN(std::string_view dtype, StringField(*m.at[kDType], "dtype"));
  auto parsed_dtype = ParseDType(dtype);
  if (!parsed_dtype)
    return Invalid("unknown dtype \"" + Printable(dtype) + "\" (expected " + DTypeNames() + ")");
  cmd.dtype = *parsed_dtype;
  MCD_RETURN_IF_ERROR(ParseShape(m.at[kShape], cmd));
  MCD_ASSIGN_OR_RETURN(cmd.bytes, ShapeBytes(cmd.shape, cmd.dtype));
  if (const rj::Value* bytes = m.at[kBytes]) {
    // Optional cross-check written by some clients; it must agree with shape x dtype.
    uint64_t stated = bytes->IsUint64() ? bytes->GetUint64() : ~cmd.bytes;
    if (stated != cmd.bytes)
      return Invalid("\"bytes\" does not match shape x dtype (" + std::to_string(cmd.bytes) + ")");
  }
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
  if (m.at[kOwnerPid] != nullptr) {
    MCD_ASSIGN_OR_RETURN(cmd.owner_pid, IntField(*m.at[kOwnerPid], "owner_pid"));
    if (cmd.owner_pid <= 0) return Invalid("\"owner_pid\" must be positive");
  }
  if (m.at[kOwnerStart] != nullptr) {
    MCD_ASSIGN_OR_RETURN(int64_t start, IntField(*m.at[kOwnerStart], "owner_start"));
    if (start < 0) return Invalid("\"owner_start\" must not be negative");
    cmd.owner_start = static_cast<uint64_t>(start);
  }
  if (cmd.lifetime == Lifetime::kStack && cmd.owner_pid == 0 && cmd.pid == 0) {
    return Invalid("a stack tensor needs \"pid\" or \"owner_pid\": the process it is bound to");
  }
  return Status::Ok();
}

}  // namespace

Result<Command> ParseCommand(std::string_view raw, std::string* req_out) {
  if (raw.size() > kMaxCommandBytes) {
    return Status(ErrorCode::kTooLarge, "command is " + std::to_string(raw.size()) +
                                            " bytes; the limit is " +
                                            std::to_string(kMaxCommandBytes));
  }
  PooledDocument pooled;
  Document& doc = pooled.doc();
  MCD_RETURN_IF_ERROR(ParseJson(raw, kMaxJsonDepth, "command", pooled));
  if (!doc.IsObject()) return Invalid("command is not a JSON object");
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
  } else {
    return Invalid("unknown op \"" + Printable(op) + "\" (expected create, get or delete)");
  }
  if (m.at[kName] == nullptr) return Invalid("missing \"name\"");
  MCD_ASSIGN_OR_RETURN(std::string_view name, StringField(*m.at[kName], "name"));
  MCD_RETURN_IF_ERROR(ValidateName(name));
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
  if (cmd.op == Op::kCreate) {
    MCD_RETURN_IF_ERROR(ParseCreateFields(m, cmd));
    return cmd;
  }
  for (int f = kDType; f < kCommandFieldCount; ++f) {
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
  if (cmd.op == Op::kCreate) {
    WriteKeyString(w, "dtype", DTypeName(cmd.dtype));
    w.Key("shape");
    WriteShape(w, cmd.shape);
    w.Key("device");
    w.Int(cmd.device);
    if (cmd.lifetime != Lifetime::kHeap) WriteKeyString(w, "lifetime", LifetimeName(cmd.lifetime));
    if (!cmd.zero_init) WriteKeyString(w, "init", "none");
    if (cmd.owner_pid != 0) {
      w.Key("owner_pid");
      w.Int64(cmd.owner_pid);
    }
    if (cmd.owner_start != 0) {
      w.Key("owner_start");
      w.Uint64(cmd.owner_start);
    }
  }
  w.EndObject();
  return pooled.str();
}

std::string ShapeToJson(const std::vector<int64_t>& shape) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  WriteShape(w, shape);
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

std::string RecordToJson(const TensorRecord& r) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  WriteRecordFields(w, r, true);
  w.EndObject();
  return pooled.str();
}

std::string RecordJsonHead(const TensorRecord& r) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  WriteRecordFields(w, r, false);
  return pooled.str();  // the object stays open
}

namespace {

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
  kRecordFieldCount
};
constexpr std::string_view kRecordKeys[kRecordFieldCount] = {
    "name",           "dtype",    "shape",       "device",    "bytes",      "ipc_kind",
    "ipc_handle_hex", "offset",   "refcount",    "state",     "ctime",      "node",
    "owner",          "lifetime", "creator_pid", "owner_pid", "owner_start"};

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
  return r;
}

}  // namespace

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

}  // namespace mcd
