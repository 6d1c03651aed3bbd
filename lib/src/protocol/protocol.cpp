#include "memcuda/protocol.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <nlohmann/json.hpp>

#include "memcuda/gpu_worker.h"
#include "protocol/json_reader.h"
#include "protocol/protocol_json.h"

namespace mcd {

using nlohmann::json;

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr std::array<DTypeInfo, 13> kDTypes = {{
    {DType::kF16, "f16", 2},  {DType::kBF16, "bf16", 2}, {DType::kF32, "f32", 4},
    {DType::kF64, "f64", 8},  {DType::kI8, "i8", 1},     {DType::kI16, "i16", 2},
    {DType::kI32, "i32", 4},  {DType::kI64, "i64", 8},   {DType::kU8, "u8", 1},
    {DType::kU16, "u16", 2},  {DType::kU32, "u32", 4},   {DType::kU64, "u64", 8},
    {DType::kBool, "bool", 1},
}};

struct Alias {
  const char* alias;
  DType dtype;
};
constexpr std::array<Alias, 17> kAliases = {{
    {"float16", DType::kF16}, {"half", DType::kF16},     {"bfloat16", DType::kBF16},
    {"float32", DType::kF32}, {"float", DType::kF32},    {"float64", DType::kF64},
    {"double", DType::kF64},  {"int8", DType::kI8},      {"int16", DType::kI16},
    {"int32", DType::kI32},   {"int64", DType::kI64},    {"uint8", DType::kU8},
    {"uint16", DType::kU16},  {"uint32", DType::kU32},   {"uint64", DType::kU64},
    {"b8", DType::kBool},     {"bool_", DType::kBool},
}};

bool IsNameChar(char c) {
  // Not strchr, which finds a NUL byte too (the string's own terminator).
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("._:/@+=,-").find(c) != std::string_view::npos;
}

Status Invalid(const std::string& message) { return Status(ErrorCode::kInvalidArgument, message); }

using JsonKind = JsonReader::Kind;

// Reads an integer field that must be a JSON integer (not 2.5, not "2").
Result<int64_t> IntField(const JsonReader::Node& value, const char* field) {
  if (value.kind == JsonKind::kInt) return value.int_value;
  if (value.kind == JsonKind::kUint) {
    return Status(ErrorCode::kTooLarge, std::string("\"") + field + "\" is too large");
  }
  return Invalid(std::string("\"") + field + "\" must be an integer");
}

Result<std::string_view> StringField(const JsonReader::Node& value, const char* field) {
  if (value.kind != JsonKind::kString) return Invalid(std::string("\"") + field + "\" must be a string");
  return value.text;
}

std::string Printable(std::string_view text, size_t max = 40) {
  std::string out;
  for (char c : text.substr(0, max)) {
    out.push_back(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f ? c : '?');
  }
  if (text.size() > max) out += "...";
  return out;
}

}  // namespace

const char* DTypeName(DType dtype) noexcept { return kDTypes[static_cast<size_t>(dtype)].name; }
size_t DTypeSize(DType dtype) noexcept { return kDTypes[static_cast<size_t>(dtype)].size; }

std::optional<DType> ParseDType(std::string_view name) noexcept {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name) return info.dtype;
  }
  for (const Alias& alias : kAliases) {
    if (name == alias.alias) return alias.dtype;
  }
  return std::nullopt;
}

const std::vector<DType>& AllDTypes() noexcept {
  static const std::vector<DType> all = [] {
    std::vector<DType> out;
    for (const DTypeInfo& info : kDTypes) out.push_back(info.dtype);
    return out;
  }();
  return all;
}

std::string DTypeNames() {
  std::string out;
  for (const DTypeInfo& info : kDTypes) out += (out.empty() ? "" : " ") + std::string(info.name);
  return out;
}

const char* OpName(Op op) noexcept {
  switch (op) {
    case Op::kCreate: return "create";
    case Op::kGet: return "get";
    case Op::kDelete: return "delete";
  }
  return "?";
}

