// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The one owner of a file descriptor: closes it when it goes, moves but never copies, so that a
// descriptor has exactly one owner at a time and ownership shows in the types. Every function
// of libmemcuda and its tools that makes a descriptor returns one of these; `release()` hands it
// on to an API that takes ownership (CUDA's external memory and semaphore imports do, on
// success; cudaMemPoolImportFromShareableHandle does not). Header-only.
#pragma once

#include <unistd.h>

#include <utility>

namespace mcd {

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  // Gives up ownership without closing.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }
  // Closes the descriptor held, if any, and takes `fd`. A close that fails is not reported: the
  // descriptor is gone either way (close(2) must not be retried on Linux).
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) (void)::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace mcd
