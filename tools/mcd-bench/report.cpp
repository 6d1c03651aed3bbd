// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "report.h"

#include <algorithm>
#include <numeric>

namespace mcd::bench {

namespace {
std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace

json RecordOf(const std::vector<Row>& measured, double floor_us, const std::string& redis_version,
              const json& config) {
  json rows = json::array();
  for (const Row& r : measured) {
    double median = Percentile(r.us, 0.5);
    double mean = r.us.empty() ? 0
                               : std::accumulate(r.us.begin(), r.us.end(), 0.0) /
                                     static_cast<double>(r.us.size());
    json row = {{"row", r.row},
                {"allocator", r.allocator},
                {"device", DeviceName(r.device)},
                {"bytes", r.bytes},
                {"n", r.us.size()},
                {"median_us", median},
                {"p90_us", Percentile(r.us, 0.9)},
                {"p99_us", Percentile(r.us, 0.99)},
                {"max_us", r.us.empty() ? 0.0 : *std::max_element(r.us.begin(), r.us.end())},
                {"ops_per_s", r.ops_per_s > 0 ? r.ops_per_s : (mean > 0 ? 1e6 / mean : 0)},
                {"x_floor", floor_us > 0 ? median / floor_us : 0}};
    if (r.redis_cpu_us >= 0) row["redis_cpu_us_per_op"] = r.redis_cpu_us;
    if (r.server_cpu_us >= 0) {
      row["server_cpu_us_per_op"] = r.server_cpu_us;
      row["server_thread_busy"] = r.server_thread_busy;
    }
    auto step = [&row](const std::string& name, const std::vector<double>& us) {
      if (us.empty()) return;
      row[name + "_median_us"] = Percentile(us, 0.5);
      row[name + "_p90_us"] = Percentile(us, 0.9);
      row[name + "_p99_us"] = Percentile(us, 0.99);
    };
    step("create", r.create_us);
    step("delete", r.delete_us);
    step("get", r.get_us);
    step("touch", r.touch_us);
    step("release", r.release_us);
    step("connect", r.connect_us);
    if (!r.release_us.empty()) row["release_first_us"] = r.release_us.front();
    if (!r.note.empty()) row["note"] = r.note;
    rows.push_back(row);
  }
  json with_redis = config;
  if (!redis_version.empty()) with_redis["redis_version"] = redis_version;
  return {{"tool", "mcd-bench"},
          {"version", MCD_VERSION},
          {"config", with_redis},
          {"rows", rows},
          {"floor_us", floor_us}};
}

void PrintTable(const json& record) {
  std::vector<std::vector<std::string>> rows = {{"ROW", "ALLOCATOR", "SIZE", "N", "MEDIAN_US",
                                                 "P90_US", "P99_US", "OPS/S", "X_FLOOR", "NOTE"}};
  for (const json& r : record["rows"]) {
    rows.push_back({r["row"], r["allocator"],
                    r["bytes"].get<uint64_t>() ? tools::HumanBytes(r["bytes"]) : "-",
                    std::to_string(r["n"].get<size_t>()), Fixed(r["median_us"], 1),
                    Fixed(r["p90_us"], 1), Fixed(r["p99_us"], 1), Fixed(r["ops_per_s"], 0),
                    Fixed(r["x_floor"], 1), r.value("note", "")});
  }
  std::cout << tools::FormatTable(rows, 0, 0);
}

}  // namespace mcd::bench
