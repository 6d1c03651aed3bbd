// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What --version says: this build and the driver of this machine. Private to libmemcuda; the C
// ABI's mcd_version_info() hands it out.
#pragma once

#include <string>

namespace mcd {

// "memcuda 0.1.0 (git 1a2b3c4; built with CUDA runtime 13.0; driver: CUDA 13.0, NVIDIA
// 580.159.04)". Asks the driver its version (no context is made), so: not on a hot path.
std::string VersionInfo();

}  // namespace mcd
