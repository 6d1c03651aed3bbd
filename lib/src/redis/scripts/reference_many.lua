-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- reference.lua for several tensors at once (Client::GetMany, Client::ReleaseMany): one call
-- takes a reference of every tensor named, or gives one of each back, all or nothing. Every
-- tensor is checked first, as reference.lua checks one; the first that cannot be got or given
-- back is answered with its refusal and nothing changes. A release of a tensor's last reference
-- queues its delete command, as reference.lua does.
--
-- Called through ReferenceManyCall / ParseReferenceManyReply (redis/script_calls.h).
-- KEYS[1] heartbeat, the client's node's, KEYS[2] holders, KEYS[3] held, KEYS[4] events,
-- KEYS[5] queue (as reference.lua's); then two per tensor: its hash, and (release) the reply
-- list of its delete command (for a get, the unused key <prefix>:-).
-- ARGV[1] delta: "1" (get), "-1" (release) or "set" (a get of a whole set, below), ARGV[2] node,
-- ARGV[3] holder, ARGV[4] pid, ARGV[5] marker_ttl_s, ARGV[6] the number of hash fields to return,
-- then those fields; then four per tensor: its name, (release) its delete command, epoch ("*": not
-- known) and mode (reference.lua's).
-- A release pushes an empty marker onto the reply list of every tensor whose release it answers
-- itself (all of them when it refuses), so that the BLPOPs sent right behind it return at once.
-- A get of a whole set (Client::GetSet), with no tensor of its own, takes one reference for the
-- whole tensor set: KEYS[6] is then the set's list of member keys (KeySpace::Set), sorted by name,
-- KEYS[7] its record (KeySpace::SetRecord): each member's fixed fields in one value, by name, and
-- the one argument after the fields the set's name. The server trims both when a member is freed on
-- its own (commit.lua), so they name the members alive and nothing else. The reference is taken of
-- the first member of the list (the leader, first by name), as a get of it alone, whose checks
-- (ready, of this node, of the live server) hold for every member: a set's members are made,
-- published and put back together, by one server. The set's memory is one allocation that stays
-- while any member lives, so that one reference keeps every member's bytes. A reference of each
-- member, or a read of each member's hash, would add work per member to a call that Redis runs
-- while every other client waits (docs/design.md, "Fast paths"). The record is only checked
-- here: the client reads it with an HGETALL in this call's transaction (MULTI/EXEC), which Redis
-- serves in a fraction of what the same read through Lua and back costs (docs/design.md, "Fast
-- paths and knobs").
-- Returns {"ok", {answer per tensor}} ({"ok", {the leader's answer}, the leader's name} for a
-- set), an answer being
-- {"ok", {values}}, {"forgotten", {values}} or {"queued"} as reference.lua answers; or
-- {"failed", i, refusal, name}: the i-th tensor (from 1) refused with reference.lua's refusal
-- ({"missing", instance, settled}, {"not_ready", state}, {"wrong_node", node}, {"gone"},
-- {"not_held"}); a set with no member left: i 0, "missing".
local release = ARGV[1] == '-1'
local of_set = ARGV[1] == 'set'
local delta = of_set and 1 or tonumber(ARGV[1])
local holder = ARGV[3]
local nfields = tonumber(ARGV[6])
local fields = {}
for i = 1, nfields do fields[i] = ARGV[6 + i] end
local first_arg = 6 + nfields
-- Each hash is read once, whole, before anything changes: its checks and its answer.
local at = {}
for i, name in ipairs(fields) do at[name] = i end
for _, name in ipairs({'state', 'owner', 'refcount', 'node', 'epoch'}) do
  if not at[name] then return redis.error_reply('ERR reference_many: no field ' .. name) end
end
-- A get also reads the counts it is about to change, so that one HSET a hash writes them all
-- (holders.lua's bookkeeping: the holder's field and "bound", the sets at its first reference).
local holder_field = holder ~= '' and ('holder:' .. holder) or nil
local read_fields = fields
if not release then
  read_fields = {unpack(fields)}
  read_fields[nfields + 1] = 'bound'
  read_fields[nfields + 2] = holder_field or 'bound'
end
local function number_or_absent(v) return not v or tonumber(v) ~= nil end
local server = redis.call('HMGET', KEYS[1], HB_INSTANCE, HB_EVENT_HISTORY, HB_SETTLED)
local keys, names, replies = {}, {}, {}
if of_set then
  local set_name = ARGV[first_arg + 1]
  local function name_of(key) return string.match(key, '{([^{}]*)}$') or key end
  local leader
  while true do
    leader = redis.call('LINDEX', KEYS[6], 0)
    if not leader then
      redis.call('DEL', KEYS[7])  -- what is left of a set whose members are all gone
      return {'failed', 0, {'missing', server[1] or '', server[3] or ''}}
    end
    if redis.call('HGET', leader, 'set') == set_name then break end
    -- An entry whose hash went without the list (its server's instance died, or Redis came back
    -- from an older copy): it leaves the list and the record here.
    redis.call('LPOP', KEYS[6])
    redis.call('HDEL', KEYS[7], name_of(leader))
  end
  local record = redis.call('TYPE', KEYS[7]).ok
  if record ~= 'hash' then
    return redis.error_reply('ERR tensor set ' .. set_name .. ' has no record of its members (' ..
                             KEYS[7] .. (record == 'none' and
                                         ': made by a server of an older version, or removed)' or
                                         ' is a ' .. record .. ', not a hash)'))
  end
  keys[1], names[1] = leader, name_of(leader)
else
  for i = 1, (#KEYS - 5) / 2 do
    keys[i], replies[i] = KEYS[4 + 2 * i], KEYS[5 + 2 * i]
    names[i] = ARGV[first_arg + 4 * (i - 1) + 1]
  end
end
local n = #keys
local function arg(i, j) return ARGV[first_arg + 4 * (i - 1) + j] end
local function mark(i)
  if not release then return end
  redis.call('RPUSH', replies[i], '')
  redis.call('EXPIRE', replies[i], ARGV[5])
end
local read = {}
for i = 1, n do
  local f = redis.call('HMGET', keys[i], unpack(read_fields))
  local state, node = f[at.state], f[at.node]
  local forgotten = release and arg(i, 3) ~= '*' and arg(i, 3) ~= (f[at.epoch] or '')
  local refusal
  if not state then
    refusal = {'missing', server[1] or '', server[3] or ''}
  elseif node ~= ARGV[2] then
    refusal = {'wrong_node', node}
  elseif state ~= 'ready' then
    refusal = {'not_ready', state}
  elseif server[1] ~= f[at.owner] then
    refusal = {'gone'}
  elseif release and not forgotten and
      not mcd_releasable(keys[i], holder, tonumber(f[at.refcount]), arg(i, 4)) then
    refusal = {'not_held'}
  end
  if refusal then
    for j = 1, n do mark(j) end
    return {'failed', i, refusal, names[i]}
  end
  -- A hash written by hand: refused before any change.
  local counts = tonumber(f[at.refcount]) and
      (release or (number_or_absent(f[nfields + 1]) and number_or_absent(f[nfields + 2])))
  if not counts then
    for j = 1, n do mark(j) end
    return redis.error_reply('ERR hash value is not an integer (' .. names[i] .. ')')
  end
  read[i] = {tonumber(f[at.refcount]), forgotten, f}
end
local out = {}
local first = {}  -- the hashes a get's holder takes its first reference of (mcd_hold_sets)
for i = 1, n do
  local key, count, forgotten, values = keys[i], read[i][1], read[i][2], read[i][3]
  if forgotten then
    mark(i)
    out[i] = {'forgotten', values}
  elseif release and count <= 1 then
    redis.call('LPUSH', KEYS[5], arg(i, 2))
    out[i] = {'queued'}
  else
    if release then
      local own = mcd_releasable(key, holder, count, arg(i, 4)) == 'own'
      redis.call('HINCRBY', key, 'refcount', delta)
      if own and holder ~= '' then mcd_hold(key, KEYS[2], KEYS[3], holder, delta) end
    elseif holder_field then
      local mine = values[nfields + 2]
      if not mine then first[#first + 1] = key end
      redis.call('HSET', key, 'refcount', count + 1, holder_field, (tonumber(mine) or 0) + 1,
                 'bound', (tonumber(values[nfields + 1]) or 0) + 1)
    else
      redis.call('HSET', key, 'refcount', count + 1)
    end
    values[nfields + 1], values[nfields + 2] = nil, nil
    mcd_event(KEYS[4], server[2], release and 'release' or 'get', names[i], ARGV[2],
              count + delta, ARGV[4], '')
    mark(i)
    values[at.refcount] = tostring(count + delta)
    out[i] = {'ok', values}
  end
end
mcd_hold_sets(KEYS[2], KEYS[3], holder, first)
if of_set then return {'ok', out, names[1]} end
return {'ok', out}
