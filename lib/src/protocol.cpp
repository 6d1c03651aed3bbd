#include "memcuda/protocol.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "memcuda/gpu_worker.h"
#include "protocol_json.h"

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
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::strchr("._:/@+=,-", c) != nullptr;
}

Status Invalid(const std::string& message) { return Status(ErrorCode::kInvalidArgument, message); }

// Bounds nesting before nlohmann's recursive parser sees the text.
Status CheckDepth(std::string_view raw) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : raw) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) {
        return Invalid("command nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return Status::Ok();
}

// Parses JSON and reports the first duplicate key in `duplicate` (nlohmann keeps the last one
// silently), so that the caller can still read the request id before refusing the command.
Result<json> ParseStrict(std::string_view raw, std::string& duplicate) {
  std::vector<std::vector<std::string>> keys_per_level;
  json::parser_callback_t callback = [&](int /*depth*/, json::parse_event_t event,
                                         json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
        keys_per_level.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys_per_level.empty()) keys_per_level.pop_back();
        break;
      case json::parse_event_t::key: {
        auto& keys = keys_per_level.back();
        const std::string& key = parsed.get_ref<const std::string&>();
        for (const std::string& seen : keys) {
          if (seen == key && duplicate.empty()) duplicate = key;
        }
        keys.push_back(key);
        break;
      }
      default:
        break;
    }
    return true;
  };
  json doc = json::parse(raw.begin(), raw.end(), callback, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Invalid("command is not valid JSON");
  return doc;
}

// Reads an integer field that must be a JSON integer (not 2.5, not "2").
Result<int64_t> IntField(const json& value, const char* field) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Status(ErrorCode::kTooLarge, std::string("\"") + field + "\" is too large");
    }
    return value.get<int64_t>();
  }
  return Invalid(std::string("\"") + field + "\" must be an integer");
}

