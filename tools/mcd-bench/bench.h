// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The rows of one allocator: the Redis floor, then create / get / delete, the first get in a fresh
// process, the share between two processes, throughput with N client processes and copy
// bandwidth, for each size.
#pragma once

#include <string>

#include "bench_common.h"

namespace mcd::bench {

// Measures every row of allocator `kind` on `device` against the server `flags` name, and
// returns the JSON record ({"config":..,"floor_us":..,"rows":[..]}). A stop signal ends it with
// kStopped after the run's tensors were given back.
Result<json> MeasureAllocator(const Options& opt, const tools::CommonFlags& flags,
                              const std::string& kind, int device, const json& config);

}  // namespace mcd::bench
