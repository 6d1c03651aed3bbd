// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// NumPy .npy files (format versions 1-3, little-endian, C order) for mcd-create --from and
// mcd-get -o.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memcuda/file_in.h"
#include "memcuda/protocol.h"
#include "memcuda/status.h"

namespace mcd::tools {

struct NpyArray {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  MappedFile file;        // the whole file, mapped (MappedFile says why)
  std::string_view data;  // its raw little-endian bytes, C order, in `file`
};

// Reads an array; kInvalidArgument for Fortran order, big-endian or unsupported dtypes and 0-d
// arrays, kIoError when the file cannot be read or holds fewer or more data bytes than its
// header's shape.
Result<NpyArray> ReadNpy(const std::string& path);
// Writes a version 1.0 file (with WriteWhole). bf16 (no NumPy dtype) is written as raw '<u2'
// bits.
Status WriteNpy(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
                const void* data, uint64_t bytes);
// Writes `parts`, one after another, to `path` whole or not at all: into a new file beside it,
// synced, then renamed over it (a link is followed; a file replaced keeps its permission bits).
// On any failure the new file is removed and `path` is as it was; kIoError names the step, the
// file and the reason (strerror). A file this process may not write is not replaced. A target
// that is not a regular file (a FIFO, a device, also through a link) is written in place.
Status WriteWhole(const std::string& path, const std::vector<std::string_view>& parts);

}  // namespace mcd::tools
