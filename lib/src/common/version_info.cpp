// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "common/version_info.h"

#include <cuda_runtime_api.h>

#include <fstream>
#include <sstream>

#include "git_revision.h"  // generated at every build: MCD_GIT_REVISION

namespace mcd {
namespace {

std::string CudaVersionText(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The NVIDIA kernel module's version, from /proc/driver/nvidia/version ("" without one).
std::string NvidiaModuleVersion() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string word;
  while (in >> word) {
    bool dotted = word.find('.') != std::string::npos &&
                  word.find_first_not_of("0123456789.") == std::string::npos;
    if (dotted) return word;
  }
  return "";
}

}  // namespace

std::string VersionInfo() {
  std::string text = std::string("memcuda ") + MCD_VERSION + " (git " + MCD_GIT_REVISION +
                     "; built with CUDA runtime " + CudaVersionText(CUDART_VERSION) + "; driver: ";
  int driver = 0;
  std::string module = NvidiaModuleVersion();
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    text += "CUDA " + CudaVersionText(driver) + (module.empty() ? "" : ", NVIDIA " + module);
  } else {
    text += module.empty() ? "no NVIDIA driver" : "NVIDIA " + module + " (CUDA not usable)";
  }
  return text + ")";
}

}  // namespace mcd
