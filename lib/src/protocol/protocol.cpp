// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/protocol.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>

#include "common/hex.h"
#include "protocol/text.h"

namespace mcd {

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr std::array<DTypeInfo, 13> kDTypes = {{
    {DType::kF16, "f16", 2},
    {DType::kBF16, "bf16", 2},
    {DType::kF32, "f32", 4},
    {DType::kF64, "f64", 8},
    {DType::kI8, "i8", 1},
    {DType::kI16, "i16", 2},
    {DType::kI32, "i32", 4},
    {DType::kI64, "i64", 8},
    {DType::kU8, "u8", 1},
    {DType::kU16, "u16", 2},
    {DType::kU32, "u32", 4},
    {DType::kU64, "u64", 8},
    {DType::kBool, "bool", 1},
}};

struct Alias {
  const char* alias;
  DType dtype;
};
constexpr std::array<Alias, 17> kAliases = {{
    {"float16", DType::kF16},
    {"half", DType::kF16},
    {"bfloat16", DType::kBF16},
    {"float32", DType::kF32},
    {"float", DType::kF32},
    {"float64", DType::kF64},
    {"double", DType::kF64},
    {"int8", DType::kI8},
    {"int16", DType::kI16},
    {"int32", DType::kI32},
    {"int64", DType::kI64},
    {"uint8", DType::kU8},
    {"uint16", DType::kU16},
    {"uint32", DType::kU32},
    {"uint64", DType::kU64},
    {"b8", DType::kBool},
    {"bool_", DType::kBool},
}};

}  // namespace

bool IsNameChar(char c) {
  // Not strchr, which finds a NUL byte too (the string's own terminator).
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("._:/@+=,-").find(c) != std::string_view::npos;
}

std::string Printable(std::string_view text, size_t max) {
  std::string out;
  for (char c : text.substr(0, max)) {
    out.push_back(
        static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f ? c : '?');
  }
  if (text.size() > max) out += "...";
  return out;
}

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
    case Op::kCreate:
      return "create";
    case Op::kGet:
      return "get";
    case Op::kDelete:
      return "delete";
    case Op::kPublish:
      return "publish";
    case Op::kAbandon:
      return "abandon";
    case Op::kCreateSet:
      return "create_set";
  }
  return "?";
}

const char* LifetimeName(Lifetime lifetime) noexcept {
  return lifetime == Lifetime::kStack ? "stack" : "heap";
}

const char* IpcKindName(IpcKind kind) noexcept {
  switch (kind) {
    case IpcKind::kHostShm:
      return "host_shm";
    case IpcKind::kCudaIpc:
      return "cuda_ipc";
    case IpcKind::kCudaMempool:
      return "cuda_mempool";
    case IpcKind::kUnknown:
      break;
  }
  return "?";
}

IpcKind ParseIpcKind(std::string_view name) noexcept {
  for (IpcKind kind : {IpcKind::kHostShm, IpcKind::kCudaIpc, IpcKind::kCudaMempool}) {
    if (name == IpcKindName(kind)) return kind;
  }
  return IpcKind::kUnknown;
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
  if (name.back() == '/') {
    return Invalid("tensor name \"" + Printable(name) +
                   "\" ends with '/', which the tools read as every member of a tensor set");
  }
  return Status::Ok();
}

