// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What a server does once at start, before it serves: clean up after dead instances of its node.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "memcuda/keys.h"
#include "memcuda/redis.h"

namespace mcd {

// Every tensor hash under `keys` of node `node` (SCAN, with the fields read by pipelined HMGETs
// in pages): `on_hash` gets its key and the values of "owner" then of `fields`, in that order.
Status ScanNodeHashes(
    RedisConnection& redis, const KeySpace& keys, const std::string& node,
    const std::vector<std::string>& fields,
    const std::function<Status(const std::string& key, RedisValue& values)>& on_hash);

// What ReconcileNode needs of the server's options: where the keys are, the node, and how many
// events the stream keeps (0: none are written).
struct ReconcileOptions {
  KeySpace keys;
  std::string node;
  uint64_t event_history = 0;
};

// Removes the hashes of node `opt.node` owned by an instance other than `instance` (their
// memory died with their process, or is unlinked here for host shm), then every shm object named
// under `shm_prefix` that no hash refers to, and the sockets dead instances left in
// `socket_dir` (RemoveDeadSockets; "" for none). Logs what it removed and how many commands wait
// in the processing list.
Status ReconcileNode(RedisConnection& redis, const ReconcileOptions& opt,
                     const std::string& instance, const std::string& shm_prefix,
                     const std::string& socket_dir);

// "<kind>-<node>-<instance>.sock": the name of a server's socket of `kind` ("cmd", "pool") in
// the runtime folder, the node cut to 40 characters with all but letters and digits as '_'.
std::string SocketFileName(const std::string& kind, const std::string& node,
                           const std::string& instance);

// Removes the command and pool sockets that other instances of node `node` left in `dir` (a
// SIGKILLed server cannot remove its own): those named by SocketFileName for an instance other
// than `instance` on which nobody listens (a connection is refused), so that the socket of a
// live server whose node shares the name's cut (another Redis, a node of a longer name) stays.
// Returns how many.
int RemoveDeadSockets(const std::string& dir, const std::string& node, const std::string& instance);

// Redis 7.0 or newer, or kUnavailable: older versions keep the scripts a server loads (its
// settled marker, heartbeat.h) across a restart and on replicas. Read from HELLO, else (before
// Redis 6) from INFO; a Redis that tells neither is taken as it is, said in a log line. `where`
// names the Redis in the messages.
Status CheckRedisVersion(RedisConnection& redis, const std::string& where);

// A Redis that evicts keys at its maxmemory (a cache's setting) may drop a tensor's hash while
// its memory stays held, or the heartbeat of a live server: said at start. A Redis that hides
// CONFIG (some managed ones) is taken as it is.
void WarnIfRedisEvicts(RedisConnection& redis);

// "/mcd-<prefix>-<node>-": the start of the names of this node's shm objects, safe as a file name.
std::string ShmPrefix(const std::string& prefix, const std::string& node);

}  // namespace mcd
