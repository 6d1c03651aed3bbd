// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A Redis URL from a flag or the environment: parsed or refused as invalid, and a parsed one
// never shows its password.
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "memcuda/redis.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto url = mcd::RedisUrl::Parse(text);
  if (!url.ok()) {
    FUZZ_CHECK(url.status().code() == mcd::ErrorCode::kInvalidArgument);
    return 0;
  }
  // The password shows no more often than it would in the rest of the URL.
  if (!url->password.empty()) {
    auto count = [](const std::string& text, const std::string& what) {
      size_t n = 0;
      for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
      return n;
    };
    mcd::RedisUrl other = *url;
    other.password = "\x01";
    FUZZ_CHECK(count(url->Redacted(), url->password) <= count(other.Redacted(), url->password));
  }
  return 0;
}
