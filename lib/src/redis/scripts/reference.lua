-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- Reference counting done by clients directly, without the server: a get, or a release that is
-- not the last one. The last release must go through the server, which frees the memory: a
-- release names its delete command, and the script queues it in that case.
--
-- Called through ReferenceCall / ParseReferenceReply (redis/script_calls.h), whose
-- ReferenceArgs fields carry the names below.
-- KEYS[1] tensor (the hash), KEYS[2] heartbeat, the client's node's, KEYS[3] holders, the node's
-- set, KEYS[4] held, the holder's set of tensors (<prefix>:- when ARGV[3] is ""), KEYS[5] events,
-- the stream (events.lua; its cap is the heartbeat's event_history); a release also KEYS[6]
-- queue, the command queue, and KEYS[7] reply_list, its delete command's req's.
-- ARGV[1] delta: "1" (get) or "-1" (release), ARGV[2] node, the client's, ARGV[3] holder
-- ("PID:START", holders.lua; "" for a reference bound to nobody), ARGV[4] pid, the one the event
-- names, ARGV[5] name, the tensor's, ARGV[6] (release) delete_command, ARGV[7] (release)
-- marker_ttl_s, the reply list's TTL, ARGV[8] (release) epoch, the hash's when the reference
-- was taken ("*": not known), ARGV[9] (release) mode, which reference the client gives back
-- ('own', 'unbound' or 'any': mcd_releasable), ARGV[10..] fields, the hash's to return.
-- A release that is answered here also pushes an empty marker onto its reply list, so that the
-- BLPOP the client sends right behind the script returns at once whatever happened.
-- Returns {"ok", {values}} | {"missing", instance, settled} (the heartbeat's, "" without one:
-- the client tells a tensor that is not there from one its server has not put back yet after a
-- Redis restart) | {"not_ready", state} | {"wrong_node", node} |
-- {"gone"} (the owning server instance is not alive) | {"not_held"} (a release by a holder
-- that holds none, of a tensor whose references are all other processes') | {"forgotten",
-- {values}} (a release of a reference taken before the server put the hash back after Redis
-- lost it: the hash does not count it, so nothing is given back) | {"queued"} (a
-- release of the last reference: its delete command is on the queue, and the server's reply
-- will follow).
local release = ARGV[1] == '-1'
local holder = ARGV[3]
local function answer(out)
  if release then
    redis.call('RPUSH', KEYS[7], '')
    redis.call('EXPIRE', KEYS[7], ARGV[7])
  end
  return out
end
local f = redis.call('HMGET', KEYS[1], 'state', 'owner', 'refcount', 'node', 'epoch')
if not f[1] then
  local hb = redis.call('HMGET', KEYS[2], HB_INSTANCE, HB_SETTLED)
  return answer({'missing', hb[1] or '', hb[2] or ''})
end
if f[4] ~= ARGV[2] then return answer({'wrong_node', f[4]}) end
if f[1] ~= 'ready' then return answer({'not_ready', f[1]}) end
local server = redis.call('HMGET', KEYS[2], HB_INSTANCE, HB_EVENT_HISTORY)
if server[1] ~= f[2] then return answer({'gone'}) end
if release and ARGV[8] ~= '*' and ARGV[8] ~= (f[5] or '') then
  return answer({'forgotten', redis.call('HMGET', KEYS[1], unpack(ARGV, 10))})
end
local own = not release
if release then
  local which = mcd_releasable(KEYS[1], holder, tonumber(f[3]), ARGV[9])
  if not which then return answer({'not_held'}) end
  if tonumber(f[3]) <= 1 then
    redis.call('LPUSH', KEYS[6], ARGV[6])
    return {'queued'}
  end
  own = which == 'own'
end
redis.call('HINCRBY', KEYS[1], 'refcount', ARGV[1])
if own and holder ~= '' then mcd_hold(KEYS[1], KEYS[3], KEYS[4], holder, tonumber(ARGV[1])) end
mcd_event(KEYS[5], server[2], release and 'release' or 'get', ARGV[5], ARGV[2],
          tonumber(f[3]) + tonumber(ARGV[1]), ARGV[4], '')
return answer({'ok', redis.call('HMGET', KEYS[1], unpack(ARGV, 10))})
