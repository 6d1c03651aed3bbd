// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Reading a file in place: the one way libmemcuda (Client::LoadSafetensors) and the tools (their
// --from) read a file whose bytes become a tensor's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "memcuda/export.h"
#include "memcuda/status.h"

namespace mcd {

// A read-only mapping of a whole regular file, unmapped when it goes. Its bytes are the page
// cache's, read as they are first touched: a file copied into a tensor goes through no buffer
// of this process's own, whose fresh pages would cost more to make than the copy (a 1 GiB
// buffer ~0.9 s on an H200 host). A file shortened while it is mapped makes the next touch past
// its new end fail with SIGBUS, as for any mapping of a file.
class MCD_API MappedFile {
 public:
  // kIoError naming the step and `path`; kInvalidArgument for what is not a regular file.
  static Result<MappedFile> Open(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  MappedFile() = default;  // empty

  const char* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::string_view view() const { return {data_, static_cast<size_t>(size_)}; }

 private:
  const char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace mcd
