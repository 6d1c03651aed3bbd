// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The throughput row: N client processes doing create+delete pairs, with what the pairs cost
// Redis and the server in CPU time.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"

namespace mcd::bench {

// Redis's CPU time so far (INFO cpu: user + system of the whole redis-server process), in
// seconds; negative when it cannot be read (no connection, an INFO that is not allowed, say).
double RedisCpuSeconds(RedisConnection* redis);
// CPU time so far (user + system, seconds) of `client`'s server process and of its command
// thread (the main thread, whose tid is the pid), from /proc; negative when unknown.
std::pair<double, double> ServerCpuSeconds(Client& client);

// "create+delete_xN": `clients` processes (this binary's churn children, started with
// `connection_args` for Redis and the server) make pairs of `bytes` for up to 3 s.
Result<Row> MeasureThroughput(const Options& opt, RedisConnection* redis, Client& client,
                              const std::string& kind, int device, uint64_t bytes, int clients,
                              const std::vector<std::string>& connection_args);

}  // namespace mcd::bench
