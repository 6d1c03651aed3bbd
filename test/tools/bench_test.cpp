// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A short mcd-bench run on host memory: checks the record's shape and sanity, not speed.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "test_support.h"

namespace mcd {
namespace {

TEST(Bench, SelfServeHostRecordIsComplete) {
  auto run = test::Run(
      {test::ToolPath("mcd-bench"), "--self-serve", "--cpu", "--sizes", "4KiB,64KiB",
       "--iterations", "20", "--max-seconds", "1", "--clients", "1,2", "--fresh", "2", "--json"},
      {}, 300);
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
    EXPECT_LE(p99, row["max_us"].get<double>());
    EXPECT_GT(row["ops_per_s"].get<double>(), 0);
    EXPECT_GT(row["x_floor"].get<double>(), 0);
    if (name.rfind("redis_rtt", 0) != 0) EXPECT_EQ(row["allocator"], "host_shm");
    EXPECT_FALSE(row.contains("note") &&
                 row["note"].get<std::string>().find("error") != std::string::npos);
    // Throughput rows say how much of Redis's CPU each pair took: the bound at high rates.
    bool throughput = name.rfind("create+delete_x", 0) == 0;
    EXPECT_EQ(row.contains("redis_cpu_us_per_op"), throughput);
    if (throughput) EXPECT_GT(row["redis_cpu_us_per_op"].get<double>(), 0);
    // ... and the server's, with how busy its command thread was (a share of the wall time; a
    // clock tick of slack).
    EXPECT_EQ(row.contains("server_cpu_us_per_op"), throughput);
    if (throughput) {
      EXPECT_GT(row["server_cpu_us_per_op"].get<double>(), 0);
      double busy = row["server_thread_busy"];
      EXPECT_GT(busy, 0);
      EXPECT_LE(busy, 1.02);
    }
    // ... and each step of a pair apart (of a share: the create in A, the get + map and the
    // touch in B): a step takes part of its operation, so each of its percentiles is at most the
    // operation's.
    // share_existing has no create in its time: the tensor was made and filled before the clock.
    bool fresh_share = name == "share", share = fresh_share || name == "share_existing";
    for (const char* step : {"create", "delete", "get", "touch"}) {
      std::string at = step;
      bool has = at == "create" ? throughput || fresh_share : at == "delete" ? throughput : share;
      EXPECT_EQ(row.contains(at + "_p99_us"), has) << step;
      if (!has) continue;
      double step_median = row[at + "_median_us"], step_p90 = row[at + "_p90_us"],
             step_p99 = row[at + "_p99_us"];
      EXPECT_GT(step_median, 0) << step;
      EXPECT_LE(step_median, step_p90) << step;
      EXPECT_LE(step_p90, step_p99) << step;
      EXPECT_LE(step_median, median) << step;
      EXPECT_LE(step_p99, p99) << step;
    }
    // ... and B's releases afterwards, outside the share's time: one per share.
    EXPECT_EQ(row.contains("release_median_us"), share);
    EXPECT_EQ(row.contains("release_first_us"), share);
    if (share) {
      EXPECT_GT(row["release_first_us"].get<double>(), 0);
      EXPECT_GT(row["release_median_us"].get<double>(), 0);
      EXPECT_LE(row["release_median_us"].get<double>(), row["release_p99_us"].get<double>());
    }
    // ... and a first get's fresh processes' connects, outside its time.
    bool first = name == "get_first";
    EXPECT_EQ(row.contains("connect_median_us"), first) << name;
    if (first) {
      EXPECT_GT(row["connect_median_us"].get<double>(), 0);
      EXPECT_LE(row["connect_median_us"].get<double>(), row["connect_p99_us"].get<double>());
      EXPECT_NE(row["note"].get<std::string>().find("its Client::Connect before, median"),
                std::string::npos);
    }
  }
  EXPECT_EQ(record["config"]["clients"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(record["config"]["commands_via"], "socket");
  // What it ran against: the Redis server's version, as INFO gives it (7.0.15, say).
  std::string redis_version = record["config"].value("redis_version", "");
  EXPECT_TRUE(!redis_version.empty() &&
              std::isdigit(static_cast<unsigned char>(redis_version[0])) &&
              redis_version.find('.') != std::string::npos)
      << record["config"].dump();
  for (const char* expected : {"redis_rtt", "create", "get_warm", "delete", "get_first",
                               "rtt_first", "share", "share_existing", "create+delete_x1",
                               "create+delete_x2", "copy_from_mapping", "copy_local"}) {
    EXPECT_EQ(seen.count(expected), 1u) << expected;
  }
  // Every row of both sizes: 8 per size, plus the floors, a throughput row per client count and
  // two bandwidth rows (host memory has no bare floor, and one device no cross-device row).
  EXPECT_EQ(record["rows"].size(), 2u + 2 * 8 + 2 + 2);
}

// The self-serve folders (mcd-bench-<pid>-*) in `dir`.
std::vector<std::string> BenchFolders(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string name = entry.path().filename();
    if (name.rfind("mcd-bench-", 0) == 0) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

// A self-serving bench stops its private Redis and server however it ends: on SIGTERM at the
// next operation, exiting 128 + 15; killed outright, they get SIGTERM from the kernel, and the
// next self-serving run removes the folder the killed one left.
TEST(Bench, SelfServeStopsItsRedisAndServerHoweverItEnds) {
  test::TempDir dir;
  // Not a killed run's: a live process's folder and a name of another shape stay.
  std::string live = "mcd-bench-" + std::to_string(getpid()) + "-live00";
  ASSERT_TRUE(std::filesystem::create_directory(dir.path() + "/" + live));
  ASSERT_TRUE(std::filesystem::create_directory(dir.path() + "/mcd-bench-other"));
  const std::vector<std::string> kept = {live, "mcd-bench-other"};
  for (int sig : {SIGTERM, SIGKILL}) {
    SCOPED_TRACE(sig);
    test::Background bench({test::ToolPath("mcd-bench"), "--self-serve", "--cpu", "--sizes", "4KiB",
                            "--iterations", "100000", "--max-seconds", "2", "--clients", "2"},
                           {{"TMPDIR", dir.path()}}, dir.path() + "/bench.log");
    std::vector<pid_t> helpers;  // its redis-server and mcd-serve
    ASSERT_TRUE(test::WaitFor(
        [&] {
          helpers.clear();
          for (pid_t child : test::ChildrenOf(bench.pid())) {
            std::string comm = test::ReadFile("/proc/" + std::to_string(child) + "/comm");
            if (comm == "redis-server\n" || comm == "mcd-serve\n") helpers.push_back(child);
          }
          return helpers.size() == 2;
        },
        20000))
        << test::ReadFile(dir.path() + "/bench.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into the rows
    EXPECT_EQ(bench.Stop(sig), sig == SIGTERM ? 128 + SIGTERM : -SIGKILL);
    for (pid_t helper : helpers) {
      EXPECT_TRUE(test::WaitFor([&] { return !test::Running(helper); }, 10000)) << helper;
    }
    EXPECT_EQ(BenchFolders(dir.path()).size(), kept.size() + (sig == SIGKILL ? 1 : 0));
  }
  auto next = test::Run(
      {test::ToolPath("mcd-bench"), "--self-serve", "--cpu", "--sizes", "4KiB", "--iterations", "5",
       "--max-seconds", "0.2", "--clients", "1", "--fresh", "1", "--json"},
      {{"TMPDIR", dir.path()}}, 120);
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_EQ(BenchFolders(dir.path()), kept);
}

TEST(Bench, BadCountsAreUsageErrorsAndMeasureNothing) {
  for (std::vector<std::string> bad : {std::vector<std::string>{"--clients", "0"},
                                       {"--clients", "2,x"},
                                       {"--clients", "4,"},
                                       {"--clients", "257"},
                                       {"--iterations", "0"},
                                       {"--fresh", "0"},
                                       {"--max-seconds", "0"}}) {
    std::vector<std::string> argv = {test::ToolPath("mcd-bench"), "--self-serve", "--cpu"};
    argv.insert(argv.end(), bad.begin(), bad.end());
    auto run = test::Run(argv, {}, 30);
    SCOPED_TRACE(bad[0] + " " + bad[1]);
    EXPECT_EQ(run.exit_code, 64) << run.err;
    EXPECT_EQ(run.out, "");
    EXPECT_NE(run.err.find(bad[0]), std::string::npos) << run.err;
  }
}

}  // namespace
}  // namespace mcd