const char* LifetimeName(Lifetime lifetime) noexcept {
  return lifetime == Lifetime::kStack ? "stack" : "heap";
}

Status ValidateName(std::string_view name) {
  if (name.empty()) return Invalid("tensor name is empty");
  if (name.size() > kMaxNameLength) {
    return Invalid("tensor name is " + std::to_string(name.size()) + " bytes; the limit is " +
                   std::to_string(kMaxNameLength));
  }
  for (char c : name) {
    if (!IsNameChar(c)) {
      unsigned char u = static_cast<unsigned char>(c);
      std::string shown = (u >= 0x20 && u < 0x7f) ? std::string("'") + c + "'"
                                                  : "byte 0x" + HexEncode(std::string(1, c));
      return Invalid("tensor name \"" + Printable(name) + "\" holds " + shown +
                     "; names use letters, digits and . _ : / @ + = , -");
    }
  }
  return Status::Ok();
}

Result<uint64_t> ShapeBytes(const std::vector<int64_t>& shape, DType dtype) {
  if (shape.empty()) return Invalid("shape has no dimensions");
  if (shape.size() > kMaxDims) {
    return Invalid("shape has " + std::to_string(shape.size()) + " dimensions; the limit is " +
                   std::to_string(kMaxDims));
  }
  uint64_t bytes = DTypeSize(dtype);
  for (int64_t dim : shape) {
    if (dim <= 0) return Invalid("shape dimensions must be positive, got " + std::to_string(dim));
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes)) {
      return Status(ErrorCode::kTooLarge, "tensor size overflows 64 bits");
    }
  }
  return bytes;
}

std::string ShapeToJson(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

Result<std::vector<int64_t>> ShapeFromJson(std::string_view text) {
  // "[2,3,4]": parsed by hand, since listings parse one per tensor (nlohmann is ~10x slower).
  auto bad = [&] { return Invalid("shape \"" + Printable(text) + "\" is not a JSON array of integers"); };
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
  };
  skip();
  if (i >= text.size() || text[i] != '[') return bad();
  ++i;
  std::vector<int64_t> out;
  skip();
  if (i < text.size() && text[i] == ']') return out;
  for (;;) {
    skip();
    int64_t dim = 0;
    auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + text.size(), dim);
    if (ec != std::errc()) return bad();
    i = static_cast<size_t>(ptr - text.data());
    if (out.size() == kMaxDims * 4) return bad();
    out.push_back(dim);
    skip();
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    if (i < text.size() && text[i] == ']') break;
    return bad();
  }
  ++i;
  skip();
  if (i != text.size()) return bad();
  return out;
}

Result<std::vector<int64_t>> ParseShapeList(std::string_view text) {
  if (!text.empty() && text.front() == '[') return ShapeFromJson(text);
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of(",x", start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = text.substr(start, end - start);
    int64_t dim = 0;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), dim);
    if (part.empty() || ec != std::errc() || ptr != part.data() + part.size()) {
      return Invalid("bad shape \"" + Printable(text) + "\": expected dims like 2,3,4");
    }
    out.push_back(dim);
    start = end + 1;
  }
  return out;
}

