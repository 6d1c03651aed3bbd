// The Lua scripts that make every change to a tensor hash atomic with its reply.
#pragma once

namespace mcd {

// Commit: applies one command's effect, writes its reply and removes it from the processing
// list, all at once, so no reader sees half a change and no command is applied twice.
//
// KEYS[1] tensor hash, KEYS[2] processing list, KEYS[3] reply list, KEYS[4] first-result key
// ARGV[1] the raw command (LREM'ed from the processing list, searched from its tail, where the
// oldest commands are and commits happen oldest first; "" for internal actions and commands
// that came on the command socket, whose LREM then finds nothing, or an empty command that a
// client pushed, which is junk either way)
// ARGV[2] reply JSON (for "incr": the part before the new refcount)
// ARGV[3] reply TTL (s), ARGV[4] first-result TTL (s)
// ARGV[5] "1" when the command has a req (reply + first-result are written)
// ARGV[6] precondition: "none" | "absent" (no such hash) | "mine" (state ready, owner ARGV[7])
// ARGV[7] owner
// ARGV[8] action: "none" | "hset" (pairs from ARGV[9]) | "del" | "incr" (below)
// incr (needs "mine"): ARGV[9] delta, ARGV[10] reply tail while referenced, ARGV[11] reply tail
// when freed; at refcount <= 0 the hash is deleted (the caller then frees the memory).
// Returns {"ok"} | {"ok", refcount} (incr) | {"dup", first_reply} | {"conflict"}.
//
// Redis does not undo a script's writes when a later command of it fails, so the reply is
// written first: a write that Redis refuses (out of memory under maxmemory, a reply key of
// another type) then fails the commit before anything has changed, and once one write has gone
// through Redis lets the others through too.
inline constexpr const char* kCommitScript = R"lua(
if ARGV[5] == '1' then
  local first = redis.call('GET', KEYS[4])
  if first then
    redis.call('RPUSH', KEYS[3], first)
    redis.call('EXPIRE', KEYS[3], ARGV[3])
    redis.call('LREM', KEYS[2], -1, ARGV[1])
    return {'dup', first}
  end
end
local pre = ARGV[6]
local refcount
if pre == 'absent' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {'conflict'} end
elseif pre == 'mine' then
  local f = redis.call('HMGET', KEYS[1], 'state', 'owner', 'refcount')
  if f[1] ~= 'ready' or f[2] ~= ARGV[7] then return {'conflict'} end
  refcount = 0  -- a missing field counts as 0, and one that is not a number is refused, as HINCRBY does
  if f[3] then
    refcount = tonumber(f[3])
    if not refcount then return redis.error_reply('ERR hash value is not an integer') end
  end
end
local action = ARGV[8]
local reply = ARGV[2]
local result = {'ok'}
if action == 'incr' then
  local n = refcount + tonumber(ARGV[9])
  if n <= 0 then
    reply = reply .. '0' .. ARGV[11]
  else
    reply = reply .. n .. ARGV[10]
  end
  result = {'ok', n}
end
if ARGV[5] == '1' then
  redis.call('RPUSH', KEYS[3], reply)
  redis.call('EXPIRE', KEYS[3], ARGV[3])
  redis.call('SET', KEYS[4], reply, 'EX', ARGV[4])
end
if action == 'hset' then
  redis.call('HSET', KEYS[1], unpack(ARGV, 9))
elseif action == 'del' or (action == 'incr' and result[2] <= 0) then
  redis.call('DEL', KEYS[1])
elseif action == 'incr' then
  redis.call('HINCRBY', KEYS[1], 'refcount', ARGV[9])
end
redis.call('LREM', KEYS[2], -1, ARGV[1])
return result
)lua";

// Reference counting done by clients directly, without the server: a get, or a release that is
// not the last one. The last release must go through the server, which frees the memory: a
// release names its delete command, and the script queues it in that case.
//
// KEYS[1] tensor hash, KEYS[2] the heartbeat of the client's node; a release also KEYS[3] the
// command queue and KEYS[4] the reply list of its delete command's req.
// ARGV[1] delta: "1" (get) or "-1" (release), ARGV[2] the client's node, ARGV[3] (release) the
// delete command, ARGV[4] (release) the reply list's TTL (s), ARGV[5..] hash fields to return.
// A release that is answered here also pushes an empty marker onto its reply list, so that the
// BLPOP the client sends right behind the script returns at once whatever happened.
// Returns {"ok", {values}} | {"missing"} | {"not_ready", state} | {"wrong_node", node} |
// {"gone"} (the owning server instance is not alive) | {"queued"} (a release of the last
// reference: its delete command is on the queue, and the server's reply will follow).
inline constexpr const char* kRefScript = R"lua(
local release = ARGV[1] == '-1'
local function answer(out)
  if release then
    redis.call('RPUSH', KEYS[4], '')
    redis.call('EXPIRE', KEYS[4], ARGV[4])
  end
  return out
end
local f = redis.call('HMGET', KEYS[1], 'state', 'owner', 'refcount', 'node')
if not f[1] then return answer({'missing'}) end
if f[4] ~= ARGV[2] then return answer({'wrong_node', f[4]}) end
if f[1] ~= 'ready' then return answer({'not_ready', f[1]}) end
if redis.call('HGET', KEYS[2], 'instance') ~= f[2] then return answer({'gone'}) end
if release and tonumber(f[3]) <= 1 then
  redis.call('LPUSH', KEYS[3], ARGV[3])
  return {'queued'}
end
redis.call('HINCRBY', KEYS[1], 'refcount', ARGV[1])
return answer({'ok', redis.call('HMGET', KEYS[1], unpack(ARGV, 5))})
)lua";

// The node's heartbeat, written by one server instance only: the first write claims the node,
// so two servers started at once for one node cannot both serve it, and a server that was not
// heard from for longer than the TTL finds, when it wakes, that another one took the node over.
//
// KEYS[1] the heartbeat hash
// ARGV[1] this instance, ARGV[2] an instance it may replace (one whose process is gone; "" for
// none), ARGV[3] TTL (s), ARGV[4..] field/value pairs to write (instance among them).
// Returns {"ok"} | {"held", instance, pid}: another instance holds the node.
//
// The HSET is the first write, so that Redis out of memory refuses the heartbeat (a script's
// later writes are let through); the fields of a replaced instance are removed after it.
inline constexpr const char* kHeartbeatScript = R"lua(
local holder = redis.call('HGET', KEYS[1], 'instance')
if holder and holder ~= ARGV[1] and holder ~= ARGV[2] then
  return {'held', holder, redis.call('HGET', KEYS[1], 'pid') or ''}
end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
if holder ~= ARGV[1] then
  local written = {}
  for i = 4, #ARGV, 2 do written[ARGV[i]] = true end
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if not written[field] then redis.call('HDEL', KEYS[1], field) end
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {'ok'}
)lua";

// Deletes KEYS[1], a hash, only while its field ARGV[1] holds ARGV[2]: a stopping server removes
// only the hashes that are still its own. Returns the number of keys deleted.
inline constexpr const char* kDeleteIfScript = R"lua(
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('DEL', KEYS[1]) end
return 0
)lua";

}  // namespace mcd
