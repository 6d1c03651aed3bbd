// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The answer to a release by a process that holds none of a tensor's references, where every
// one is another process's, or (`own_only`) to the release of a reference the client took, whose
// holder holds none any more (holders.lua): the server's and the reference script's alike.
#pragma once

#include <string>

#include "memcuda/status.h"

namespace mcd {

inline Status NotHeldStatus(const std::string& name, bool own_only = false) {
  if (own_only) {
    return Status(ErrorCode::kNotHeld,
                  "this process holds no reference to tensor '" + name +
                      "' any more: the one this client took was given back by another client "
                      "of the process (another connection, or an mcd-rm it ran); the rest are not "
                      "its to give back");
  }
  return Status(ErrorCode::kNotHeld,
                "every reference to tensor '" + name +
                    "' is held by another process, none by this one or by nobody; mcd-ls -l "
                    "shows the holders");
}

}  // namespace mcd
