// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A C++ program on the installed library: the protocol's parsers and a clear failure without a
// server. Exit 0 when both are as expected.
#include <iostream>

#include "memcuda/client.h"
#include "memcuda/protocol.h"

int main() {
  auto shape = mcd::ParseShapeList("2,3");
  if (!shape.ok() || shape->size() != 2) return 1;
  mcd::ClientOptions options;
  auto url = mcd::ResolveRedisUrl("redis://127.0.0.1:1");
  if (!url.ok()) return 1;
  options.redis_url = url.value();
  options.node = "nowhere";
  options.timeout_ms = 300;
  auto client = mcd::Client::Connect(options);
  std::cout << "connect to a dead Redis: " << client.status().ToString() << "\n";
  return !client.ok() && client.status().code() == mcd::ErrorCode::kUnavailable ? 0 : 2;
}
