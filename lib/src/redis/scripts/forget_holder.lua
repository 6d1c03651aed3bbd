-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- Forgets a holder that died, once nothing of it is left (holders.lua). Each tensor of its set
-- whose hash no longer names it (its references given back, the hash gone, or another
-- instance's) leaves the set; when none is left, the holder leaves the node's set of holders.
-- Both in one call: a get that bound a reference to the holder after the server read its set
-- (a get on its way when the holder died) is found here, and the holder stays for the server's
-- next round, which gives that reference back too. Forgotten any other way, its hash would keep
-- a field that no set leads the server to, and mcd_hold, which adds to the sets only at a
-- holder's first reference to a tensor, would never put it back.
-- KEYS[1] holders, the node's set, KEYS[2] held, the holder's set of tensors.
-- ARGV[1] holder ("PID:START"), ARGV[2] instance, the server's.
-- Called through ForgetHolderCall / ParseForgetHolderReply (redis/script_calls.h).
-- Returns how many tensors of the instance still name the holder (0: it is forgotten).
local field = 'holder:' .. ARGV[1]
local left = 0
for _, tensor in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local f = redis.pcall('HMGET', tensor, field, 'owner')  -- an error: not a hash, names nobody
  if type(f) == 'table' and f[1] and f[2] == ARGV[2] then
    left = left + 1
  else
    redis.call('SREM', KEYS[2], tensor)
  end
end
if left == 0 then redis.call('SREM', KEYS[1], ARGV[1]) end
return left
