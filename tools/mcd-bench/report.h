// The text table of a run's JSON record.
#pragma once

#include "bench_common.h"

namespace mcd::bench {

void PrintTable(const json& record);

}  // namespace mcd::bench