Result<std::string> StringField(const json& value, const char* field) {
  if (!value.is_string()) return Invalid(std::string("\"") + field + "\" must be a string");
  return value.get<std::string>();
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
  MCD_RETURN_IF_ERROR(CheckDepth(raw));
  std::string duplicate;
  MCD_ASSIGN_OR_RETURN(json doc, ParseStrict(raw, duplicate));
  if (!doc.is_object()) return Invalid("command is not a JSON object");

  Command cmd;
  // The request id first, so that every later error can be answered.
  if (auto it = doc.find("req"); it != doc.end()) {
    if (!it->is_string() && !it->is_number_integer()) return Invalid("\"req\" must be a string");
    cmd.req = it->is_string() ? it->get<std::string>() : it->dump();
    if (cmd.req.empty() || cmd.req.size() > 128) return Invalid("\"req\" must be 1 to 128 bytes");
    for (char c : cmd.req) {
      if (!IsNameChar(c)) return Invalid("\"req\" holds characters outside [A-Za-z0-9._:/@+=,-]");
    }
    if (req_out != nullptr) *req_out = cmd.req;
  }
  if (!duplicate.empty()) return Invalid("command repeats the key \"" + duplicate + "\"");

  static constexpr std::string_view kKnown[] = {"op",    "name",  "req",    "node",     "pid",
                                                 "dtype", "shape", "device", "lifetime", "init",
                                                 "owner_pid", "owner_start", "bytes"};
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& key = it.key();
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      return Invalid("unknown field \"" + Printable(key) + "\"");
    }
  }

  auto op_it = doc.find("op");
  if (op_it == doc.end()) return Invalid("missing \"op\"");
  MCD_ASSIGN_OR_RETURN(std::string op, StringField(*op_it, "op"));
  if (op == "create") {
    cmd.op = Op::kCreate;
  } else if (op == "get") {
    cmd.op = Op::kGet;
  } else if (op == "delete") {
    cmd.op = Op::kDelete;
  } else {
    return Invalid("unknown op \"" + Printable(op) + "\" (expected create, get or delete)");
  }

  auto name_it = doc.find("name");
  if (name_it == doc.end()) return Invalid("missing \"name\"");
  MCD_ASSIGN_OR_RETURN(cmd.name, StringField(*name_it, "name"));
  MCD_RETURN_IF_ERROR(ValidateName(cmd.name));

  if (auto it = doc.find("node"); it != doc.end()) {
    MCD_ASSIGN_OR_RETURN(std::string node, StringField(*it, "node"));
    if (node.empty() || node.size() > 255) return Invalid("\"node\" must be 1 to 255 bytes");
    cmd.node = std::move(node);
  }
  if (auto it = doc.find("pid"); it != doc.end()) {
    MCD_ASSIGN_OR_RETURN(cmd.pid, IntField(*it, "pid"));
    if (cmd.pid < 0) return Invalid("\"pid\" must not be negative");
  }

  if (cmd.op != Op::kCreate) {
    for (const char* key : {"dtype", "shape", "device", "lifetime", "init", "owner_pid",
                            "owner_start", "bytes"}) {
      if (doc.contains(key)) {
        return Invalid(std::string("\"") + key + "\" is only valid for op \"create\"");
      }
    }
    return cmd;
  }

  auto dtype_it = doc.find("dtype");
  if (dtype_it == doc.end()) return Invalid("missing \"dtype\"");
  MCD_ASSIGN_OR_RETURN(std::string dtype, StringField(*dtype_it, "dtype"));
  auto parsed_dtype = ParseDType(dtype);
  if (!parsed_dtype) {
    return Invalid("unknown dtype \"" + Printable(dtype) +
                   "\" (expected f16 bf16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool)");
  }
  cmd.dtype = *parsed_dtype;

  auto shape_it = doc.find("shape");
  if (shape_it == doc.end()) return Invalid("missing \"shape\"");
  if (!shape_it->is_array()) return Invalid("\"shape\" must be an array of integers");
  if (shape_it->size() > kMaxDims) {
    return Invalid("shape has " + std::to_string(shape_it->size()) +
                   " dimensions; the limit is " + std::to_string(kMaxDims));
  }
  for (const json& dim : *shape_it) {
    if (dim.is_number_float()) return Invalid("shape dimensions must be integers");
    MCD_ASSIGN_OR_RETURN(int64_t value, IntField(dim, "shape"));
    cmd.shape.push_back(value);
  }
  MCD_ASSIGN_OR_RETURN(cmd.bytes, ShapeBytes(cmd.shape, cmd.dtype));
  if (auto it = doc.find("bytes"); it != doc.end()) {
    // Optional cross-check written by some clients; it must agree with shape x dtype.
    if (!it->is_number_unsigned() || it->get<uint64_t>() != cmd.bytes) {
      return Invalid("\"bytes\" does not match shape x dtype (" + std::to_string(cmd.bytes) + ")");
    }
  }

  auto device_it = doc.find("device");
  if (device_it == doc.end()) return Invalid("missing \"device\"");
  if (device_it->is_string()) {
    MCD_ASSIGN_OR_RETURN(cmd.device, ParseDevice(device_it->get<std::string>()));
  } else {
    MCD_ASSIGN_OR_RETURN(int64_t device, IntField(*device_it, "device"));
    if (device < -1 || device > 1023) {
      return Invalid("device " + std::to_string(device) + " is out of range");
    }
    cmd.device = static_cast<int>(device);
  }

  if (auto it = doc.find("lifetime"); it != doc.end()) {
    MCD_ASSIGN_OR_RETURN(std::string lifetime, StringField(*it, "lifetime"));
    if (lifetime == "heap") {
      cmd.lifetime = Lifetime::kHeap;
    } else if (lifetime == "stack") {
      cmd.lifetime = Lifetime::kStack;
    } else {
      return Invalid("\"lifetime\" must be \"heap\" or \"stack\"");
    }
  }
  if (auto it = doc.find("init"); it != doc.end()) {
    MCD_ASSIGN_OR_RETURN(std::string init, StringField(*it, "init"));
    if (init == "zero") {
      cmd.zero_init = true;
    } else if (init == "none") {
      cmd.zero_init = false;
    } else {
      return Invalid("\"init\" must be \"zero\" or \"none\"");
    }
  }
  if (auto it = doc.find("owner_pid"); it != doc.end()) {
    MCD_ASSIGN_OR_RETURN(cmd.owner_pid, IntField(*it, "owner_pid"));
    if (cmd.owner_pid <= 0) return Invalid("\"owner_pid\" must be positive");
  }
  if (auto it = doc.find("owner_start"); it != doc.end()) {
    MCD_ASSIGN_OR_RETURN(int64_t start, IntField(*it, "owner_start"));
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
  // Optional fields: a hash written by another tool may lack them.
  if ((value = get(kCtime)) != nullptr) ParseNumber(*value, r.ctime_ms);
  if ((value = get(kNode)) != nullptr) r.node = *value;
  if ((value = get(kIpcKind)) != nullptr) r.ipc_kind = *value;
  if ((value = get(kIpcHandle)) != nullptr) r.ipc_handle = *value;
  if ((value = get(kOffset)) != nullptr) ParseNumber(*value, r.offset);
  if ((value = get(kOwner)) != nullptr) r.owner = *value;
  if ((value = get(kLifetime)) != nullptr) r.lifetime = *value == "stack" ? Lifetime::kStack : Lifetime::kHeap;
  if ((value = get(kCreatorPid)) != nullptr) ParseNumber(*value, r.creator_pid);
  if ((value = get(kOwnerPid)) != nullptr) ParseNumber(*value, r.owner_pid);
  if ((value = get(kOwnerStart)) != nullptr) ParseNumber(*value, r.owner_start);
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
  json doc = json::parse(text.begin(), text.end(), nullptr, false);
  return RecordFromJsonObject(doc);
}

