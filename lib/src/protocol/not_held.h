// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The answer to a release by a process that holds none of a tensor's references, where every
// one is another process's (holders.lua): the server's and the reference script's alike.
#pragma once

#include <string>

#include "memcuda/status.h"

namespace mcd {

inline Status NotHeldStatus(const std::string& name) {
  return Status(ErrorCode::kNotHeld,
                "every reference to tensor '" + name +
                    "' is held by another process, none by this one or by nobody; mcd-ls -l "
                    "shows the holders");
}

}  // namespace mcd
