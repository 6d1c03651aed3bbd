-- Deletes KEYS[1], a hash, only while its field ARGV[1] holds ARGV[2]: a stopping server removes
-- only the hashes that are still its own. Returns the number of keys deleted.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('DEL', KEYS[1]) end
return 0
