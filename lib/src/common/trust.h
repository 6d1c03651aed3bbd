// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Whom a client trusts to serve it (memcuda(7), TRUST): its own user, root, and the users named
// in MCD_TRUSTED_USERS. A heartbeat, a hash or a reply read from Redis can be written by anyone
// with Redis credentials, so what they name (a socket, a process, a shared-memory object) is
// used only once the kernel says it belongs to one of those users.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "memcuda/status.h"

namespace mcd {

// True when `uid` is trusted. kInvalidArgument when MCD_TRUSTED_USERS names a user that does
// not exist, or is malformed ("alice,1001": names or numbers, comma-separated).
Result<bool> TrustedUid(uid_t uid);

// kOk when the peer of the connected Unix socket `conn` is the server process `server_pid` (as
// its heartbeat names it; 0: any process) running as a trusted user. kPermissionDenied, naming
// who the peer is and how to trust it, otherwise. `what` names the socket in the message.
Status CheckServerPeer(int conn, int64_t server_pid, const std::string& what);

// kOk when `owner` (of the thing `what` names) is a trusted user; kPermissionDenied otherwise.
Status CheckOwner(uid_t owner, const std::string& what);

// kOk when process `pid` runs as a trusted user (the owner of /proc/<pid>).
Status CheckProcessOwner(int64_t pid, const std::string& what);

}  // namespace mcd
