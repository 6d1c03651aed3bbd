-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- The node's heartbeat, written by one server instance only: the first write claims the node,
-- so two servers started at once for one node cannot both serve it, and a server that was not
-- heard from for longer than the TTL finds, when it wakes, that another one took the node over.
--
-- KEYS[1] the heartbeat hash, KEYS[2] the event stream (events.lua)
-- ARGV[1] this instance, ARGV[2] an instance it may replace (one whose process is gone; "" for
-- none), ARGV[3] TTL (s), ARGV[4] the event stream's cap, ARGV[5] "1" when this instance held
-- the node before, ARGV[6..] field/value pairs to write (instance, node and pid among them), as
-- the heartbeat's codec makes them (HeartbeatFields); the fields it reads itself are named in
-- heartbeat_fields.lua.
-- The write that finds the node's heartbeat missing or another's is a "server_start" event: the
-- instance's first (reason "took_over" when it replaces `ARGV[2]`), or, reason "reclaimed", one
-- after its heartbeat expired (the server was not heard from for the TTL: a stalled machine)
-- or Redis lost it.
-- Returns {"ok"} | {"held", instance, pid, pid_start, pttl, pid_space}: another instance holds
-- the node (pttl -1: the hash has no expiry, so no server wrote it).
--
-- The HSET is the first write, so that Redis out of memory refuses the heartbeat (a script's
-- later writes are let through); the fields of a replaced instance are removed after it.
local holder = redis.call('HGET', KEYS[1], HB_INSTANCE)
if holder and holder ~= ARGV[1] and holder ~= ARGV[2] then
  local f = redis.call('HMGET', KEYS[1], HB_PID, HB_PID_START, HB_PID_SPACE)
  return {'held', holder, f[1] or '', f[2] or '', redis.call('PTTL', KEYS[1]), f[3] or ''}
end
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
if holder ~= ARGV[1] then
  local written = {}
  for i = 6, #ARGV, 2 do written[ARGV[i]] = ARGV[i + 1] end
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if not written[field] then redis.call('HDEL', KEYS[1], field) end
  end
  local reason = ''
  if holder and holder == ARGV[2] then
    reason = 'took_over'
  elseif ARGV[5] == '1' then
    reason = 'reclaimed'
  end
  mcd_event(KEYS[2], ARGV[4], 'server_start', '', written[HB_NODE] or '', 0, written[HB_PID] or 0,
            reason)
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {'ok'}
