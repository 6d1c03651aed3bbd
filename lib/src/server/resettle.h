// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What a lost Redis connection leaves open, settled after the reconnect and before the server
// serves again: creates and removals whose commit got no answer, hashes Redis lost (a restart
// without persistence, a failover to a replica that missed writes) and hashes it brought back
// after they were removed (an AOF that lost its last second), the heartbeat, and the commands
// the server had taken. Main thread of the server only.
#pragma once

#include <functional>
#include <string>

#include "memcuda/keys.h"
#include "memcuda/redis.h"
#include "server/applier.h"
#include "server/commit_pipeline.h"
#include "server/device_set.h"
#include "server/heartbeat.h"
#include "server/tensor_table.h"

namespace mcd {

// What the resettle needs of the server's options (the event stream it reads is the pipeline's).
struct ResettleOptions {
  KeySpace keys;
  std::string node;
};

class Resettle {
 public:
  Resettle(ResettleOptions opt, std::string instance, CommitPipeline& pipeline, TensorTable& table,
           DeviceSet& devices, Heartbeat& heartbeat, CommandApplier& applier,
           std::function<void()> stop);

  // In order: the heartbeat (another instance holding the node now stops this one), creates of
  // unknown outcome kept or freed by what their hash says, tensors whose removal had no answer
  // freed when their hash is gone, other lost hashes put back, hashes of this instance that
  // name nothing it holds removed, the processing list resumed, and the heartbeat marked
  // settled (Heartbeat::MarkSettled): until then clients answer "try again" for a tensor they
  // do not find.
  Status Settle();

 private:
  // The server is the authority on what it holds: a tensor whose hash Redis lost is put back.
  // Writes the list of tensor set `set` again, naming its members held here (after Redis lost
  // it with them).
  Status PutBackSetList(const std::string& set);
  Status Republish(Entry& entry);
  // Whether the removal of `name` whose commit got no answer went through: the newest event
  // naming it is that removal (refcount 0), which the commit appended with it. Redis that lost
  // its data lost the event too, and a server without events (--event-history 0) keeps none:
  // then the tensor is put back instead, the safe side (memory another process may map is never
  // freed on a guess; a removal that did go through leaves a tensor that mcd-rm removes).
  Result<bool> RemovalCommitted(const std::string& name);
  // Hashes of this instance for tensors it no longer holds, which a Redis restarted from an AOF
  // that missed their removal brings back: deleted, so that nobody opens freed memory.
  Status RemovePhantoms();

  const ResettleOptions opt_;
  const std::string instance_;
  CommitPipeline& pipeline_;
  TensorTable& table_;
  DeviceSet& devices_;
  Heartbeat& heartbeat_;
  CommandApplier& applier_;
  std::function<void()> stop_;
};

}  // namespace mcd
