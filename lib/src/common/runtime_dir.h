// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The per-user runtime folder: $XDG_RUNTIME_DIR/memcuda when that is a writable folder, else
// /tmp/memcuda-<uid>. The server's sockets and a private Redis live there, so it must be this
// user's alone: another local user who made /tmp/memcuda-<uid> first would otherwise see and
// steer everything in it.
#pragma once

#include <string>

#include "memcuda/status.h"

namespace mcd {

// Its path, whether or not it exists.
std::string RuntimeDir();
// The folder, made (mode 0700) when missing, then checked with CheckOwnFolder.
Result<std::string> OwnRuntimeDir();
// kOk when `dir` is a folder (not a link) of this user that nobody else may enter or change;
// kPermissionDenied, saying what is wrong and what to do, otherwise.
Status CheckOwnFolder(const std::string& dir);
// Where `mcd-serve --spawn-redis` puts its Redis's socket, which the tools find with no URL set.
std::string PrivateRedisSocketPath();

}  // namespace mcd
