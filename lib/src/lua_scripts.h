// The Lua scripts that make every change to a tensor hash atomic with its reply.
#pragma once

namespace mcd {

// Commit: applies one command's effect, writes its reply and removes it from the processing
// list, all at once, so no reader sees half a change and no command is applied twice.
//
// KEYS[1] tensor hash, KEYS[2] processing list, KEYS[3] reply list, KEYS[4] first-result key
// ARGV[1] the raw command (LREM'ed from the processing list; "" for internal actions)
// ARGV[2] reply JSON, ARGV[3] reply TTL (s), ARGV[4] first-result TTL (s)
// ARGV[5] "1" when the command has a req (reply + first-result are written)
// ARGV[6] precondition: "none" | "absent" (no such hash) | "match" (owner/refcount/state below)
// ARGV[7] owner, ARGV[8] refcount, ARGV[9] state  (for "match")
// ARGV[10] action: "none" | "hset" (pairs from ARGV[11]) | "del"
// Returns {"ok"} | {"dup", first_reply} | {"conflict"}.
inline constexpr const char* kCommitScript = R"lua(
if ARGV[5] == '1' then
  local first = redis.call('GET', KEYS[4])
  if first then
    redis.call('RPUSH', KEYS[3], first)
    redis.call('EXPIRE', KEYS[3], ARGV[3])
    redis.call('LREM', KEYS[2], 1, ARGV[1])
    return {'dup', first}
  end
end
local pre = ARGV[6]
if pre == 'absent' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {'conflict'} end
elseif pre == 'match' then
  local f = redis.call('HMGET', KEYS[1], 'owner', 'refcount', 'state')
  if f[1] ~= ARGV[7] or f[2] ~= ARGV[8] or f[3] ~= ARGV[9] then return {'conflict'} end
end
local action = ARGV[10]
if action == 'hset' then
  redis.call('HSET', KEYS[1], unpack(ARGV, 11))
elseif action == 'del' then
  redis.call('DEL', KEYS[1])
end
if ARGV[5] == '1' then
  redis.call('SET', KEYS[4], ARGV[2], 'EX', ARGV[4])
  redis.call('RPUSH', KEYS[3], ARGV[2])
  redis.call('EXPIRE', KEYS[3], ARGV[3])
end
if ARGV[1] ~= '' then redis.call('LREM', KEYS[2], 1, ARGV[1]) end
return {'ok'}
)lua";

}  // namespace mcd
