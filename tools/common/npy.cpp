// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "npy.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "memcuda/file_out.h"

namespace mcd::tools {
namespace {

struct Descr {
  const char* text;
  DType dtype;
};
constexpr Descr kDescrs[] = {{"<f2", DType::kF16}, {"<f4", DType::kF32}, {"<f8", DType::kF64},
                             {"|i1", DType::kI8},  {"<i2", DType::kI16}, {"<i4", DType::kI32},
                             {"<i8", DType::kI64}, {"|u1", DType::kU8},  {"<u2", DType::kU16},
                             {"<u4", DType::kU32}, {"<u8", DType::kU64}, {"|b1", DType::kBool},
                             {"<i1", DType::kI8},  {"<u1", DType::kU8},  {"<b1", DType::kBool}};

std::string ValueOf(const std::string& header, const std::string& key) {
  size_t pos = header.find("'" + key + "'");
  if (pos == std::string::npos) return "";
  pos = header.find(':', pos);
  if (pos == std::string::npos) return "";
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  if (pos >= header.size()) return "";
  char open = header[pos];
  char close = open == '(' ? ')' : open == '\'' ? '\'' : ',';
  size_t end = header.find(close, pos + 1);
  if (end == std::string::npos) return "";
  return header.substr(pos, end - pos + (close == ',' ? 0 : 1));
}

Status IoError(const std::string& what, const std::string& path, int err) {
  return Status(ErrorCode::kIoError, what + " " + path + ": " + std::strerror(err));
}

}  // namespace

namespace {

// The header's text, after the magic, the version and the header's length.
// The header of the file `whole` (its text, from after its length field) and where its data
// begins.
Result<std::string_view> ReadNpyHeader(std::string_view whole, const std::string& path,
                                       size_t& data_at) {
  if (whole.size() < 8 || std::memcmp(whole.data(), "\x93NUMPY", 6) != 0) {
    return Status(ErrorCode::kInvalidArgument, path + " is not a NumPy .npy file");
  }
  int major = static_cast<unsigned char>(whole[6]);
  size_t length_bytes = major == 1 ? 2 : 4;
  if (major < 1 || major > 3) {
    return Status(ErrorCode::kInvalidArgument,
                  path + ": unsupported .npy version " + std::to_string(major));
  }
  if (whole.size() < 8 + length_bytes) {
    return Status(ErrorCode::kIoError, path + ": truncated header");
  }
  uint32_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) {
    header_len |= static_cast<uint32_t>(static_cast<unsigned char>(whole[8 + i])) << (8 * i);
  }
  if (header_len > 65536) return Status(ErrorCode::kInvalidArgument, path + ": header too large");
  size_t header_at = 8 + length_bytes;
  if (whole.size() - header_at < header_len) {
    return Status(ErrorCode::kIoError, path + ": truncated header");
  }
  data_at = header_at + header_len;
  return whole.substr(header_at, header_len);
}

// The dimensions of the header's shape tuple, "(2, 3)" or "(4,)"; at least one.
Status ParseNpyShape(const std::string& header, const std::string& path,
                     std::vector<int64_t>& shape) {
  std::string shape_text = ValueOf(header, "shape");
  if (shape_text.size() < 2)
    return Status(ErrorCode::kInvalidArgument, path + ": header lacks shape");
  std::string inner = shape_text.substr(1, shape_text.size() - 2);
  size_t start = 0;
  while (start < inner.size()) {
    size_t comma = inner.find(',', start);
    std::string part =
        inner.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    part.erase(0, part.find_first_not_of(' '));
    if (!part.empty()) {
      char* end = nullptr;
      long long dim = std::strtoll(part.c_str(), &end, 10);
      if (end == part.c_str())
        return Status(ErrorCode::kInvalidArgument, path + ": bad shape " + shape_text);
      shape.push_back(dim);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (shape.empty()) {
    // A tensor has at least one dimension: making it [1] silently would change its shape.
    return Status(ErrorCode::kInvalidArgument,
                  path +
                      ": a 0-d array (shape ()) has no tensor shape; save it with shape (1,) "
                      "(np.atleast_1d)");
  }
  return Status::Ok();
}

// The dtype, order and shape the header says, into `out`.
Status ParseNpyHeader(const std::string& header, const std::string& path, NpyArray& out) {
  std::string descr = ValueOf(header, "descr");
  bool known = false;
  for (const Descr& d : kDescrs) {
    if (descr == std::string("'") + d.text + "'") {
      out.dtype = d.dtype;
      known = true;
    }
  }
  if (!known) {
    return Status(
        ErrorCode::kInvalidArgument,
        path + ": dtype " + descr + " is not supported (little-endian numbers and bool only)");
  }
  if (ValueOf(header, "fortran_order") != "True" && ValueOf(header, "fortran_order") != "False") {
    return Status(ErrorCode::kInvalidArgument, path + ": header lacks fortran_order");
  }
  if (ValueOf(header, "fortran_order") == "True") {
    return Status(
        ErrorCode::kInvalidArgument,
        path + ": Fortran-ordered arrays are not supported (save with np.ascontiguousarray)");
  }
  return ParseNpyShape(header, path, out.shape);
}

}  // namespace

Result<NpyArray> ReadNpy(const std::string& path) {
  NpyArray out;
  MCD_ASSIGN_OR_RETURN(out.file, MappedFile::Open(path));
  size_t data_at = 0;
  MCD_ASSIGN_OR_RETURN(std::string_view header, ReadNpyHeader(out.file.view(), path, data_at));
  MCD_RETURN_IF_ERROR(ParseNpyHeader(std::string(header), path, out));
  auto shape_bytes = ShapeBytes(out.shape, out.dtype);
  if (!shape_bytes.ok()) {  // the file's shape, which its reader did not write: named
    return Status(shape_bytes.status().code(), path + ": " + shape_bytes.status().message());
  }
  const uint64_t bytes = shape_bytes.value();
  // More data than the shape is not one array either (two files joined, a header that lies
  // about its shape).
  uint64_t held = out.file.size() - data_at;
  if (held != bytes) {
    return Status(ErrorCode::kIoError, path + ": holds " + std::to_string(held) + " data bytes, " +
                                           (held < bytes ? "fewer" : "more") + " than the " +
                                           std::to_string(bytes) + " its header promises");
  }
  out.data = out.file.view().substr(data_at);
  return out;
}

Status WriteNpy(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
                const void* data, uint64_t bytes) {
  const char* descr = "<u2";  // bf16: raw bits
  for (const Descr& d : kDescrs) {
    if (d.dtype == dtype) {
      descr = d.text;
      break;
    }
  }
  std::string dims;
  for (int64_t dim : shape) dims += std::to_string(dim) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': (" +
                       (shape.size() == 1 ? dims.substr(0, dims.size() - 1) : dims) + "), }";
  // Pad so that the data starts on a 64-byte boundary, ending the header with '\n'.
  size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  uint16_t len = static_cast<uint16_t>(header.size());
  char preamble[10] = {'\x93',
                       'N',
                       'U',
                       'M',
                       'P',
                       'Y',
                       1,
                       0,
                       static_cast<char>(len & 0xff),
                       static_cast<char>(len >> 8)};
  return WriteWhole(path, {std::string_view(preamble, sizeof(preamble)), header,
                           std::string_view(static_cast<const char*>(data), bytes)});
}

Status WriteWhole(const std::string& path, const std::vector<std::string_view>& parts) {
  return WriteFileWhole(path, [&](int fd) {
    for (std::string_view part : parts) MCD_RETURN_IF_ERROR(WriteAllTo(fd, part, path));
    return Status::Ok();
  });
}

}  // namespace mcd::tools
