// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The Lua scripts that make every change to a tensor hash atomic with its reply. Each lives in
// its own file under redis/scripts/, with its keys, arguments and answers described at its top;
// the build embeds the files' text here (lib/CMakeLists.txt). Callers build their argv and read
// their replies through script_calls.h.
#pragma once

namespace mcd {

// scripts/commit.lua
extern const char* const kCommitScript;
// scripts/reference.lua
extern const char* const kRefScript;
// scripts/reference_many.lua
extern const char* const kRefManyScript;
// scripts/heartbeat.lua
extern const char* const kHeartbeatScript;
// scripts/forward.lua
extern const char* const kForwardScript;
// scripts/delete_if.lua
extern const char* const kDeleteIfScript;
// scripts/forget_holder.lua
extern const char* const kForgetHolderScript;
// scripts/redeem_grant.lua
extern const char* const kRedeemGrantScript;
// scripts/set_members.lua
extern const char* const kSetMembersScript;

}  // namespace mcd
