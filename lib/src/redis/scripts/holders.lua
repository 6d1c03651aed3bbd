-- References bound to their holders: the part shared by commit.lua and reference.lua (the build
-- puts it at the top of both). A holder is a process of the tensor's node, named "PID:START"
-- (START: its start time in clock ticks since boot, so that a reused pid is another holder).
-- The tensor hash keeps holder:PID:START = how many of its refcount that process holds; the
-- rest of the refcount is bound to nobody (the creator's reference of a heap tensor, detached
-- and anonymous references). The node's set of holders and each holder's set of tensor keys
-- let the server find what a dead holder held without reading every hash.

-- Takes the hash `tensor` off the set `held` of `holder`, and the holder off the node's set
-- `index` once it holds nothing.
local function mcd_unlist(tensor, index, held, holder)
  redis.call('SREM', held, tensor)
  if redis.call('EXISTS', held) == 0 then redis.call('SREM', index, holder) end
end

-- Takes (+1) or gives back (-1) one reference of `holder`; the refcount is the caller's to change.
local function mcd_hold(tensor, index, held, holder, delta)
  local field = 'holder:' .. holder
  if redis.call('HINCRBY', tensor, field, delta) > 0 then
    if delta > 0 then
      redis.call('SADD', held, tensor)
      redis.call('SADD', index, holder)
    end
    return
  end
  redis.call('HDEL', tensor, field)
  mcd_unlist(tensor, index, held, holder)
end

-- How many references of `tensor` `holder` holds.
local function mcd_held_by(tensor, holder)
  if holder == '' then return 0 end
  return tonumber(redis.call('HGET', tensor, 'holder:' .. holder) or '0') or 0
end

-- Which reference a release by `holder` ("" for none) gives back: 'own' when it holds one,
-- 'unbound' when one bound to nobody is left, nil when every reference is another process's.
local function mcd_releasable(tensor, holder, refcount)
  if mcd_held_by(tensor, holder) > 0 then return 'own' end
  local all = redis.call('HGETALL', tensor)
  local bound = 0
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 7) == 'holder:' then bound = bound + (tonumber(all[i + 1]) or 0) end
  end
  if refcount - bound > 0 then return 'unbound' end
  return nil
end