Status ValidateNewName(std::string_view name) {
  MCD_RETURN_IF_ERROR(ValidateName(name));
  if (name.front() == '-') {
    return Invalid("tensor name \"" + Printable(name) +
                   "\" starts with '-', which the tools would take for an option");
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

Result<SetLayout> LayOutSet(const std::vector<SetMember>& members) {
  constexpr uint64_t kLimit = (uint64_t{1} << 63) - 1;
  SetLayout layout;
  layout.offsets.reserve(members.size());
  for (const SetMember& member : members) {
    uint64_t at = (layout.total + kSetMemberAlign - 1) / kSetMemberAlign * kSetMemberAlign;
    if (at < layout.total || member.bytes > kLimit - at) {
      return Status(ErrorCode::kTooLarge, "the members of the set pass 2^63 bytes");
    }
    layout.offsets.push_back(at);
    layout.total = at + member.bytes;
  }
  return layout;
}

const std::vector<std::string>& TensorFieldNames() {
  static const std::vector<std::string> names = {
      "dtype",    "shape",       "ctime",     "node",        "device", "bytes",
      "ipc_kind", "ipc_handle",  "offset",    "refcount",    "state",  "owner",
      "lifetime", "creator_pid", "owner_pid", "owner_start", "epoch",  "set"};
  return names;
}

std::vector<std::pair<std::string, std::string>> HashFields(const TensorRecord& r) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"dtype", DTypeName(r.dtype)},
      {"shape", ShapeToJson(r.shape)},
      {"ctime", std::to_string(r.ctime_ms)},
      {"node", r.node},
      {"device", std::to_string(r.device)},
      {"bytes", std::to_string(r.bytes)},
      {"ipc_kind", IpcKindName(r.ipc_kind)},
      {"ipc_handle", r.ipc_handle},
      {"offset", std::to_string(r.offset)},
      {"refcount", std::to_string(r.refcount)},
      {"state", r.state},
      {"owner", r.owner},
      {"lifetime", LifetimeName(r.lifetime)},
      {"creator_pid", std::to_string(r.creator_pid)},
      {"owner_pid", std::to_string(r.owner_pid)},
      {"owner_start", std::to_string(r.owner_start)}};
  if (!r.epoch.empty()) fields.emplace_back("epoch", r.epoch);  // only a hash put back has one
  if (!r.set.empty()) fields.emplace_back("set", r.set);        // only a set's member has one
  return fields;
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
  MCD_ASSIGN_OR_RETURN(TensorRecord record, RecordFromFields(name, values));
  for (auto it = fields.lower_bound("holder:"); it != fields.end(); ++it) {
    if (it->first.rfind("holder:", 0) != 0) break;
    std::optional<Holder> holder = ParseHolderId(std::string_view(it->first).substr(7));
    if (!holder || !ParseNumber(it->second, holder->refs)) {
      return Status(ErrorCode::kUnexpectedReply,
                    "tensor hash of '" + name + "' has a malformed \"" + it->first + "\"");
    }
    if (holder->refs != 0) record.holders.push_back(*holder);  // 0: gave them back
  }
  return record;
}

std::string SetRecordValue(const TensorRecord& r) {
  return std::string(DTypeName(r.dtype)) + " " + ShapeToJson(r.shape) + " " +
         std::to_string(r.bytes) + " " + std::to_string(r.offset);
}

Result<TensorRecord> MemberFromSetRecord(const TensorRecord& leader, const std::string& name,
                                         const std::string& value) {
  auto bad = [&] {
    return Status(ErrorCode::kUnexpectedReply,
                  "the record of tensor set '" + Printable(leader.set, 255) +
                      "' has a malformed value for '" + Printable(name, 255) + "'");
  };
  // A member of the set by its name: "SET/..." and a valid tensor name.
  if (name.size() <= leader.set.size() + 1 || name.compare(0, leader.set.size(), leader.set) != 0 ||
      name[leader.set.size()] != '/' || !ValidateName(name).ok()) {
    return Status(ErrorCode::kUnexpectedReply, "the record of tensor set '" +
                                                   Printable(leader.set, 255) + "' names '" +
                                                   Printable(name, 255) + "', no member of it");
  }
  // Four fields, none with a space in it: a shape is JSON without spaces (ShapeToJson).
  std::string_view rest = value;
  std::string_view parts[4];
  for (int i = 0; i < 4; ++i) {
    size_t space = i < 3 ? rest.find(' ') : rest.size();
    if (space == std::string_view::npos || space == 0) return bad();
    parts[i] = rest.substr(0, space);
    rest.remove_prefix(std::min(rest.size(), space + 1));
  }
  if (rest.size() != 0 || value.back() == ' ') return bad();
  TensorRecord r = leader;
  r.name = name;
  auto dtype = ParseDType(std::string(parts[0]));
  auto shape = ShapeFromJson(std::string(parts[1]));
  if (!dtype || !shape.ok() || !ParseNumber(std::string(parts[2]), r.bytes) ||
      !ParseNumber(std::string(parts[3]), r.offset)) {
    return bad();
  }
  r.dtype = *dtype;
  r.shape = std::move(shape).value();
  r.holders.clear();
  MCD_RETURN_IF_ERROR(ValidateRecord(r));
  return r;
}

std::string HolderId(int64_t pid, uint64_t start) {
  return std::to_string(pid) + ":" + std::to_string(start);
}

std::optional<Holder> ParseHolderId(std::string_view id) {
  size_t colon = id.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  Holder holder;
  std::string pid(id.substr(0, colon)), start(id.substr(colon + 1));
  if (!ParseNumber(pid, holder.pid) || !ParseNumber(start, holder.start) || holder.pid <= 0)
    return std::nullopt;
  return holder;
}

