// Applying commands: each command of a batch is checked, its memory allocated or freed through
// the device's allocator, and its effect queued as one commit (commit_pipeline.h); its reply goes
// back on the route it came by (responder.h). Main thread of the server only.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "memcuda/protocol.h"
#include "memcuda/redis.h"
#include "memcuda/server.h"
#include "server/commit_pipeline.h"
#include "server/device_set.h"
#include "server/intake.h"
#include "server/node_copy.h"
#include "server/outcome_log.h"
#include "server/responder.h"
#include "server/tensor_table.h"

namespace mcd {

class CommandApplier {
 public:
  using Clock = std::chrono::steady_clock;
  CommandApplier(const ServerOptions& opt, std::string instance, RedisConnection& redis,
                 CommitPipeline& pipeline, Intake& intake, TensorTable& table, DeviceSet& devices,
                 OutcomeLog& outcomes, NodeCopier& copier);

  // Plans the batch's commands in order and sends their commits pipelined. A command naming a
  // tensor that an earlier one of the batch touched, or whose commit is still on its way, waits
  // until those are committed, so each sees the effects of the ones before it.
  void ProcessBatch(std::vector<Intake::Incoming> commands);
  // The commit pipeline's settle: answers a socket command, runs the commit's `done`, and tells a
  // socket client whose commit got no answer from Redis that its outcome is unknown.
  void Settle(Pending& pending, Result<CommitResult> result);
  // Handles the processing list again (the commands a previous instance or a lost connection left
  // there, oldest first).
  Status ResumeUnfinished();
  // Commands left in the processing list by a refusal that may pass are resumed from there once
  // nothing is in flight: a second after the refusal, then after 2, 4, 8 and 10 s while they keep
  // being refused. ResumeDue: that time has come; ResumeNow: resume them, with nothing in flight.
  bool ResumeDue() const { return responder_.ResumeDue(); }
  void ResumeNow();

 private:
  void Handle(const std::string& raw, const Result<Command>& parsed, const std::string& req);
  void HandleCreate(const std::string& raw, const Command& cmd);
  // The create's commit went through, or not: keep, settle later, or free and answer.
  void CreateCommitted(const std::string& raw, const std::string& req, Entry entry,
                       Clock::time_point t0, Result<CommitResult> committed);
  // publish: the filler of a "creating" tensor says its bytes are in; the hash turns "ready" and
  // the create event goes out. abandon: the filler gives up, and the tensor goes unpublished.
  void HandlePublish(const std::string& raw, const Command& cmd);
  void HandleAbandon(const std::string& raw, const Command& cmd);
  // Why a command of `cmd.pid` may not publish or abandon tensor `entry` (ok when it may).
  Status FillerCheck(const Entry& entry, const Command& cmd) const;
  // The entry of the tensor `cmd` publishes or abandons, or end() once the command is answered
  // with why it may not.
  TensorTable::Map::iterator FillersEntry(const std::string& raw, const Command& cmd,
                                          Clock::time_point t0);
  // get (delta +1) and delete (-1): refcount changed in Redis; at 0 the hash goes (in the
  // script) before the memory.
  void HandleRefcount(const std::string& raw, const Command& cmd, int delta);
  void RefcountCommitted(const std::string& raw, const std::string& req, const std::string& name,
                         const char* op, Clock::time_point t0, Result<CommitResult> committed);
  // Why `name` cannot be used here: on another node, not ready, of a dead instance, or absent.
  Status MissingStatus(const std::string& name);
  // A command taken from the queue that names another node, moved to that node's queue in one
  // script call (forward.lua); false when that node has no live server.
  bool Forwarded(const std::string& raw, const std::string& node);
  TensorRecord NewRecord(const Command& cmd) const;
  // The holder ("PID:START") a get or delete names with owner_pid, "" for none.
  Result<std::string> HolderOf(const Command& cmd) const;

  const ServerOptions& opt_;
  const std::string instance_;
  const std::string processing_key_;
  RedisConnection& redis_;
  CommitPipeline& pipeline_;
  Intake& intake_;
  TensorTable& table_;
  DeviceSet& devices_;
  OutcomeLog& outcomes_;
  NodeCopier& copier_;
  Responder responder_;  // the route of the command at hand, error replies, the resume
};

}  // namespace mcd
