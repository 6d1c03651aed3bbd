// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Unix stream sockets between the server and the processes of its machine: binding one that
// only allowed processes may use, and connecting to one. Private to libmemcuda.
#pragma once

#include <sys/types.h>

#include <string>

#include "memcuda/status.h"
#include "memcuda/unique_fd.h"

namespace mcd {

// Who may use a socket of the server: processes of the same user and root, plus members of
// `group` when set.
struct PeerPolicy {
  uid_t uid = 0;
  gid_t group = static_cast<gid_t>(-1);  // -1: no group
};

// Binds and listens on `path` (an old file there is replaced), readable and writable by the
// user only, or by the user and `policy.group`. Returns the listening descriptor (close-on-exec).
Result<UniqueFd> ListenUnix(const std::string& path, const PeerPolicy& policy, int backlog);

// True when the peer of connection `conn` is allowed by `policy` (SO_PEERCRED); `who` says who
// it is ("pid P uid U"), for the log.
bool PeerAllowed(int conn, const PeerPolicy& policy, std::string& who);

// Connects to the socket at `path`, with `timeout_ms` as the send and receive timeout.
// kPermissionDenied when the socket refuses this user, kUnavailable when nobody listens there.
// `what` names the socket in errors ("pool socket").
Result<UniqueFd> ConnectUnix(const std::string& path, int timeout_ms, const std::string& what);

}  // namespace mcd