Result<TensorRecord> RecordFromFields(const std::string& name,
                                      const std::vector<std::optional<std::string>>& values) {
  // Indexes into TensorFieldNames().
  enum {
    kDtype,
    kShape,
    kCtime,
    kNode,
    kDevice,
    kBytes,
    kIpcKind,
    kIpcHandle,
    kOffset,
    kRefcount,
    kState,
    kOwner,
    kLifetime,
    kCreatorPid,
    kOwnerPid,
    kOwnerStart,
    kEpoch,
    kSet,
    kFieldCount
  };
  if (values.size() != kFieldCount)
    return Status(ErrorCode::kInternal, "RecordFromFields: wrong arity");
  auto bad = [&](const char* field) {
    return Status(ErrorCode::kUnexpectedReply,
                  "tensor hash of '" + name + "' has a missing or malformed \"" + field + "\"");
  };
  auto get = [&](int i) -> const std::string* {
    return values[static_cast<size_t>(i)] ? &*values[static_cast<size_t>(i)] : nullptr;
  };
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
  if ((value = get(kRefcount)) == nullptr || !ParseNumber(*value, r.refcount))
    return bad("refcount");
  if ((value = get(kState)) == nullptr) return bad("state");
  r.state = *value;
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
  if ((value = get(kIpcKind)) != nullptr) r.ipc_kind = ParseIpcKind(*value);
  if ((value = get(kIpcHandle)) != nullptr) r.ipc_handle = *value;
  if ((value = get(kOwner)) != nullptr) r.owner = *value;
  if ((value = get(kEpoch)) != nullptr) r.epoch = *value;
  if ((value = get(kSet)) != nullptr) r.set = *value;
  if ((value = get(kLifetime)) != nullptr) {  // read as written: no other value is read as heap
    if (*value != "stack" && *value != "heap") return bad("lifetime");
    r.lifetime = *value == "stack" ? Lifetime::kStack : Lifetime::kHeap;
  }
  MCD_RETURN_IF_ERROR(ValidateRecord(r));
  return r;
}

namespace {

// A name shm_open takes as one object of /dev/shm: no further '/', nothing unprintable.
bool IsShmName(std::string_view name) {
  if (name.size() < 2 || name.size() > 255 || name[0] != '/') return false;
  for (char c : name.substr(1)) {
    if (c <= 0x20 || c >= 0x7f || c == '/') return false;
  }
  return name != "/." && name != "/..";
}

}  // namespace

Status ValidateRecord(const TensorRecord& r) {
  auto bad = [&](const char* field, const std::string& value, const std::string& why) {
    return Status(ErrorCode::kUnexpectedReply, "tensor hash of '" + Printable(r.name, 255) +
                                                   "' says \"" + field + "\" " + value + ", " +
                                                   why);
  };
  // A set's name is a tensor name's prefix, and names the set's key (KeySpace::Set).
  if (!r.set.empty() && !ValidateName(r.set).ok()) {
    return bad("set", Printable(r.set, 255), "which is no tensor set name");
  }
  // A reader indexes the memory by shape and dtype: they must cover exactly the bytes it maps.
  auto covered = ShapeBytes(r.shape, r.dtype);
  if (!covered.ok() || covered.value() != r.bytes) {
    return bad("bytes", std::to_string(r.bytes),
               "which its shape and dtype do not make" +
                   (covered.ok() ? " (" + std::to_string(covered.value()) + ")" : std::string()));
  }
  // The end of the tensor in its object, computed by every mapper: no wrap past 2^64, and small
  // enough for off_t and pointer arithmetic.
  constexpr uint64_t kMaxEnd = static_cast<uint64_t>(INT64_MAX);
  if (r.bytes > kMaxEnd || r.offset > kMaxEnd - r.bytes) {
    return bad("offset", std::to_string(r.offset),
               "which with its " + std::to_string(r.bytes) + " bytes ends past 2^63 - 1");
  }
  bool gpu_kind = r.ipc_kind == IpcKind::kCudaIpc || r.ipc_kind == IpcKind::kCudaMempool;
  bool host_kind = r.ipc_kind == IpcKind::kHostShm;
  if (r.device < kHostDevice || r.device > 1023 || (host_kind && r.device != kHostDevice) ||
      (gpu_kind && r.device == kHostDevice)) {
    return bad("device", std::to_string(r.device),
               std::string("which is not ") +
                   (host_kind  ? "cpu (-1)"
                    : gpu_kind ? "a GPU ordinal (0-1023)"
                               : "cpu (-1) or a GPU ordinal (0-1023)") +
                   " for ipc_kind " + IpcKindName(r.ipc_kind));
  }
  if (r.ipc_kind == IpcKind::kUnknown) return Status::Ok();  // a newer kind: the open says so
  if (r.ipc_handle.empty()) {
    return r.state == "ready" ? bad("ipc_handle", "\"\"", "but a ready tensor has a handle")
                              : Status::Ok();
  }
  if (gpu_kind && r.ipc_handle.size() != kCudaHandleBytes) {
    return bad("ipc_handle", "of " + std::to_string(r.ipc_handle.size()) + " bytes",
               "not " + std::to_string(kCudaHandleBytes));
  }
  if (host_kind && !IsShmName(r.ipc_handle)) {
    return bad("ipc_handle", "\"" + Printable(r.ipc_handle) + "\"",
               "which names no shared-memory object");
  }
  return Status::Ok();
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

}  // namespace mcd
