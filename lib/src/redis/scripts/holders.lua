-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- References bound to their holders: the part shared by commit.lua and reference.lua (the build
-- puts it at the top of both). A holder is a process of the tensor's node, named "PID:START"
-- (START: its start time in clock ticks since boot, so that a reused pid is another holder).
-- The tensor hash keeps holder:PID:START = how many of its refcount that process holds (0 once
-- it gave them back), and bound = their sum; the rest of the refcount is bound to nobody (the creator's reference of a
-- heap tensor, detached and anonymous references). The node's set of holders and each
-- holder's set of tensor keys let the server find what a dead holder held without reading
-- every hash.

-- Takes (+1) or gives back (-1) one reference of `holder`; the refcount is the caller's to change.
-- A holder's field stays, at 0, after it gave back its last reference, and so do its entries in
-- the sets: a process that takes and gives back the same tensor again and again then costs three
-- calls a take and two a release, and the server clears all of it when the holder dies. The
-- server relies on the sets to find every field (forget_holder.lua): a field is never written
-- without its holder in both.
local function mcd_hold(tensor, index, held, holder, delta)
  local field = 'holder:' .. holder
  if delta > 0 and redis.call('HEXISTS', tensor, field) == 0 then  -- its first reference to it
    redis.call('SADD', held, tensor)
    redis.call('SADD', index, holder)
  end
  redis.call('HINCRBY', tensor, field, delta)
  redis.call('HINCRBY', tensor, 'bound', delta)
end

-- The sets mcd_hold writes at a holder's first reference of each of the hashes `first`, written
-- once for all of them (reference_many.lua's get, which writes the hashes' fields itself).
local function mcd_hold_sets(index, held, holder, first)
  for i = 1, #first, 4000 do  -- unpack returns at most a few thousand values
    redis.call('SADD', held, unpack(first, i, math.min(i + 3999, #first)))
  end
  if #first > 0 then redis.call('SADD', index, holder) end
end

-- How many references of `tensor` `holder` holds.
local function mcd_held_by(tensor, holder)
  if holder == '' then return 0 end
  return tonumber(redis.call('HGET', tensor, 'holder:' .. holder) or '0') or 0
end

-- Forgets `holder` (one that died), which held `count` references; the refcount is the caller's.
local function mcd_unhold_all(tensor, holder, count)
  redis.call('HDEL', tensor, 'holder:' .. holder)
  if count ~= 0 then redis.call('HINCRBY', tensor, 'bound', -count) end
end

-- Which reference a release by `holder` ("" for none) gives back: 'own' when it holds one,
-- 'unbound' when one bound to nobody is left, nil when every reference is another process's.
-- `mode` says which the releasing client has: 'own' (one it took, bound to `holder`), 'unbound'
-- (one it created, or took bound to nobody) or 'any' (not known: a tool that releases for its
-- parent), which gives back the holder's own first. A client gives back only the kind it has:
-- when another client of its process gave its own back already, a release of 'own' must not take
-- the creator's, which would free the tensor under it, nor a creator's release the process's own.
local function mcd_releasable(tensor, holder, refcount, mode)
  if mode ~= 'unbound' and mcd_held_by(tensor, holder) > 0 then return 'own' end
  if mode == 'own' and holder ~= '' then return nil end
  local bound = tonumber(redis.call('HGET', tensor, 'bound') or '0') or 0
  if refcount - bound > 0 then return 'unbound' end
  return nil
end
