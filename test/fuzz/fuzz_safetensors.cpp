// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A safetensors file as mcd-create --from and Client::LoadSafetensors read it: its header read
// into tensors whose data lies back to back over the whole of the file's data (no holes, no
// overlaps, nothing after), each exactly shape x dtype long; or refused with a code of the table.
// What is read is written back (SafetensorsHeader) and read again the same.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "protocol/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view file(reinterpret_cast<const char*>(data), size);
  auto header = mcd::SafetensorsHeaderSize(file.substr(0, 8), size);
  if (!header.ok()) {
    auto code = header.status().code();  // not a header, or a file cut short
    FUZZ_CHECK(code == mcd::ErrorCode::kInvalidArgument || code == mcd::ErrorCode::kIoError);
    return 0;
  }
  FUZZ_CHECK(8 + header.value() <= size);
  const uint64_t data_bytes = size - 8 - header.value();
  auto entries = mcd::ParseSafetensorsHeader(file.substr(8, header.value()), data_bytes);
  if (!entries.ok()) {
    auto code = entries.status().code();
    FUZZ_CHECK(code == mcd::ErrorCode::kInvalidArgument || code == mcd::ErrorCode::kTooLarge ||
               code == mcd::ErrorCode::kIoError);
    return 0;
  }
  uint64_t end = 0;
  for (const mcd::SafetensorsEntry& e : entries.value()) {
    FUZZ_CHECK(e.begin == end && e.begin <= e.end && e.end <= data_bytes);
    auto bytes = mcd::ShapeBytes(e.shape, e.dtype);
    FUZZ_CHECK(bytes.ok() && bytes.value() == e.end - e.begin);
    end = e.end;
  }
  FUZZ_CHECK(end == data_bytes);
  std::string again = mcd::SafetensorsHeader(entries.value());
  FUZZ_CHECK(again.size() % 8 == 0);
  auto size_again = mcd::SafetensorsHeaderSize(again.substr(0, 8), again.size() + end);
  FUZZ_CHECK(size_again.ok() && size_again.value() == again.size() - 8);
  uint64_t total = 0;
  for (const mcd::SafetensorsEntry& e : entries.value()) total += e.end - e.begin;
  auto reread = mcd::ParseSafetensorsHeader(std::string_view(again).substr(8), total);
  FUZZ_CHECK(reread.ok() && reread->size() == entries->size());
  for (const mcd::SafetensorsEntry& e : reread.value()) {
    auto bytes = mcd::ShapeBytes(e.shape, e.dtype);
    FUZZ_CHECK(bytes.ok() && bytes.value() == e.end - e.begin);
  }
  return 0;
}