Result<Command> ParseCommand(std::string_view raw, std::string* req_out) {
  if (raw.size() > kMaxCommandBytes) {
    return Status(ErrorCode::kTooLarge, "command is " + std::to_string(raw.size()) +
                                            " bytes; the limit is " +
                                            std::to_string(kMaxCommandBytes));
  }
  MCD_ASSIGN_OR_RETURN(JsonReader doc, JsonReader::Parse(raw, kMaxJsonDepth, "command"));
  if (doc.root().kind != JsonKind::kObject) return Invalid("command is not a JSON object");

  // One pass over the members: each known field's value, and the first unknown field.
  enum Field { kOp, kName, kReq, kNode, kPid, kDType, kShape, kDevice, kLifetime, kInit,
               kOwnerPid, kOwnerStart, kBytes, kFieldCount };
  static constexpr std::string_view kKnown[kFieldCount] = {
      "op", "name", "req", "node", "pid", "dtype", "shape", "device", "lifetime", "init",
      "owner_pid", "owner_start", "bytes"};
  uint32_t at[kFieldCount] = {};  // index of each field's value node; 0 (the root) when absent
  // A repeated key is refused below.
  std::optional<std::string_view> unknown = doc.IndexMembers(doc.root_index(), kKnown, kFieldCount, at);

  auto field = [&](Field f) -> const JsonReader::Node* { return at[f] != 0 ? &doc.at(at[f]) : nullptr; };

  Command cmd;
  // The request id first, so that every later error can be answered.
  if (const JsonReader::Node* req = field(kReq)) {
    if (req->kind == JsonKind::kString) {
      cmd.req = std::string(req->text);
    } else if (req->kind == JsonKind::kInt) {
      cmd.req = std::to_string(req->int_value);
    } else if (req->kind == JsonKind::kUint) {
      cmd.req = std::to_string(req->uint_value);
    } else {
      return Invalid("\"req\" must be a string");
    }
    if (cmd.req.empty() || cmd.req.size() > 128) return Invalid("\"req\" must be 1 to 128 bytes");
    for (char c : cmd.req) {
      if (!IsNameChar(c)) return Invalid("\"req\" holds characters outside [A-Za-z0-9._:/@+=,-]");
    }
    if (req_out != nullptr) *req_out = cmd.req;
  }
  if (!doc.duplicate_key().empty()) {
    return Invalid("command repeats the key \"" + doc.duplicate_key() + "\"");
  }
  if (unknown) return Invalid("unknown field \"" + Printable(*unknown) + "\"");

  if (field(kOp) == nullptr) return Invalid("missing \"op\"");
  MCD_ASSIGN_OR_RETURN(std::string_view op, StringField(*field(kOp), "op"));
  if (op == "create") {
    cmd.op = Op::kCreate;
  } else if (op == "get") {
    cmd.op = Op::kGet;
  } else if (op == "delete") {
    cmd.op = Op::kDelete;
  } else {
    return Invalid("unknown op \"" + Printable(op) + "\" (expected create, get or delete)");
  }

  if (field(kName) == nullptr) return Invalid("missing \"name\"");
  MCD_ASSIGN_OR_RETURN(std::string_view name, StringField(*field(kName), "name"));
  MCD_RETURN_IF_ERROR(ValidateName(name));
  cmd.name = std::string(name);

  if (field(kNode) != nullptr) {
    MCD_ASSIGN_OR_RETURN(std::string_view node, StringField(*field(kNode), "node"));
    if (node.empty() || node.size() > 255) return Invalid("\"node\" must be 1 to 255 bytes");
    cmd.node = std::string(node);
  }
  if (field(kPid) != nullptr) {
    MCD_ASSIGN_OR_RETURN(cmd.pid, IntField(*field(kPid), "pid"));
    if (cmd.pid < 0) return Invalid("\"pid\" must not be negative");
  }

  if (cmd.op != Op::kCreate) {
    for (int f = kDType; f < kFieldCount; ++f) {
      if (at[f] != 0) {
        return Invalid("\"" + std::string(kKnown[f]) + "\" is only valid for op \"create\"");
      }
    }
    return cmd;
  }

  if (field(kDType) == nullptr) return Invalid("missing \"dtype\"");
  MCD_ASSIGN_OR_RETURN(std::string_view dtype, StringField(*field(kDType), "dtype"));
  auto parsed_dtype = ParseDType(dtype);
  if (!parsed_dtype) {
    return Invalid("unknown dtype \"" + Printable(dtype) + "\" (expected " + DTypeNames() + ")");
  }
  cmd.dtype = *parsed_dtype;

  const JsonReader::Node* shape = field(kShape);
  if (shape == nullptr) return Invalid("missing \"shape\"");
  if (shape->kind != JsonKind::kArray) return Invalid("\"shape\" must be an array of integers");
  if (shape->count > kMaxDims) {
    return Invalid("shape has " + std::to_string(shape->count) + " dimensions; the limit is " +
                   std::to_string(kMaxDims));
  }
  Status dims_ok;
  doc.ForEachElement(at[kShape], [&](uint32_t index) {
    if (!dims_ok.ok()) return;
    const JsonReader::Node& dim = doc.at(index);
    if (dim.kind == JsonKind::kFloat) {
      dims_ok = Invalid("shape dimensions must be integers");
      return;
    }
    auto value = IntField(dim, "shape");
    if (!value.ok()) {
      dims_ok = value.status();
      return;
    }
    cmd.shape.push_back(value.value());
  });
  MCD_RETURN_IF_ERROR(dims_ok);
  MCD_ASSIGN_OR_RETURN(cmd.bytes, ShapeBytes(cmd.shape, cmd.dtype));
  if (const JsonReader::Node* bytes = field(kBytes)) {
    // Optional cross-check written by some clients; it must agree with shape x dtype.
    uint64_t stated = bytes->kind == JsonKind::kUint                           ? bytes->uint_value
                      : bytes->kind == JsonKind::kInt && bytes->int_value >= 0 ? static_cast<uint64_t>(bytes->int_value)
                                                                               : ~cmd.bytes;
    if (stated != cmd.bytes) {
      return Invalid("\"bytes\" does not match shape x dtype (" + std::to_string(cmd.bytes) + ")");
    }
  }

  const JsonReader::Node* device = field(kDevice);
  if (device == nullptr) return Invalid("missing \"device\"");
  if (device->kind == JsonKind::kString) {
    MCD_ASSIGN_OR_RETURN(cmd.device, ParseDevice(device->text));
  } else {
    MCD_ASSIGN_OR_RETURN(int64_t ordinal, IntField(*device, "device"));
    if (ordinal < -1 || ordinal > 1023) {
      return Invalid("device " + std::to_string(ordinal) + " is out of range");
    }
    cmd.device = static_cast<int>(ordinal);
  }

  if (field(kLifetime) != nullptr) {
    MCD_ASSIGN_OR_RETURN(std::string_view lifetime, StringField(*field(kLifetime), "lifetime"));
    if (lifetime == "heap") {
      cmd.lifetime = Lifetime::kHeap;
    } else if (lifetime == "stack") {
      cmd.lifetime = Lifetime::kStack;
    } else {
      return Invalid("\"lifetime\" must be \"heap\" or \"stack\"");
    }
  }
  if (field(kInit) != nullptr) {
    MCD_ASSIGN_OR_RETURN(std::string_view init, StringField(*field(kInit), "init"));
    if (init == "zero") {
      cmd.zero_init = true;
    } else if (init == "none") {
      cmd.zero_init = false;
    } else {
      return Invalid("\"init\" must be \"zero\" or \"none\"");
    }
  }
  if (field(kOwnerPid) != nullptr) {
    MCD_ASSIGN_OR_RETURN(cmd.owner_pid, IntField(*field(kOwnerPid), "owner_pid"));
    if (cmd.owner_pid <= 0) return Invalid("\"owner_pid\" must be positive");
  }
  if (field(kOwnerStart) != nullptr) {
    MCD_ASSIGN_OR_RETURN(int64_t start, IntField(*field(kOwnerStart), "owner_start"));
    if (start < 0) return Invalid("\"owner_start\" must not be negative");
    cmd.owner_start = static_cast<uint64_t>(start);
  }
  if (cmd.lifetime == Lifetime::kStack && cmd.owner_pid == 0 && cmd.pid == 0) {
    return Invalid("a stack tensor needs \"pid\" or \"owner_pid\": the process it is bound to");
  }
  return cmd;
}

