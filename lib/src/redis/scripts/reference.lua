-- Reference counting done by clients directly, without the server: a get, or a release that is
-- not the last one. The last release must go through the server, which frees the memory: a
-- release names its delete command, and the script queues it in that case.
--
-- KEYS[1] tensor hash, KEYS[2] the heartbeat of the client's node; a release also KEYS[3] the
-- command queue and KEYS[4] the reply list of its delete command's req.
-- ARGV[1] delta: "1" (get) or "-1" (release), ARGV[2] the client's node, ARGV[3] (release) the
-- delete command, ARGV[4] (release) the reply list's TTL (s), ARGV[5..] hash fields to return.
-- A release that is answered here also pushes an empty marker onto its reply list, so that the
-- BLPOP the client sends right behind the script returns at once whatever happened.
-- Returns {"ok", {values}} | {"missing"} | {"not_ready", state} | {"wrong_node", node} |
-- {"gone"} (the owning server instance is not alive) | {"queued"} (a release of the last
-- reference: its delete command is on the queue, and the server's reply will follow).
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
