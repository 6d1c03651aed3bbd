// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A run's JSON record, from its rows, and the text table of one.
#pragma once

#include "bench_common.h"

namespace mcd::bench {

// {"tool","version","config","rows","floor_us"}: each row's percentiles, rates and parts.
json RecordOf(const std::vector<Row>& measured, double floor_us, const std::string& redis_version,
              const json& config);
void PrintTable(const json& record);

}  // namespace mcd::bench