std::string CommandToJson(const Command& cmd) {
  json doc;
  doc["op"] = OpName(cmd.op);
  doc["name"] = cmd.name;
  if (!cmd.req.empty()) doc["req"] = cmd.req;
  if (cmd.node) doc["node"] = *cmd.node;
  if (cmd.pid != 0) doc["pid"] = cmd.pid;
  if (cmd.op == Op::kCreate) {
    doc["dtype"] = DTypeName(cmd.dtype);
    doc["shape"] = cmd.shape;
    doc["device"] = cmd.device;
    if (cmd.lifetime != Lifetime::kHeap) doc["lifetime"] = LifetimeName(cmd.lifetime);
    if (!cmd.zero_init) doc["init"] = "none";
    if (cmd.owner_pid != 0) doc["owner_pid"] = cmd.owner_pid;
    if (cmd.owner_start != 0) doc["owner_start"] = cmd.owner_start;
  }
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

const std::vector<std::string>& TensorFieldNames() {
  static const std::vector<std::string> names = {
      "dtype", "shape", "ctime", "node", "device", "bytes", "ipc_kind", "ipc_handle", "offset",
      "refcount", "state", "owner", "lifetime", "creator_pid", "owner_pid", "owner_start"};
  return names;
}

std::vector<std::pair<std::string, std::string>> HashFields(const TensorRecord& r) {
  return {{"dtype", DTypeName(r.dtype)},
          {"shape", ShapeToJson(r.shape)},
          {"ctime", std::to_string(r.ctime_ms)},
          {"node", r.node},
          {"device", std::to_string(r.device)},
          {"bytes", std::to_string(r.bytes)},
          {"ipc_kind", r.ipc_kind},
          {"ipc_handle", r.ipc_handle},
          {"offset", std::to_string(r.offset)},
          {"refcount", std::to_string(r.refcount)},
          {"state", r.state},
          {"owner", r.owner},
          {"lifetime", LifetimeName(r.lifetime)},
          {"creator_pid", std::to_string(r.creator_pid)},
          {"owner_pid", std::to_string(r.owner_pid)},
          {"owner_start", std::to_string(r.owner_start)}};
}

namespace {
template <typename T>
bool ParseNumber(const std::string& text, T& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}
}  // namespace

Result<TensorRecord> RecordFromHash(const std::string& name,
                                    const std::map<std::string, std::string>& fields) {
  std::vector<std::optional<std::string>> values;
  for (const std::string& field : TensorFieldNames()) {
    auto it = fields.find(field);
    values.push_back(it == fields.end() ? std::nullopt : std::optional<std::string>(it->second));
  }
  return RecordFromFields(name, values);
}

Result<TensorRecord> RecordFromFields(const std::string& name,
                                      const std::vector<std::optional<std::string>>& values) {
  // Indexes into TensorFieldNames().
  enum { kDtype, kShape, kCtime, kNode, kDevice, kBytes, kIpcKind, kIpcHandle, kOffset, kRefcount,
         kState, kOwner, kLifetime, kCreatorPid, kOwnerPid, kOwnerStart, kFieldCount };
  if (values.size() != kFieldCount) return Status(ErrorCode::kInternal, "RecordFromFields: wrong arity");
  auto bad = [&](const char* field) {
    return Status(ErrorCode::kUnexpectedReply,
                  "tensor hash of '" + name + "' has a missing or malformed \"" + field + "\"");
  };
  auto get = [&](int i) -> const std::string* { return values[static_cast<size_t>(i)] ? &*values[static_cast<size_t>(i)] : nullptr; };
  TensorRecord r;
  r.name = name;
  const std::string* value = get(kDtype);
  auto dtype = value ? ParseDType(*value) : std::nullopt;
  if (!dtype) return bad("dtype");
  r.dtype = *dtype;
  if ((value = get(kShape)) == nullptr) return bad("shape");
  auto shape = ShapeFromJson(*value);
  if (!shape.ok()) return bad("shape");
  r.shape = std::move(shape).value();
  if ((value = get(kDevice)) == nullptr || !ParseNumber(*value, r.device)) return bad("device");
  if ((value = get(kBytes)) == nullptr || !ParseNumber(*value, r.bytes)) return bad("bytes");
  if ((value = get(kRefcount)) == nullptr || !ParseNumber(*value, r.refcount)) return bad("refcount");
  if ((value = get(kState)) == nullptr) return bad("state");
  r.state = *value;
  // A reader indexes the memory by shape and dtype: they must cover exactly the bytes it maps.
  auto covered = ShapeBytes(r.shape, r.dtype);
  if (!covered.ok() || covered.value() != r.bytes) {
    return Status(ErrorCode::kUnexpectedReply,
                  "tensor hash of '" + name + "' says \"bytes\" " + std::to_string(r.bytes) +
                      ", which its shape and dtype do not make" +
                      (covered.ok() ? " (" + std::to_string(covered.value()) + ")" : ""));
  }
  // Optional fields: a hash written by another tool may lack them, but one that is there must
  // be well formed.
  auto number = [&](int i, const char* field, auto& out) {
    const std::string* text = get(i);
    return text == nullptr || ParseNumber(*text, out) ? Status::Ok() : bad(field);
  };
  MCD_RETURN_IF_ERROR(number(kCtime, "ctime", r.ctime_ms));
  MCD_RETURN_IF_ERROR(number(kOffset, "offset", r.offset));
  MCD_RETURN_IF_ERROR(number(kCreatorPid, "creator_pid", r.creator_pid));
  MCD_RETURN_IF_ERROR(number(kOwnerPid, "owner_pid", r.owner_pid));
  MCD_RETURN_IF_ERROR(number(kOwnerStart, "owner_start", r.owner_start));
  if ((value = get(kNode)) != nullptr) r.node = *value;
  if ((value = get(kIpcKind)) != nullptr) r.ipc_kind = *value;
  if ((value = get(kIpcHandle)) != nullptr) r.ipc_handle = *value;
  if ((value = get(kOwner)) != nullptr) r.owner = *value;
  if ((value = get(kLifetime)) != nullptr) r.lifetime = *value == "stack" ? Lifetime::kStack : Lifetime::kHeap;
  return r;
}

namespace {
// Appends `text` as a JSON string, exactly as nlohmann's dump writes it (invalid UTF-8
// replaced). Plain printable ASCII, which names, owners and handles are, is copied as is.
void AppendJsonString(std::string& out, std::string_view text) {
  bool plain = true;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '"' || c == '\\') {
      plain = false;
      break;
    }
  }
  if (!plain) {
    out += json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  out += '"';
  out.append(text.data(), text.size());
  out += '"';
}

// A record as a JSON object, by hand rather than through a json object and dump: the server
// writes one per create, on its hot path, and `mcd-ls --json` one per tensor; this is ~5x
// faster. Keys in the sorted order nlohmann's dump uses, so the text is what it would write (a
// test holds it to that). Without the closing brace, and with "refcount" only when asked.
void AppendRecordFields(std::string& out, const TensorRecord& r, bool with_refcount) {
  out.reserve(out.size() + 340 + r.ipc_handle.size() * 2 + r.name.size() + r.node.size());
  out += "{\"bytes\":";
  out += std::to_string(r.bytes);
  out += ",\"creator_pid\":";
  out += std::to_string(r.creator_pid);
  out += ",\"ctime\":";
  out += std::to_string(r.ctime_ms);
  out += ",\"device\":";
  out += std::to_string(r.device);
  out += ",\"dtype\":";
  AppendJsonString(out, DTypeName(r.dtype));
  out += ",\"ipc_handle_hex\":";
  AppendJsonString(out, HexEncode(r.ipc_handle));
  out += ",\"ipc_kind\":";
  AppendJsonString(out, r.ipc_kind);
  out += ",\"lifetime\":";
  AppendJsonString(out, LifetimeName(r.lifetime));
  out += ",\"name\":";
  AppendJsonString(out, r.name);
  out += ",\"node\":";
  AppendJsonString(out, r.node);
  out += ",\"offset\":";
  out += std::to_string(r.offset);
  out += ",\"owner\":";
  AppendJsonString(out, r.owner);
  if (r.lifetime == Lifetime::kStack) {
    out += ",\"owner_pid\":";
    out += std::to_string(r.owner_pid);
    out += ",\"owner_start\":";
    out += std::to_string(r.owner_start);
  }
  if (with_refcount) {
    out += ",\"refcount\":";
    out += std::to_string(r.refcount);
  }
  out += ",\"shape\":";
  out += ShapeToJson(r.shape);
  out += ",\"state\":";
  AppendJsonString(out, r.state);
}
}  // namespace

