// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The node's server as this client knows it: its heartbeat (<prefix>:server:<node>), read at
// connect and again when the server changed, and what a first Get needs of it, prepared where
// the heartbeat is read rather than on the Get's path: the server process pinned (for copying
// its pools' descriptors), each device's pool source, and the primers (docs/design.md, "Fast
// paths and knobs": Primers).
// Used by one Client, so by one thread at a time.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/mapping_registry.h"
#include "common/process.h"
#include "memcuda/client.h"
#include "memcuda/heartbeat.h"
#include "memcuda/redis.h"

namespace mcd {

class ServerView {
 public:
  // The heartbeat of `node` (a reference: the client's node, which discovering the only live
  // server may set after this view is made), under `keys`, on the Redis `redis_url` names
  // (redacted: for messages).
  ServerView(RedisConnection& redis, const std::string& node, const KeySpace& keys,
             std::string redis_url)
      : redis_(redis), node_(node), keys_(keys), redis_url_(std::move(redis_url)) {}
  // Held by reference: a temporary would be gone once the constructor returns.
  ServerView(RedisConnection&, std::string&&, const KeySpace&, std::string) = delete;
  ServerView(RedisConnection&, const std::string&, KeySpace&&, std::string) = delete;

  // HGETALL of the heartbeat through its codec (HeartbeatFromFields), or kUnavailable when no
  // server is alive for the node, or kUnexpectedReply naming a malformed field.
  Result<HeartbeatRecord> Read();
  // The heartbeats of every live server on the Redis, sorted by node. A heartbeat that names a
  // process of this host that is gone (DeadHere) is left out, and added to `dead` when given;
  // one without an instance is no server's and left out. One with a malformed field is left out
  // too, and "<key>: <why>" added to `unreadable` when given.
  static Result<std::vector<HeartbeatRecord>> Live(RedisConnection& redis, const KeySpace& keys,
                                                   std::vector<HeartbeatRecord>* dead = nullptr,
                                                   std::vector<std::string>* unreadable = nullptr);
  // Whether `heartbeat` names a server process that is known to be gone, where this process can
  // tell: one of its boot and PID namespace (pid_space) whose pid is free, taken by another
  // process, or a zombie's. One whose /proc entry this process may not read is not judged.
  static bool DeadHere(const HeartbeatRecord& heartbeat);
  // Read's answer from its HGETALL reply `all`, which the caller sent.
  Result<HeartbeatRecord> Parse(const RedisValue& all);
  // Takes `info` as the node's heartbeat and prepares, here where it is read rather than on a
  // first Get's path, what a first Get needs of it: the server pinned for copying its pools'
  // descriptors (a pidfd_open and an fstat, ~15-30 us in a fresh process on the H100 hosts),
  // and each device's pool source and primer, parsed and decoded.
  void Adopt(HeartbeatRecord info);
  // Read, then Adopt: after the command socket failed, a server that took the node over names
  // its own socket.
  Result<HeartbeatRecord> Refresh();
  // What a tensor hash found missing means, from the heartbeat read in the same atomic step
  // (`heartbeat`: whether there was one, `settled`: its settled field): kNotFound, unless Redis
  // lacks the script that field names, which a server loads once it has put its hashes back
  // there (Heartbeat::MarkSettled): then Redis restarted or failed over and the server is not
  // done yet, which is kTryAgain. Without a heartbeat, the one read at connect is compared, and
  // with nothing to compare the node has no server to vouch either way: kUnavailable.
  Status Missing(const std::string& name, bool heartbeat, const std::string& settled);
  // The same for a hash an HMGET found missing: looks again, with the heartbeat, in one
  // MULTI/EXEC (kTryAgain when the hash is there now).
  Status Missing(const std::string& name);
  // kUnavailable when the heartbeat as last read names a server process that has died, where
  // this process can tell: one of the same boot and PID namespace (the heartbeat's pid_space).
  // A SIGKILLed server's heartbeat outlives it by up to its TTL; meanwhile nothing of that
  // server may be got, released or created. One poll of a pidfd.
  Status Alive();
  // After a CUDA open of this server's memory failed: whether the server is dying. A killed
  // server's CUDA context goes while its process exits, before its pidfd says so: the exit is
  // waited for up to `wait_ms`, where this process can tell.
  bool DiedWithin(int wait_ms);
  // Alive, or, when the server it knew has died, the heartbeat read again: a server that took
  // the node over is alive.
  Status EnsureAlive();
  // The heartbeat as last read (all empty before the first).
  const HeartbeatRecord& heartbeat() const { return info_; }
  bool known() const { return known_; }
  // The list to push commands onto: the node's own when its server names one (node_queue), the
  // shared one for a server that has none (an older version). Set by Adopt.
  const std::string& queue() const { return queue_; }

  // Where the pool of server instance `owner` comes from, from the node's heartbeat.
  MappingRegistry::SourceOf PoolSourceOf();
  // A first Get or Open from this process's node server: what the driver charges a process
  // once is paid meanwhile, on each device's worker: importing the server's pools
  // (MappingRegistry::PrefetchPool) and the process's first cuda_ipc open (PrefetchIpc).
  void PrefetchImports();

 private:
  // The server process the heartbeat names, as pid_ino or pid_start say.
  ProcessIdentity Identity();
  // For a newly read server: its process pinned where this process can see it (local_).
  void Watch();
  // The heartbeat's fields for `device`'s pool; without a pinned server, the socket only.
  PoolSource PoolSourceFrom(int device);
  // "<device>:<value>,..." of a heartbeat field, GPU devices only, malformed items skipped.
  static std::vector<std::pair<int, std::string>> DeviceItems(const std::string& text);

  RedisConnection& redis_;
  const std::string& node_;
  const KeySpace& keys_;
  const std::string redis_url_;
  HeartbeatRecord info_;  // the node's heartbeat, as last read
  bool known_ = false;    // one was read
  std::string queue_ = keys_.queue;
  std::shared_ptr<const PinnedProcess> server_pin_;  // process_ where its pools may be copied
  std::shared_ptr<const PinnedProcess> process_;     // the server process, where local_
  bool local_ = false;                               // the heartbeat's pid_space is this one's
  bool dead_ = false;                                // the server process is known to be gone
  struct PoolPrefetch {
    int device;
    PoolSource source;
    std::string primer;
  };
  std::vector<PoolPrefetch> pool_prefetch_;
  std::map<int, std::string> ipc_prefetch_;
  bool prefetched_ = false;  // PrefetchImports ran
};

}  // namespace mcd
