// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A client process for the concurrency test: N rounds of create/get/release on its own names
// and get/release on a shared name, through libmemcuda and the real server.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "memcuda/client.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: stress_client URL NODE ID ROUNDS SHARED\n");
    return 64;
  }
  mcd::ClientOptions options;
  options.redis_url = mcd::RedisUrl::Parse(argv[1]).value();
  options.node = argv[2];
  options.timeout_ms = 30000;
  std::string id = argv[3];
  int rounds = std::atoi(argv[4]);
  std::string shared = argv[5];
  auto client = mcd::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 69;
  }
  auto& c = *client.value();
  for (int i = 0; i < rounds; ++i) {
    std::string name = "p" + id + "." + std::to_string(i);
    mcd::CreateSpec spec;
    spec.name = name;
    spec.dtype = mcd::DType::kI32;
    spec.shape = {16};
    spec.device = mcd::kHostDevice;
    auto created = c.Create(spec);
    auto got = c.Get(name);
    if (!created.ok() || !got.ok()) {
      std::fprintf(stderr, "round %d: %s %s\n", i, created.status().ToString().c_str(),
                   got.status().ToString().c_str());
      return 1;
    }
    static_cast<int*>(got->data)[0] = i;  // the mapping is writable
    auto r1 = c.Release(name);
    auto r2 = c.Release(name);
    auto s1 = c.Get(shared);
    auto s2 = c.Release(shared);
    if (!r1.ok() || !r2.ok() || r2->refcount != 0 || !s1.ok() || !s2.ok()) {
      std::fprintf(stderr, "round %d: release failed\n", i);
      return 1;
    }
  }
  return 0;
}
