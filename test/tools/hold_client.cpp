// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A libmemcuda program that takes a reference to each named tensor, says "held" on stdout and
// then waits to be killed: the holder whose death the holder tests cause.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "memcuda/client.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: hold_client URL NODE NAME...\n");
    return 64;
  }
  mcd::ClientOptions options;
  options.redis_url = mcd::RedisUrl::Parse(argv[1]).value();
  options.node = argv[2];
  auto client = mcd::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 69;
  }
  for (int i = 3; i < argc; ++i) {
    auto got = client.value()->Get(argv[i]);
    if (!got.ok()) {
      std::fprintf(stderr, "%s: %s\n", argv[i], got.status().ToString().c_str());
      return 1;
    }
  }
  std::printf("held\n");
  std::fflush(stdout);
  for (;;) pause();
}
