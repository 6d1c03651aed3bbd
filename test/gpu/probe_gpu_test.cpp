// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-d3d-probe on a GPU host: the Linux (Vulkan external memory) path passes every step.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace mcd {
namespace {

TEST(ProbeGpu, VulkanInteropPassesEveryStep) {
  if (!test::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  auto run = test::Run({test::ToolPath("mcd-d3d-probe"), "--json"});
  auto report = nlohmann::json::parse(run.out);
  if (!report["vulkan"]["available"].get<bool>()) {
    GTEST_SKIP() << "no Vulkan on this GPU host: " << report["vulkan"]["reason"];
  }
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(report["vulkan"]["passed"], true) << run.out;
  EXPECT_EQ(report["vulkan"]["steps"].size(), 10u) << run.out;  // 3 to find Vulkan, 7 of interop
  for (const auto& step : report["vulkan"]["steps"])
    EXPECT_TRUE(step["ok"].get<bool>()) << step.dump();
}

}  // namespace
}  // namespace mcd
