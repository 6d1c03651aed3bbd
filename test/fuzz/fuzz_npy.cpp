// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A .npy file as mcd-create --from reads it: read whole, or refused with a code of the table,
// and never an allocation of more than the file holds.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int fd = memfd_create("fuzz.npy", 0);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(ftruncate(fd, 0) == 0);
  FUZZ_CHECK(pwrite(fd, data, size, 0) == static_cast<ssize_t>(size));
  auto array = mcd::tools::ReadNpy("/proc/self/fd/" + std::to_string(fd));
  if (array.ok()) {
    FUZZ_CHECK(array->data.size() <= size);
  } else {
    auto code = array.status().code();
    FUZZ_CHECK(code == mcd::ErrorCode::kInvalidArgument || code == mcd::ErrorCode::kIoError ||
               code == mcd::ErrorCode::kTooLarge);
  }
  return 0;
}
