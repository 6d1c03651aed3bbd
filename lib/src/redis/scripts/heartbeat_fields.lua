-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- The heartbeat fields that scripts read (heartbeat.lua, reference.lua), named once for Lua.
-- The other side is the heartbeat's codec, which names every field once in C++
-- (memcuda/heartbeat.h, HeartbeatFields / HeartbeatFromFields in
-- lib/src/protocol/heartbeat_record.cpp): a field renamed there is renamed here.
local HB_INSTANCE, HB_PID, HB_PID_START, HB_PID_SPACE, HB_NODE = 'instance', 'pid', 'pid_start',
  'pid_space', 'node'
local HB_SETTLED, HB_EVENT_HISTORY = 'settled', 'event_history'
