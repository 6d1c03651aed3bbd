-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- Redeems a copy's grant (server/copy_grant.h): takes it out only when it holds what the read
-- says. The key's name is no secret (other Redis users may see it through SCAN), so a read with
-- the right id and a wrong token must not burn the grant. Compared as SHA-1 digests, so that how
-- long the comparison takes tells nothing of the value held.
--
-- KEYS[1] grant, ARGV[1] expected. Returns 1 when the grant is taken out, 0 otherwise.
local held = redis.call('GET', KEYS[1])
if held and redis.sha1hex(held) == redis.sha1hex(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
