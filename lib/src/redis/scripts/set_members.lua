-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- The members of a create_set, taken for the server (SetApplier::ReadMembers): the list is read
-- and deleted in one call, and checked here first, so that the server is sent at most ARGV[1]
-- members of at most ARGV[2] bytes each.
--
-- Called through SetMembersCall / ParseSetMembersReply (redis/script_calls.h).
-- KEYS[1] members, the list (KeySpace::Members). ARGV[1] max_members, ARGV[2] max_bytes.
-- Returns {"ok", {members}} | {"too_many", count} | {"too_large", i, bytes} (the i-th, from 1).
local count = redis.call('LLEN', KEYS[1])
if count > tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return {'too_many', count}
end
local members = redis.call('LRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1])
for i, member in ipairs(members) do
  if #member > tonumber(ARGV[2]) then return {'too_large', i, #member} end
end
return {'ok', members}
