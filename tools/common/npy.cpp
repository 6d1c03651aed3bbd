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
#include <fstream>
#include <new>

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
Result<std::string> ReadNpyHeader(std::ifstream& in, const std::string& path) {
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    return Status(ErrorCode::kInvalidArgument, path + " is not a NumPy .npy file");
  }
  int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  unsigned char len_bytes[4] = {};
  if (major == 1) {
    if (!in.read(reinterpret_cast<char*>(len_bytes), 2))
      return Status(ErrorCode::kIoError, path + ": truncated header");
    header_len = static_cast<uint32_t>(len_bytes[0] | (len_bytes[1] << 8));
  } else if (major == 2 || major == 3) {
    if (!in.read(reinterpret_cast<char*>(len_bytes), 4))
      return Status(ErrorCode::kIoError, path + ": truncated header");
    header_len = static_cast<uint32_t>(len_bytes[0]) | (static_cast<uint32_t>(len_bytes[1]) << 8) |
                 (static_cast<uint32_t>(len_bytes[2]) << 16) |
                 (static_cast<uint32_t>(len_bytes[3]) << 24);
  } else {
    return Status(ErrorCode::kInvalidArgument,
                  path + ": unsupported .npy version " + std::to_string(major));
  }
  if (header_len > 65536) return Status(ErrorCode::kInvalidArgument, path + ": header too large");
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len))
    return Status(ErrorCode::kIoError, path + ": truncated header");
  return header;
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

// The `bytes` of data after the header, which must be all the file holds.
Status ReadNpyData(std::ifstream& in, const std::string& path, uint64_t bytes, std::string& data) {
  // What the header claims is checked against the file before anything is allocated: a small
  // file must not make this process (or the server) set aside gigabytes.
  std::streamoff data_at = in.tellg();
  in.seekg(0, std::ios::end);
  std::streamoff file_size = in.tellg();
  in.seekg(data_at);
  uint64_t held = file_size > data_at ? static_cast<uint64_t>(file_size - data_at) : 0;
  if (held != bytes) {
    // More is not one array either (two files joined, a header that lies about its shape).
    return Status(ErrorCode::kIoError, path + ": holds " + std::to_string(held) + " data bytes, " +
                                           (held < bytes ? "fewer" : "more") + " than the " +
                                           std::to_string(bytes) + " its header promises");
  }
  try {
    data.resize(bytes);
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory,
                  path + ": not enough memory to read its " + std::to_string(bytes) + " bytes");
  }
  if (!in.read(data.data(), static_cast<std::streamsize>(bytes))) {
    return Status(ErrorCode::kIoError, path + ": holds fewer than the " + std::to_string(bytes) +
                                           " data bytes its header promises");
  }
  return Status::Ok();
}

}  // namespace

Result<NpyArray> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(ErrorCode::kIoError, "cannot open " + path + ": " + std::strerror(errno));
  MCD_ASSIGN_OR_RETURN(std::string header, ReadNpyHeader(in, path));
  NpyArray out;
  MCD_RETURN_IF_ERROR(ParseNpyHeader(header, path, out));
  MCD_ASSIGN_OR_RETURN(uint64_t bytes, ShapeBytes(out.shape, out.dtype));
  MCD_RETURN_IF_ERROR(ReadNpyData(in, path, bytes, out.data));
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
