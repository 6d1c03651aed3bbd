// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What each module of the server is given of its options: the module's own options struct,
// filled from ServerOptions. The one private header of the server that reads ServerOptions, used
// by server.cpp where it builds the modules (and by the tests that build them the same way). Any
// thread; pure functions.
#pragma once

#include "memcuda/server.h"
#include "server/commit_pipeline.h"
#include "server/copy_grant.h"
#include "server/device_set.h"
#include "server/heartbeat.h"
#include "server/node_copy.h"
#include "server/reaper.h"
#include "server/resettle.h"

namespace mcd {

CommitOptions CommitOptionsOf(const ServerOptions& opt);
CopyGrantsOptions CopyGrantsOptionsOf(const ServerOptions& opt);
DeviceSetOptions DeviceSetOptionsOf(const ServerOptions& opt);
HeartbeatOptions HeartbeatOptionsOf(const ServerOptions& opt);
NodeCopierOptions NodeCopierOptionsOf(const ServerOptions& opt);
ReaperOptions ReaperOptionsOf(const ServerOptions& opt);
ResettleOptions ResettleOptionsOf(const ServerOptions& opt);

}  // namespace mcd
