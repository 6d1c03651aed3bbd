// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A server reply as a client reads it, and a record as JSON: parsed or refused; a record that
// parses is safe to map (FuzzCheckSafeToMap) and encodes to JSON that parses back to the same
// record.
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "memcuda/protocol.h"
#include "protocol/json_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto replied = mcd::RecordFromReply(text);
  if (replied.ok()) FuzzCheckSafeToMap(*replied);
  auto record = mcd::RecordFromJson(text);
  if (record.ok()) {
    FuzzCheckSafeToMap(*record);
    std::string json = mcd::RecordToJson(*record);
    auto again = mcd::RecordFromJson(json);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(mcd::RecordToJson(*again) == json);
  }
  return 0;
}
