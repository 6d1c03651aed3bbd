// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What every fuzz target checks beyond "no crash, no sanitizer report": a property that must
// hold for every input, stopped at once when it does not.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "memcuda/protocol.h"

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

// What every record a parser accepts promises whoever maps it, checked here apart from
// ValidateRecord so that a parser that skips it is caught: shape times dtype is bytes, the
// tensor's end (offset + bytes) does not wrap and fits off_t, the device is cpu or a GPU ordinal
// that suits the kind, and a handle has the form of its kind.
inline void FuzzCheckSafeToMap(const mcd::TensorRecord& r) {
  auto covered = mcd::ShapeBytes(r.shape, r.dtype);
  FUZZ_CHECK(covered.ok() && covered.value() == r.bytes);
  FUZZ_CHECK(r.bytes <= static_cast<uint64_t>(INT64_MAX));
  FUZZ_CHECK(r.offset <= static_cast<uint64_t>(INT64_MAX) - r.bytes);
  FUZZ_CHECK(r.device >= mcd::kHostDevice && r.device <= 1023);
  if (r.ipc_kind == mcd::IpcKind::kHostShm) {
    FUZZ_CHECK(r.device == mcd::kHostDevice);
    FUZZ_CHECK(r.ipc_handle.empty() ||
               (r.ipc_handle[0] == '/' && r.ipc_handle.find('/', 1) == std::string::npos &&
                r.ipc_handle.find('\0') == std::string::npos));
  } else if (r.ipc_kind != mcd::IpcKind::kUnknown) {
    FUZZ_CHECK(r.device != mcd::kHostDevice);
    FUZZ_CHECK(r.ipc_handle.empty() || r.ipc_handle.size() == mcd::kCudaHandleBytes);
  }
  FUZZ_CHECK(!r.ipc_handle.empty() || r.state != "ready" || r.ipc_kind == mcd::IpcKind::kUnknown);
}
