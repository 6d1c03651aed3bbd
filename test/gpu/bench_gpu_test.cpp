// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-bench on a GPU host: the rows that exist only there (the bare floors, the cross-device copy)
// are in the record for both GPU allocators, and --device picks the GPU. Shape and sanity, not
// speed.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace mcd {
namespace {

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

nlohmann::json Bench(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {test::ToolPath("mcd-bench"),
                                   "--self-serve",
                                   "--sizes",
                                   "1MiB,64MiB",
                                   "--iterations",
                                   "12",
                                   "--max-seconds",
                                   "1",
                                   "--clients",
                                   "2",
                                   "--fresh",
                                   "2",
                                   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto run = test::Run(args, {}, 400);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  return run.exit_code == 0 ? nlohmann::json::parse(run.out) : nlohmann::json();
}

// (row, allocator, bytes) -> the row.
std::map<std::tuple<std::string, std::string, uint64_t>, nlohmann::json> ByKey(
    const nlohmann::json& record) {
  std::map<std::tuple<std::string, std::string, uint64_t>, nlohmann::json> rows;
  for (const auto& row : record["rows"]) rows[{row["row"], row["allocator"], row["bytes"]}] = row;
  return rows;
}

TEST(BenchGpu, BareFloorsAndBothShareRowsForEachGpuAllocator) {
  if (!test::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  auto record = Bench({"--only", "cuda_ipc,cuda_mempool"});
  ASSERT_TRUE(record.is_object());
  EXPECT_EQ(record["config"]["device"], 0);
  EXPECT_EQ(record["config"]["gpus"], DeviceCount());
  auto rows = ByKey(record);
  for (const char* kind : {"cuda_ipc", "cuda_mempool"}) {
    for (uint64_t bytes : {1ull << 20, 64ull << 20}) {
      for (const char* name :
           {"get_first", "open_first_bare", "share", "share_existing", "share_bare"}) {
        SCOPED_TRACE(std::string(kind) + " " + name + " " + std::to_string(bytes));
        auto it = rows.find({name, kind, bytes});
        ASSERT_NE(it, rows.end());
        const auto& row = it->second;
        EXPECT_GT(row["n"].get<int>(), 0) << row.dump();
        EXPECT_GT(row["median_us"].get<double>(), 0) << row.dump();
        EXPECT_EQ(row["device"], "0");
      }
      // The bare share's own open is part of its round trip; a memcuda share that hands over an
      // existing tensor times no create, a fresh one does.
      auto row = [&](const char* name) {
        return rows[std::make_tuple(std::string(name), std::string(kind), bytes)];
      };
      std::string bare_note = row("share_bare")["note"];
      EXPECT_NE(bare_note.find("the open alone, median"), std::string::npos) << bare_note;
      EXPECT_FALSE(row("share_existing").contains("create_median_us"));
      EXPECT_TRUE(row("share").contains("create_median_us"));
      std::string first_note = row("open_first_bare")["note"];
      EXPECT_NE(first_note.find("CUDA alone"), std::string::npos) << first_note;
    }
    // Cross-device copies only where there is another GPU to read from.
    EXPECT_EQ(rows.count(std::make_tuple(std::string("copy_cross_device"), std::string(kind),
                                         64ull << 20)),
              DeviceCount() >= 2 ? 1u : 0u);
  }
}

TEST(BenchGpu, DeviceOutOfRangeIsAUsageError) {
  if (!test::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  auto run = test::Run({test::ToolPath("mcd-bench"), "--self-serve", "--device",
                        std::to_string(DeviceCount()), "--sizes", "4KiB"});
  EXPECT_EQ(run.exit_code, 64) << run.err;
  EXPECT_NE(run.err.find("this host has " + std::to_string(DeviceCount()) + " GPU(s)"),
            std::string::npos)
      << run.err;
}

// On a second GPU: the rows run there, and the cross-device copy reads that GPU's tensor from
// GPU 0 at a rate the note states.
TEST(BenchGpu, RowsRunOnTheChosenDeviceWithACrossDeviceCopy) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs";
  auto record = Bench({"--only", "cuda_ipc", "--device", "1"});
  ASSERT_TRUE(record.is_object());
  EXPECT_EQ(record["config"]["device"], 1);
  auto rows = ByKey(record);
  auto share = rows.find({"share", "cuda_ipc", 1ull << 20});
  ASSERT_NE(share, rows.end());
  EXPECT_EQ(share->second["device"], "1");
  for (const char* name : {"copy_cross_device", "copy_cross_local"}) {
    auto it = rows.find({name, "cuda_ipc", 64ull << 20});
    ASSERT_NE(it, rows.end()) << name;
    std::string note = it->second["note"];
    EXPECT_NE(note.find("GPU 1 to GPU 0"), std::string::npos) << note;
    EXPECT_NE(note.find("GB/s (read+write)"), std::string::npos) << note;
    EXPECT_GT(it->second["median_us"].get<double>(), 0);
  }
}

}  // namespace
}  // namespace mcd
