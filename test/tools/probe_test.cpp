// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-d3d-probe without a GPU: every path "unavailable", exit 69 (gpu/probe_gpu_test.cpp: with
// one).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace mcd {
namespace {

TEST(Probe, WithoutAGpuEveryPathIsUnavailable) {
  if (test::HasCudaDevice()) GTEST_SKIP() << "this machine has a GPU: ProbeGpu covers it";
  auto run = test::Run({test::ToolPath("mcd-d3d-probe")});
  EXPECT_EQ(run.exit_code, 69) << run.out << run.err;
  EXPECT_NE(run.out.find("D3D11 interop   unavailable: Direct3D 11 exists on Windows only"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("Vulkan interop  unavailable"), std::string::npos) << run.out;
  auto json = test::Run({test::ToolPath("mcd-d3d-probe"), "--json"});
  EXPECT_EQ(json.exit_code, 69);
  auto report = nlohmann::json::parse(json.out);
  EXPECT_EQ(report["passed"], false);
  EXPECT_EQ(report["vulkan"]["available"], false);
  EXPECT_FALSE(report["vulkan"]["reason"].get<std::string>().empty());
  EXPECT_EQ(test::Run({test::ToolPath("mcd-d3d-probe"), "--device", "cpu"}).exit_code, 64);
}

}  // namespace
}  // namespace mcd
