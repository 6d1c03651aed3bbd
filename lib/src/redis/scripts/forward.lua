-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- Forwards a command that a server took but that names another node (it came through the shared
-- queue) to that node's queue, taking it off the taker's processing list in the same step, so it
-- is neither lost nor applied twice. Only while that node has a live server: otherwise nothing
-- changes and the taker answers wrong_node.
--
-- KEYS[1] processing, the taker's list, KEYS[2] queue, the other node's, KEYS[3] heartbeat, its
-- ARGV[1] raw, the command. Returns 1 when forwarded, 0 when the node has no live server.
-- Called through ForwardCall / ParseForwardReply (redis/script_calls.h).
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
redis.call('LPUSH', KEYS[2], ARGV[1])
redis.call('LREM', KEYS[1], -1, ARGV[1])
return 1
