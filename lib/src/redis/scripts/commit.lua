-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- Commit: applies one command's effect, writes its reply and removes it from the processing
-- list, all at once, so no reader sees half a change and no command is applied twice.
--
-- Its call is built and its reply read by CommitCall / ParseCommitReply (redis/script_calls.h),
-- whose CommitArgs fields carry the names below.
-- KEYS[1] tensor (the hash), KEYS[2] processing (the list), KEYS[3] reply_list, KEYS[4]
-- first_result, KEYS[5] holders (the node's set), KEYS[6] held (the holder's set of tensors,
-- holders.lua; <prefix>:- for actions without a holder), KEYS[7] events (the stream, events.lua)
-- ARGV[1] raw: the command (LREM'ed from the processing list, searched from its tail, where the
-- oldest commands are and commits happen oldest first; "" for internal actions and commands
-- that came on the command socket, whose LREM then finds nothing, or an empty command that a
-- client pushed, which is junk either way)
-- ARGV[2] reply: the reply JSON (for "incr": the part before the new refcount)
-- ARGV[3] reply_ttl_s, ARGV[4] first_result_ttl_s
-- ARGV[5] has_req: "1" when the command has a req (reply + first result are written)
-- ARGV[6] pre, the precondition: "none" | "absent" (no such hash) | "mine" (state ready, owner
-- ARGV[7]) | "creating" (state creating, owner ARGV[7]: a tensor its creator is still filling)
-- ARGV[7] owner
-- ARGV[8] action: "none" | "hset" (fields from ARGV[15]) | "del" | "incr" | "unhold" (below)
-- ARGV[9] event_cap, the event stream's cap, ARGV[10] event, the event the change makes: ""
-- (none) | "create" | "ref" (an incr: "get", "release", or "delete" when it frees the tensor) |
-- "reclaim"; ARGV[11] name (the tensor's), ARGV[12] node, ARGV[13] pid, the one it is about,
-- ARGV[14] reason.
-- hset: ARGV[15..] fields, field/value pairs.
-- incr (needs "mine"): ARGV[15] holder ("PID:START", or "" for a reference bound to nobody),
-- ARGV[16] delta, ARGV[17] held_tail, the reply's tail while referenced, ARGV[18] freed_tail,
-- its tail when freed, ARGV[19] own_only: "1" for a delete of a reference its client took,
-- bound to the holder. A get takes a reference of the holder; a delete gives back the holder's
-- own if it holds one, else (not own_only) one bound to nobody, and answers "not_held" when
-- every reference is another process's.
-- unhold (needs "mine"): ARGV[15] holder, one that died: every reference it held is given back.
-- After incr and unhold, at refcount <= 0 the hash is deleted (the caller then frees the memory).
-- hset_many, del_many: every member of a tensor set at once. KEYS[1] is then the set's list of
-- member keys, KEYS[8] its record (KeySpace::SetRecord), KEYS[9..] the member hashes; ARGV[15..]
-- per member: its name, how many field/value strings follow (0 for del_many), then them. `pre`
-- holds for every member, "absent" also for the set: no list of it that names a hash still its
-- member (its "set" field the set's name, ARGV[11]); the list of a set whose members are all gone
-- is replaced. hset_many under "absent" writes the list and the record; del_many deletes them
-- with the members; under "none" (the server freed a set's last member), it deletes them alone,
-- once no hash the list names is still a member. The event is each member's.
-- A member's own commit (del, incr, unhold) names its set's list and record too, KEYS[8] and
-- KEYS[9]: when its hash goes, it leaves both, so that they name the members alive and nothing
-- else.
-- Returns {"ok"} | {"ok", refcount} (incr, unhold: the count after; del under "mine": the count
-- it had) | {"dup", first_reply} | {"conflict"} | {"not_held"}.
--
-- Redis does not undo a script's writes when a later command of it fails, so the reply is
-- written first: a write that Redis refuses (out of memory under maxmemory, a reply key of
-- another type) then fails the commit before anything has changed, and once one write has gone
-- through Redis lets the others through too.
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
local action = ARGV[8]
local many = action == 'hset_many' or action == 'del_many'
local refcount
if many then
  if pre == 'absent' then
    for _, key in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
      if redis.call('HGET', key, 'set') == ARGV[11] then return {'conflict'} end
    end
  end
  for k = 9, #KEYS do
    if pre == 'absent' then
      if redis.call('EXISTS', KEYS[k]) == 1 then return {'conflict'} end
    elseif pre == 'creating' then
      local f = redis.call('HMGET', KEYS[k], 'state', 'owner')
      if f[1] ~= 'creating' or f[2] ~= ARGV[7] then return {'conflict'} end
    end
  end
elseif pre == 'absent' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {'conflict'} end
elseif pre == 'mine' or pre == 'creating' then
  local f = redis.call('HMGET', KEYS[1], 'state', 'owner', 'refcount')
  if f[1] ~= (pre == 'mine' and 'ready' or 'creating') or f[2] ~= ARGV[7] then
    return {'conflict'}
  end
  refcount = 0  -- a missing field counts as 0, and one that is not a number is refused, as HINCRBY does
  if f[3] then
    refcount = tonumber(f[3])
    if not refcount then return redis.error_reply('ERR hash value is not an integer') end
  end
end
local reply = ARGV[2]
local result = {'ok'}
local holder = ''
local own = 0  -- how many of the holder's references the change gives back (-) or takes (+)
if action == 'incr' then
  holder = ARGV[15]
  local delta = tonumber(ARGV[16])
  own = delta
  if delta < 0 then
    local which = mcd_releasable(KEYS[1], holder, refcount, ARGV[19] == '1' and 'own' or 'any')
    if not which then return {'not_held'} end
    if which ~= 'own' then own = 0 end
  end
  local n = refcount + delta
  if n <= 0 then
    reply = reply .. '0' .. ARGV[18]
  else
    reply = reply .. n .. ARGV[17]
  end
  result = {'ok', n}
elseif action == 'unhold' then
  holder = ARGV[15]
  own = -mcd_held_by(KEYS[1], holder)
  result = {'ok', refcount + own}
elseif action == 'del' and refcount then
  result = {'ok', refcount}
end
if ARGV[5] == '1' then
  redis.call('RPUSH', KEYS[3], reply)
  redis.call('EXPIRE', KEYS[3], ARGV[3])
  redis.call('SET', KEYS[4], reply, 'EX', ARGV[4])
end
if many then
  local drop_list = pre == 'absent' or action == 'del_many'
  if action == 'del_many' and pre == 'none' then  -- the last member is gone: the list, if stale
    for _, key in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
      if redis.call('HGET', key, 'set') == ARGV[11] then drop_list = false end
    end
  end
  if drop_list then redis.call('DEL', KEYS[1], KEYS[8]) end
  local at = 15
  for k = 9, #KEYS do
    local count = tonumber(ARGV[at + 1])
    if action == 'del_many' then
      redis.call('DEL', KEYS[k])
    else
      redis.call('HSET', KEYS[k], unpack(ARGV, at + 2, at + 1 + count))
      if pre == 'absent' then
        redis.call('RPUSH', KEYS[1], KEYS[k])
        -- The member's fixed fields in one value, "DTYPE SHAPE BYTES OFFSET" (SetRecordValue).
        local f = {}
        for j = at + 2, at + count, 2 do f[ARGV[j]] = ARGV[j + 1] end
        redis.call('HSET', KEYS[8], ARGV[at],
                   table.concat({f.dtype, f.shape, f.bytes, f.offset}, ' '))
      end
    end
    if ARGV[10] ~= '' then
      mcd_event(KEYS[7], ARGV[9], ARGV[10], ARGV[at], ARGV[12], 1, ARGV[13], ARGV[14])
    end
    at = at + 2 + count
  end
  redis.call('LREM', KEYS[2], -1, ARGV[1])
  return result
elseif action == 'hset' then
  redis.call('HSET', KEYS[1], unpack(ARGV, 15))
elseif action == 'del' or ((action == 'incr' or action == 'unhold') and result[2] <= 0) then
  redis.call('DEL', KEYS[1])
  if #KEYS == 9 then  -- a set's member: it leaves the set's list and record
    redis.call('LREM', KEYS[8], 0, KEYS[1])
    redis.call('HDEL', KEYS[9], ARGV[11])
  end
elseif action == 'unhold' then
  redis.call('HINCRBY', KEYS[1], 'refcount', result[2] - refcount)  -- never "-0", which Redis refuses
  mcd_unhold_all(KEYS[1], holder, refcount - result[2])  -- its field goes, at 0 too
elseif action == 'incr' then
  redis.call('HINCRBY', KEYS[1], 'refcount', ARGV[16])
  if holder ~= '' and own ~= 0 then mcd_hold(KEYS[1], KEYS[5], KEYS[6], holder, own) end
end
local event = ARGV[10]
-- A dead holder that had given back all it held changed nothing: no event says it did.
if action == 'unhold' and own == 0 then event = '' end
if event ~= '' then
  local after = result[2] or 1  -- a create's count; a "del" frees whatever it had
  if action == 'del' or after < 0 then after = 0 end
  if event == 'ref' then
    event = tonumber(ARGV[16]) > 0 and 'get' or (after > 0 and 'release' or 'delete')
  end
  mcd_event(KEYS[7], ARGV[9], event, ARGV[11], ARGV[12], after, ARGV[13], ARGV[14])
end
redis.call('LREM', KEYS[2], -1, ARGV[1])
return result
