// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "protocol/safetensors.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "protocol/json_support.h"
#include "protocol/text.h"

namespace mcd {

namespace {

struct DTypeNamePair {
  const char* name;
  DType dtype;
};
constexpr DTypeNamePair kDTypes[] = {
    {"F16", DType::kF16},  {"BF16", DType::kBF16}, {"F32", DType::kF32}, {"F64", DType::kF64},
    {"I8", DType::kI8},    {"I16", DType::kI16},   {"I32", DType::kI32}, {"I64", DType::kI64},
    {"U8", DType::kU8},    {"U16", DType::kU16},   {"U32", DType::kU32}, {"U64", DType::kU64},
    {"BOOL", DType::kBool}};

Status Bad(const std::string& why) {
  return Status(ErrorCode::kInvalidArgument, "safetensors header: " + why);
}

Result<SafetensorsEntry> ParseEntry(std::string_view name, const rj::Value& value,
                                    uint64_t data_bytes) {
  const std::string who = "tensor '" + Printable(name) + "'";
  if (!value.IsObject()) return Bad(who + " is not an object");
  const rj::Value* dtype = nullptr;
  const rj::Value* shape = nullptr;
  const rj::Value* offsets = nullptr;
  for (auto m = value.MemberBegin(); m != value.MemberEnd(); ++m) {
    std::string_view key = Text(m->name);
    const rj::Value** slot = key == "dtype"          ? &dtype
                             : key == "shape"        ? &shape
                             : key == "data_offsets" ? &offsets
                                                     : nullptr;
    if (slot == nullptr) return Bad(who + " has an unknown field \"" + Printable(key) + "\"");
    if (*slot != nullptr) return Bad(who + " repeats \"" + Printable(key) + "\"");
    *slot = &m->value;
  }
  if (dtype == nullptr || !dtype->IsString() || shape == nullptr || !shape->IsArray() ||
      offsets == nullptr || !offsets->IsArray() || offsets->Size() != 2 ||
      !(*offsets)[0].IsUint64() || !(*offsets)[1].IsUint64()) {
    return Bad(who +
               " needs \"dtype\" (a string), \"shape\" (an array) and \"data_offsets\" "
               "(two integers)");
  }
  SafetensorsEntry entry;
  entry.name = std::string(name);
  const DTypeNamePair* known =
      std::find_if(std::begin(kDTypes), std::end(kDTypes),
                   [&](const DTypeNamePair& d) { return Text(*dtype) == d.name; });
  if (known == std::end(kDTypes)) {
    return Status(ErrorCode::kInvalidArgument,
                  who + " is " + Printable(Text(*dtype)) +
                      ", a dtype memcuda has not (it has F16 BF16 F32 F64 I8 I16 I32 I64 U8 U16 "
                      "U32 U64 BOOL)");
  }
  entry.dtype = known->dtype;
  for (const rj::Value& dim : shape->GetArray()) {
    if (!dim.IsInt64() || dim.GetInt64() < 0) return Bad(who + " has a dimension that is no size");
    entry.shape.push_back(dim.GetInt64());
  }
  if (entry.shape.empty()) entry.shape = {1};  // a scalar: one element
  entry.begin = (*offsets)[0].GetUint64();
  entry.end = (*offsets)[1].GetUint64();
  const std::string range =
      "data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) + ")";
  if (entry.begin > entry.end) return Bad("the " + range + " of " + who + " end before they begin");
  if (entry.end > data_bytes) {
    // The header says more data than the file holds: a file cut short, as .npy's (kIoError).
    return Status(ErrorCode::kIoError, "safetensors data: the " + range + " of " + who +
                                           " lie outside the file's " + std::to_string(data_bytes) +
                                           " bytes of data (a truncated file?)");
  }
  auto bytes = ShapeBytes(entry.shape, entry.dtype);
  if (!bytes.ok()) {
    std::string why = who + ": " + bytes.status().message();
    if (std::find(entry.shape.begin(), entry.shape.end(), 0) != entry.shape.end()) {
      why += " (a memcuda tensor holds at least one element)";
    }
    return Status(bytes.status().code(), why);
  }
  if (bytes.value() != entry.end - entry.begin) {
    return Bad(who + " has " + std::to_string(entry.end - entry.begin) +
               " bytes of data for its shape's " + std::to_string(bytes.value()));
  }
  return entry;
}

// "__metadata__": an object of strings, as the format says (null: none, as its reader takes it).
Status CheckMetadata(const rj::Value& value) {
  if (value.IsNull()) return Status::Ok();
  if (!value.IsObject()) return Bad("\"__metadata__\" is not an object");
  for (auto m = value.MemberBegin(); m != value.MemberEnd(); ++m) {
    if (!m->value.IsString()) {
      return Bad("\"__metadata__\" value of \"" + Printable(Text(m->name)) + "\" is not a string");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<uint64_t> SafetensorsHeaderSize(std::string_view first8, uint64_t file_bytes) {
  if (first8.size() < 8 || file_bytes < 8) {
    return Status(ErrorCode::kIoError,
                  "safetensors header: the file is shorter than its 8 "
                  "bytes of header size (a truncated file?)");
  }
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = size << 8 | static_cast<unsigned char>(first8[i]);
  if (size > kMaxSafetensorsHeader) {
    return Bad("its size, " + std::to_string(size) + " bytes, is over the format's limit of " +
               std::to_string(kMaxSafetensorsHeader));
  }
  if (size > file_bytes - 8) {
    return Status(ErrorCode::kIoError, "safetensors header: its size, " + std::to_string(size) +
                                           " bytes, is more than the file's " +
                                           std::to_string(file_bytes - 8) +
                                           " after it (a truncated file?)");
  }
  return size;
}

Result<std::vector<SafetensorsEntry>> ParseSafetensorsHeader(std::string_view json,
                                                             uint64_t data_bytes) {
  // Tensors, then their fields, then a shape's dimensions: three levels, and __metadata__'s
  // strings at the second.
  PooledDocument pooled;
  Status parsed = ParseJson(json, 3, "safetensors header", pooled);
  if (!parsed.ok()) return Status(ErrorCode::kInvalidArgument, parsed.message());
  const Document& doc = pooled.doc();
  if (!doc.IsObject()) return Bad("not a JSON object");
  std::vector<SafetensorsEntry> entries;
  std::unordered_set<std::string_view> names;
  for (auto m = doc.MemberBegin(); m != doc.MemberEnd(); ++m) {
    std::string_view name = Text(m->name);
    if (!names.insert(name).second) return Bad("names tensor '" + Printable(name) + "' twice");
    if (name == "__metadata__") {  // the writer's notes, nothing memcuda keeps
      MCD_RETURN_IF_ERROR(CheckMetadata(m->value));
      continue;
    }
    MCD_ASSIGN_OR_RETURN(SafetensorsEntry entry, ParseEntry(name, m->value, data_bytes));
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) return Bad("names no tensor");
  std::sort(entries.begin(), entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  // The format indexes every byte of the data, without holes or overlaps (which would let one
  // file be read as two): the tensors' data lies back to back from 0 to the file's end.
  uint64_t at = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].begin < at) {
      return Bad("the data of '" + Printable(entries[i - 1].name) + "' and '" +
                 Printable(entries[i].name) + "' overlap");
    }
    if (entries[i].begin > at) {
      return Bad("bytes [" + std::to_string(at) + ", " + std::to_string(entries[i].begin) +
                 ") of the data belong to no tensor (before '" + Printable(entries[i].name) +
                 "'): the format allows no holes");
    }
    at = entries[i].end;
  }
  if (at != data_bytes) {
    return Bad("the file has " + std::to_string(data_bytes - at) +
               " bytes after the last tensor's data: the format allows none");
  }
  return entries;
}

const char* SafetensorsDTypeName(DType dtype) {
  for (const DTypeNamePair& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "U8";
}

std::string SafetensorsHeader(const std::vector<SafetensorsEntry>& entries) {
  Buffer out;
  Writer w(out);
  w.StartObject();
  uint64_t at = 0;
  for (const SafetensorsEntry& e : entries) {
    WriteString(w, e.name);
    w.StartObject();
    WriteKeyString(w, "dtype", SafetensorsDTypeName(e.dtype));
    w.Key("shape");
    WriteShape(w, e.shape);
    w.Key("data_offsets");
    w.StartArray();
    w.Uint64(at);
    at += e.end - e.begin;
    w.Uint64(at);
    w.EndArray();
    w.EndObject();
  }
  w.EndObject();
  std::string json(out.GetString(), out.GetSize());
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i)
    head[i] = static_cast<char>(static_cast<uint64_t>(json.size()) >> (8 * i));
  return head + json;
}

}  // namespace mcd
