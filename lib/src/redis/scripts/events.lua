-- SPDX-FileCopyrightText: 2026 The memcuda Authors
-- SPDX-License-Identifier: Apache-2.0

-- Lifecycle events (mcd-ls --watch, mcd-get --wait, mcd-rm --wait-free): every script that
-- changes a tensor or a node's claim appends the event describing the change to the stream
-- <prefix>:events in the same call, so a reader never sees an event for a change that did not
-- happen, nor misses one that did. The build puts this at the top of every script.
--
-- The stream holds about `cap` entries (XADD MAXLEN ~: Redis trims whole stream nodes, so a few
-- more); a cap of "0" (mcd-serve --event-history 0) writes none. Every entry has the same six
-- fields; its id gives the time (ms since the epoch, Redis's clock).
local function mcd_event(stream, cap, event, name, node, refcount, pid, reason)
  if cap == nil or cap == false or cap == '' or cap == '0' then return end
  redis.call('XADD', stream, 'MAXLEN', '~', cap, '*', 'event', event, 'name', name,
             'node', node, 'refcount', tostring(refcount), 'pid', tostring(pid),
             'reason', reason)
end
