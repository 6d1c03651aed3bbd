// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The safetensors file format (huggingface/safetensors): an 8-byte little-endian size N, N bytes
// of JSON naming each tensor's dtype, shape and data_offsets ([begin, end) from the start of the
// data, which follows the header), an optional "__metadata__" object of strings, then the data.
// Pure functions, no I/O: Client::LoadSafetensors and SaveSafetensors read and write the files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memcuda/protocol.h"
#include "memcuda/status.h"

namespace mcd {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets
  uint64_t end = 0;
};

// The format's limit on the header, which a reader holds in memory whole.
inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

// The header's size from the file's first 8 bytes, checked against the file's size: kIoError for
// a file cut short (fewer than 8 bytes, or a header past its end), as a short .npy file's.
Result<uint64_t> SafetensorsHeaderSize(std::string_view first8, uint64_t file_bytes);
// The tensors of header `json`, whose data is `data_bytes` long, sorted by where their data
// begins: each dtype one memcuda has (kInvalidArgument naming the tensor and dtype otherwise), its
// data exactly shape x dtype long, the tensors' data back to back over the whole data (no
// holes, no overlaps, nothing after; kIoError for data past the file's end), "__metadata__" an
// object of strings. A scalar (shape []) is read as shape [1]; a tensor of no elements is
// refused (a memcuda tensor holds at least one).
Result<std::vector<SafetensorsEntry>> ParseSafetensorsHeader(std::string_view json,
                                                             uint64_t data_bytes);
// The first bytes of a file of `entries` (in the order given, their data back to back from
// offset 0): the size, then the header padded with spaces to a multiple of 8 bytes.
std::string SafetensorsHeader(const std::vector<SafetensorsEntry>& entries);
// "F16", "BF16", ... as the format names memcuda's dtypes.
const char* SafetensorsDTypeName(DType dtype);

}  // namespace mcd
