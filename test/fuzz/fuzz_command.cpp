// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A queue or command-socket line: parsed, or refused with a code of the table; a parsed
// command encodes to JSON that parses back to the same command.
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "memcuda/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view raw(reinterpret_cast<const char*>(data), size);
  std::string req;
  auto parsed = mcd::ParseCommand(raw, &req);
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == mcd::ErrorCode::kInvalidArgument ||
               parsed.status().code() == mcd::ErrorCode::kTooLarge);
    return 0;
  }
  FUZZ_CHECK(parsed->req == req);
  std::string json = mcd::CommandToJson(*parsed);
  auto again = mcd::ParseCommand(json);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(mcd::CommandToJson(*again) == json);
  return 0;
}
