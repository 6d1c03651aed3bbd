// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-d3d-probe: proves the GPU worker's graphics-interop lifecycle on this machine and tells an
// operator what is available: D3D11 on Windows, Vulkan external memory on Linux.
// See mcd-d3d-probe(1).
#include <cuda_runtime_api.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "flags.h"
#include "interop/interop.h"

namespace {

nlohmann::json ToJson(const mcd::InteropReport& r) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : r.steps) {
    steps.push_back({{"step", s.name}, {"ok", s.ok}, {"ms", s.ms}, {"detail", s.detail}});
  }
  return {{"api", r.api},       {"available", r.available}, {"passed", r.passed()},
          {"reason", r.reason}, {"device", r.device},       {"steps", steps}};
}

void Print(const mcd::InteropReport& r) {
  std::string label = r.api == "d3d11" ? "D3D11 interop " : "Vulkan interop";
  if (!r.available) {
    std::cout << label << "  unavailable: " << r.reason << "\n";
    return;
  }
  std::cout << label << "  " << (r.passed() ? "PASS" : "FAIL") << " on " << r.device << "\n";
  for (const auto& s : r.steps) {
    char ms[32];
    std::snprintf(ms, sizeof(ms), "%9.3f ms", s.ms);
    std::cout << "  " << (s.ok ? "ok  " : "FAIL") << " " << ms << "  " << s.name
              << (s.detail.empty() ? "" : " (" + s.detail + ")") << "\n";
  }
}

}  // namespace

static int ToolMain(int argc, char** argv) {
  using namespace mcd;
  CLI::App app{"mcd-d3d-probe: check the GPU worker's graphics <-> CUDA interop on this machine"};
  tools::SetupApp(app);
  app.footer(
      "Runs, on the GPU worker of the device: D3D11 (Windows) and Vulkan external memory (Linux):\n"
      "create a shared resource, import it into CUDA, write from CUDA and read back from the\n"
      "graphics API (and the reverse for Vulkan), verify every byte, release in order.\n"
      "Exit codes: 0 every available path passed, 69 no path available, 70 a path failed,\n"
      "64 usage.");
  std::string device_text = "0", size_text = "16MiB";
  bool json_out = false;
  app.add_option("--device", device_text, "CUDA device to probe")->capture_default_str();
  app.add_option("--bytes", size_text, "Size of the shared buffer")->capture_default_str();
  app.add_flag("--json", json_out, "Print the report as JSON");
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  auto device = ParseDevice(device_text);
  if (!device.ok() || device.value() == kHostDevice) {
    return tools::Fail("mcd-d3d-probe",
                       Status(ErrorCode::kInvalidArgument, "--device must be a GPU ordinal"));
  }
  auto bytes = tools::ParseSize(size_text);
  if (!bytes.ok() || bytes.value() == 0)
    return tools::Fail("mcd-d3d-probe", Status(ErrorCode::kInvalidArgument, "bad --bytes"));

  nlohmann::json cuda = {{"device", device.value()}};
  int driver = 0;
  cudaDeviceProp prop{};
  GpuWorker worker(device.value());
  Status gpu = worker.Call([&](DeviceContext& ctx) -> Status {
    Status s = ctx.EnsureGpu();
    if (s.ok()) {
      cudaGetDeviceProperties(&prop, ctx.device());
      cudaDriverGetVersion(&driver);
    }
    return s;
  });
  cuda["available"] = gpu.ok();
  if (gpu.ok()) {
    cuda["name"] = prop.name;
    cuda["driver"] = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  } else {
    cuda["reason"] = gpu.message();
  }
  InteropReport d3d11 = ProbeD3D11Interop(worker, bytes.value());
  InteropReport vulkan = ProbeVulkanInterop(worker, bytes.value());
  worker.Stop();

  bool any = d3d11.available || vulkan.available;
  bool failed = (d3d11.available && !d3d11.passed()) || (vulkan.available && !vulkan.passed());
  if (json_out) {
    nlohmann::json out = {{"cuda", cuda},
                          {"d3d11", ToJson(d3d11)},
                          {"vulkan", ToJson(vulkan)},
                          {"passed", any && !failed}};
    std::cout << out.dump(1) << "\n";
  } else {
    if (gpu.ok()) {
      std::cout << "CUDA device    " << device.value() << ": " << prop.name << ", driver "
                << cuda["driver"].get<std::string>() << "\n";
    } else {
      std::cout << "CUDA device    unavailable: " << gpu.message() << "\n";
    }
    Print(d3d11);
    Print(vulkan);
  }
  if (failed) return 70;
  return any ? 0 : 69;
}

int main(int argc, char** argv) {
  return mcd::tools::Guarded("mcd-d3d-probe", ToolMain, argc, argv);
}
