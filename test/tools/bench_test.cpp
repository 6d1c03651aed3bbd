// A short mcd-bench run on host memory: checks the record's shape and sanity, not speed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "test_support.h"

namespace mcd {
namespace {

TEST(Bench, SelfServeHostRecordIsComplete) {
  auto run = test::Run({test::ToolPath("mcd-bench"), "--self-serve", "--cpu", "--sizes", "4KiB,64KiB",
                        "--iterations", "20", "--max-seconds", "1", "--clients", "2", "--fresh", "2",
                        "--json"}, {}, 300);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto record = nlohmann::json::parse(run.out);
  EXPECT_EQ(record["tool"], "mcd-bench");
  EXPECT_GT(record["floor_us"].get<double>(), 0);
  std::set<std::string> seen;
  for (const auto& row : record["rows"]) {
    std::string name = row["row"];
    seen.insert(name);
    SCOPED_TRACE(row.dump());
    EXPECT_GT(row["n"].get<int>(), 0);
    double median = row["median_us"], p90 = row["p90_us"], p99 = row["p99_us"];
    EXPECT_GT(median, 0);
    EXPECT_LE(median, p90);
    EXPECT_LE(p90, p99);
    EXPECT_GT(row["ops_per_s"].get<double>(), 0);
    EXPECT_GT(row["x_floor"].get<double>(), 0);
    if (name != "redis_rtt") EXPECT_EQ(row["allocator"], "host_shm");
    EXPECT_FALSE(row.contains("note") && row["note"].get<std::string>().find("error") != std::string::npos);
  }
  for (const char* expected : {"redis_rtt", "create", "get_warm", "delete", "get_first", "share",
                               "create+delete_x2", "copy_from_mapping", "copy_local"}) {
    EXPECT_EQ(seen.count(expected), 1u) << expected;
  }
  // Every row of both sizes: 5 per size, plus the floor, throughput and two bandwidth rows.
  EXPECT_EQ(record["rows"].size(), 1u + 2 * 5 + 1 + 2);
}

}  // namespace
}  // namespace mcd
