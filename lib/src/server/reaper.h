// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Giving back what dead processes held, once a second from the serving loop: stack tensors whose
// owner process is gone, and the references of holders that died (holders.lua). A tensor that
// reaches refcount 0 this way is freed exactly as by a delete. Main thread of the server only.
#pragma once

#include <string>

#include "memcuda/keys.h"
#include "memcuda/redis.h"
#include "server/commit_pipeline.h"
#include "server/device_set.h"
#include "server/outcome_log.h"
#include "server/tensor_table.h"

namespace mcd {

// What the reaper needs of the server's options.
struct ReaperOptions {
  KeySpace keys;
  std::string node;
};

class Reaper {
 public:
  Reaper(ReaperOptions opt, std::string instance, CommitPipeline& pipeline, TensorTable& table,
         DeviceSet& devices, OutcomeLog& outcomes);

  // Deletes the stack tensors whose owner process is gone, and frees their memory.
  void ReapStackTensors();
  // Removes the tensors still being filled whose filler died before it published them (no event:
  // they were never announced), and frees their memory.
  void ReapDeadFillers();
  // Gives back every reference of the node's holders that are gone.
  void ReapDeadHolders();

 private:
  // Every reference `holder` had; it leaves the node's set once none of this instance's hashes
  // names it (forget_holder.lua), else at a later round.
  Status GiveBackAll(const std::string& holder);
  // After a reclaim's commit: frees the tensor when `committed` says its hash went, keeps its
  // memory as an orphan when the hash is not this server's any more.
  void Reclaimed(const char* what, const std::string& name, Result<CommitResult> committed,
                 OutcomeLog::Clock::time_point t0, const std::string& detail);

  const ReaperOptions opt_;
  const std::string instance_;
  const std::string holders_key_;
  CommitPipeline& pipeline_;
  TensorTable& table_;
  DeviceSet& devices_;
  OutcomeLog& outcomes_;
};

}  // namespace mcd
