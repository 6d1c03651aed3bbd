// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// CopyService in a build without UCX: copies between nodes are refused with a clear error.
#include "server/copy_service.h"

namespace mcd {

Result<std::unique_ptr<CopyService>> CopyService::Start(std::function<void()>) {
  return Status(
      ErrorCode::kUnsupported,
      "this mcd-serve was built without UCX (libucx-dev), so it cannot copy between nodes");
}

}  // namespace mcd