std::string RecordToJson(const TensorRecord& r) {
  std::string out;
  AppendRecordFields(out, r, true);
  out += '}';
  return out;
}

std::string RecordJsonHead(const TensorRecord& r) {
  std::string out;
  AppendRecordFields(out, r, false);
  return out;
}

Result<TensorRecord> RecordFromJson(std::string_view text) {
  auto doc = JsonReader::Parse(text, 2, "tensor record");
  if (!doc.ok()) return Status(ErrorCode::kUnexpectedReply, doc.status().message());
  return RecordFromJsonNode(doc.value(), doc->root_index());
}

Result<TensorRecord> RecordFromJsonNode(const JsonReader& doc, uint32_t object) {
  if (doc.at(object).kind != JsonKind::kObject) {
    return Status(ErrorCode::kUnexpectedReply, "tensor record is not a JSON object");
  }
  // One pass: each known key's value node (0, the root, when absent).
  enum Field { kName, kDType, kShape, kDevice, kBytes, kIpcKind, kHandle, kOffset, kRefcount,
               kState, kCtime, kNode, kOwner, kLifetime, kCreatorPid, kOwnerPid, kOwnerStart,
               kFieldCount };
  static constexpr std::string_view kKeys[kFieldCount] = {
      "name", "dtype", "shape", "device", "bytes", "ipc_kind", "ipc_handle_hex", "offset",
      "refcount", "state", "ctime", "node", "owner", "lifetime", "creator_pid", "owner_pid",
      "owner_start"};
  uint32_t at[kFieldCount] = {};
  (void)doc.IndexMembers(object, kKeys, kFieldCount, at);  // fields of newer servers are skipped
  auto malformed = [&](Field f, const char* why) {
    return Status(ErrorCode::kUnexpectedReply,
                  "malformed tensor record: \"" + std::string(kKeys[f]) + "\" " + why);
  };
  // Name, dtype, shape, device and bytes are required; the others default to what an old
  // record lacks.
  auto text = [&](Field f, std::string_view fallback) -> Result<std::string_view> {
    if (at[f] == 0) return f <= kBytes ? Result<std::string_view>(malformed(f, "is missing")) : fallback;
    if (doc.at(at[f]).kind != JsonKind::kString) return malformed(f, "is not a string");
    return doc.at(at[f]).text;
  };
  auto integer = [&](Field f) -> Result<int64_t> {
    if (at[f] == 0) return f <= kBytes ? Result<int64_t>(malformed(f, "is missing")) : int64_t{0};
    if (doc.at(at[f]).kind != JsonKind::kInt) return malformed(f, "is not a 64-bit integer");
    return doc.at(at[f]).int_value;
  };
  auto count = [&](Field f) -> Result<uint64_t> {
    if (at[f] == 0) return f <= kBytes ? Result<uint64_t>(malformed(f, "is missing")) : uint64_t{0};
    const JsonReader::Node& node = doc.at(at[f]);
    if (node.kind == JsonKind::kUint) return node.uint_value;
    if (node.kind == JsonKind::kInt && node.int_value >= 0) return static_cast<uint64_t>(node.int_value);
    return malformed(f, "is not a non-negative integer");
  };

  TensorRecord r;
  MCD_ASSIGN_OR_RETURN(std::string_view name, text(kName, ""));
  r.name = std::string(name);
  MCD_ASSIGN_OR_RETURN(std::string_view dtype_name, text(kDType, ""));
  auto dtype = ParseDType(dtype_name);
  if (!dtype) return Status(ErrorCode::kUnexpectedReply, "tensor record has an unknown dtype");
  r.dtype = *dtype;
  if (at[kShape] == 0 || doc.at(at[kShape]).kind != JsonKind::kArray) return malformed(kShape, "is not an array");
  bool dims_ok = true;
  doc.ForEachElement(at[kShape], [&](uint32_t index) {
    dims_ok = dims_ok && doc.at(index).kind == JsonKind::kInt;
    if (dims_ok) r.shape.push_back(doc.at(index).int_value);
  });
  if (!dims_ok) return malformed(kShape, "holds a value that is not an integer");
  MCD_ASSIGN_OR_RETURN(int64_t device, integer(kDevice));
  if (device < INT32_MIN || device > INT32_MAX) return malformed(kDevice, "is out of range");
  r.device = static_cast<int>(device);
  MCD_ASSIGN_OR_RETURN(r.bytes, count(kBytes));
  MCD_ASSIGN_OR_RETURN(std::string_view ipc_kind, text(kIpcKind, ""));
  r.ipc_kind = std::string(ipc_kind);
  MCD_ASSIGN_OR_RETURN(std::string_view handle_hex, text(kHandle, ""));
  MCD_ASSIGN_OR_RETURN(r.ipc_handle, HexDecode(handle_hex));
  MCD_ASSIGN_OR_RETURN(r.offset, count(kOffset));
  MCD_ASSIGN_OR_RETURN(r.refcount, integer(kRefcount));
  MCD_ASSIGN_OR_RETURN(std::string_view state, text(kState, ""));
  r.state = std::string(state);
  MCD_ASSIGN_OR_RETURN(r.ctime_ms, integer(kCtime));
  MCD_ASSIGN_OR_RETURN(std::string_view node, text(kNode, ""));
  r.node = std::string(node);
  MCD_ASSIGN_OR_RETURN(std::string_view owner, text(kOwner, ""));
  r.owner = std::string(owner);
  MCD_ASSIGN_OR_RETURN(std::string_view lifetime, text(kLifetime, "heap"));
  r.lifetime = lifetime == "stack" ? Lifetime::kStack : Lifetime::kHeap;
  MCD_ASSIGN_OR_RETURN(r.creator_pid, integer(kCreatorPid));
  MCD_ASSIGN_OR_RETURN(r.owner_pid, integer(kOwnerPid));
  MCD_ASSIGN_OR_RETURN(r.owner_start, count(kOwnerStart));
  return r;
}

std::string DeviceName(int device) {
  return device == kHostDevice ? "cpu" : std::to_string(device);
}

Result<int> ParseDevice(std::string_view text) {
  if (text == "cpu" || text == "host" || text == "-1") return kHostDevice;
  if (text.rfind("cuda:", 0) == 0) text.remove_prefix(5);
  int device = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), device);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || device < 0 ||
      device > 1023) {
    return Invalid("bad device \"" + Printable(text) + "\" (expected a GPU ordinal or cpu)");
  }
  return device;
}

std::string HexEncode(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    unsigned char u = static_cast<unsigned char>(c);
    out.push_back(kDigits[u >> 4]);
    out.push_back(kDigits[u & 15]);
  }
  return out;
}

Result<std::string> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return Invalid("hex string has an odd length");
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]);
    int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Invalid("bad hex string");
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

}  // namespace mcd
