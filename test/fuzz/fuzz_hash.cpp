// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What a tensor hash in Redis holds, as anyone with Redis credentials may write it: fields and
// values (one per line, "field=value"), and the small parsers of its values: holder ids,
// shapes, devices, hex. A record read from a hash is safe to map (FuzzCheckSafeToMap) and
// writes back the same fields.
#include <cstdint>
#include <map>
#include <string>

#include "fuzz_check.h"
#include "memcuda/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> fields;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    size_t eq = line.find('=');
    if (eq != std::string::npos) fields[line.substr(0, eq)] = line.substr(eq + 1);
    (void)mcd::ParseHolderId(line);
    (void)mcd::ShapeFromJson(line);
    (void)mcd::ParseShapeList(line);
    (void)mcd::ParseDevice(line);
    (void)mcd::HexDecode(line);
    start = end + 1;
  }
  auto record = mcd::RecordFromHash("fuzzed", fields);
  if (record.ok()) {
    FuzzCheckSafeToMap(*record);
    std::map<std::string, std::string> written;
    for (auto& [field, value] : mcd::HashFields(*record)) written[field] = value;
    auto again = mcd::RecordFromHash("fuzzed", written);
    FUZZ_CHECK(again.ok());
    // HashFields leaves the holders out: the reference scripts write them, not the server.
    record->holders.clear();
    FUZZ_CHECK(mcd::RecordToJson(*again) == mcd::RecordToJson(*record));
  }
  return 0;
}
