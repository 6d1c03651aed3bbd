// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/file_in.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "memcuda/unique_fd.h"

namespace mcd {

namespace {
Status IoError(const std::string& what, int err) {
  return Status(ErrorCode::kIoError, what + ": " + std::strerror(err));
}
}  // namespace

Result<MappedFile> MappedFile::Open(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return IoError("open " + path, errno);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return IoError("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) {
    return Status(ErrorCode::kInvalidArgument, path + " is not a regular file");
  }
  MappedFile file;
  file.size_ = static_cast<uint64_t>(st.st_size);
  if (file.size_ == 0) return file;
  void* data = mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (data == MAP_FAILED) return IoError("mmap " + path, errno);
  (void)madvise(data, file.size_, MADV_SEQUENTIAL);  // read once, front to back
  file.data_ = static_cast<const char*>(data);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(const_cast<char*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<char*>(data_), size_);
}

}  // namespace mcd
