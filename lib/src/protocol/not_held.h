// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The answer to a release that finds no reference it may give back (holders.lua): the server's
// and the reference script's alike. `of`: what the releasing client had, as its mode said: any
// (a tool's release for its parent: every reference is another process's), one it took (its
// holder holds none any more), one bound to nobody (a creator's, or a release without a holder:
// none is left).
#pragma once

#include <string>

#include "memcuda/status.h"

namespace mcd {

enum class NotHeldFor { kAny, kTaken, kUnbound };

inline Status NotHeldStatus(const std::string& name, NotHeldFor of = NotHeldFor::kAny) {
  switch (of) {
    case NotHeldFor::kTaken:
      return Status(ErrorCode::kNotHeld,
                    "the reference to tensor '" + name +
                        "' that this client took was given back already, by another party bound "
                        "to this process (another connection, or an mcd-rm it ran); the rest are "
                        "not this client's to give back");
    case NotHeldFor::kUnbound:
      return Status(ErrorCode::kNotHeld,
                    "no reference to tensor '" + name +
                        "' bound to no process (a creator's, or one taken --detached) is left: "
                        "the rest are held by processes, which give them back themselves; mcd-ls "
                        "-l shows them");
    case NotHeldFor::kAny:
      break;
  }
  return Status(ErrorCode::kNotHeld,
                "every reference to tensor '" + name +
                    "' is held by another process, none by this one or by nobody; mcd-ls -l "
                    "shows the holders");
}

}  // namespace mcd