Result<TensorRecord> RecordFromJsonObject(const json& doc) {
  if (!doc.is_object()) {
    return Status(ErrorCode::kUnexpectedReply, "tensor record is not a JSON object");
  }
  try {
    TensorRecord r;
    r.name = doc.at("name").get<std::string>();
    auto dtype = ParseDType(doc.at("dtype").get<std::string>());
    if (!dtype) return Status(ErrorCode::kUnexpectedReply, "tensor record has an unknown dtype");
    r.dtype = *dtype;
    r.shape = doc.at("shape").get<std::vector<int64_t>>();
    r.device = doc.at("device").get<int>();
    r.bytes = doc.at("bytes").get<uint64_t>();
    r.ipc_kind = doc.value("ipc_kind", "");
    MCD_ASSIGN_OR_RETURN(r.ipc_handle, HexDecode(doc.value("ipc_handle_hex", "")));
    r.offset = doc.value("offset", uint64_t{0});
    r.refcount = doc.value("refcount", int64_t{0});
    r.state = doc.value("state", "");
    r.ctime_ms = doc.value("ctime", int64_t{0});
    r.node = doc.value("node", "");
    r.owner = doc.value("owner", "");
    r.lifetime = doc.value("lifetime", "heap") == "stack" ? Lifetime::kStack : Lifetime::kHeap;
    r.creator_pid = doc.value("creator_pid", int64_t{0});
    r.owner_pid = doc.value("owner_pid", int64_t{0});
    r.owner_start = doc.value("owner_start", uint64_t{0});
    return r;
  } catch (const json::exception& e) {
    return Status(ErrorCode::kUnexpectedReply, std::string("malformed tensor record: ") + e.what());
  }
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
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int value = 0;
    auto [ptr, ec] = std::from_chars(hex.data() + i, hex.data() + i + 2, value, 16);
    if (ec != std::errc() || ptr != hex.data() + i + 2) return Invalid("bad hex string");
    out.push_back(static_cast<char>(value));
  }
  return out;
}

}  // namespace mcd
