-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- Deletes KEYS[1] key, a hash, only while its field ARGV[1] field holds ARGV[2] value, and then
-- appends the event that says so to the stream KEYS[2] events (events.lua): a stopping server
-- removes only the hashes and the heartbeat that are still its own, a starting one the hashes of a
-- dead instance. ARGV[3] event_cap, the stream's cap, ARGV[4] event, ARGV[5] name, the tensor's
-- ("" for a server event), ARGV[6] node, ARGV[7] pid, ARGV[8] reason. Returns the number of keys
-- deleted. Called through DeleteIfCall / ParseDeleteIfReply (redis/script_calls.h).
-- A tensor still "creating" goes without an event: no event names a tensor before its publish.
-- A member of a tensor set (ARGV[9] the set, KEYS[3] its list and KEYS[4] its record, when the
-- caller names them) leaves the list and the record with its hash, as in commit.lua, while its
-- hash still names that set.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
local f = redis.call('HMGET', KEYS[1], 'state', 'set')
local state = f[1]
redis.call('DEL', KEYS[1])
if #KEYS == 4 and f[2] == ARGV[9] then
  redis.call('LREM', KEYS[3], 0, KEYS[1])
  redis.call('HDEL', KEYS[4], ARGV[5])
end
if state ~= 'creating' then
  mcd_event(KEYS[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], 0, ARGV[7], ARGV[8])
end
return 1
