// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Applying commands: each command of a batch is checked, its memory allocated or freed through
// the device's allocator, and its effect queued as one commit (commit_pipeline.h); its reply goes
// back on the route it came by (responder.h). Main thread of the server only.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "memcuda/protocol.h"
#include "server/commit_pipeline.h"
#include "server/device_set.h"
#include "server/intake.h"
#include "server/node_copy.h"
#include "server/outcome_log.h"
#include "server/request.h"
#include "server/responder.h"
#include "server/tensor_table.h"

namespace mcd {

// What the applier needs of the server's options.
struct ApplierOptions {
  KeySpace keys;
  std::string node;      // the node served
  std::string instance;  // this server's instance id, the owner of the hashes it writes
};

// The record of a tensor `cmd` creates, before its memory is known.
TensorRecord NewRecord(const Command& cmd, const ApplierOptions& opt);
// The process that fills a create with "fill" (nullopt for a create without): its pid and start
// time; kInvalidArgument when its pid names no process here.
Result<std::optional<Holder>> FillerOf(const Command& cmd);

class SetApplier;

class CommandApplier {
 public:
  using Clock = std::chrono::steady_clock;
  CommandApplier(ApplierOptions opt, CommitPipeline& pipeline, Intake& intake, TensorTable& table,
                 DeviceSet& devices, OutcomeLog& outcomes, NodeCopier& copier);
  ~CommandApplier();

  // Plans the batch's requests in order and sends their commits pipelined. A command naming a
  // tensor that an earlier one of the batch touched, or whose commit is still on its way, waits
  // until those are committed, so each sees the effects of the ones before it.
  void ProcessBatch(std::vector<Request> requests);
  // Handles the processing list again (the commands a previous instance or a lost connection left
  // there, oldest first).
  Status ResumeUnfinished();
  // Commands left in the processing list by a refusal that may pass are resumed from there once
  // nothing is in flight: a second after the refusal, then after 2, 4, 8 and 10 s while they keep
  // being refused. ResumeDue: that time has come; ResumeNow: resume them, with nothing in flight.
  bool ResumeDue() const { return responder_.ResumeDue(); }
  void ResumeNow();
  // Queues the removal of the lists of the sets whose last member left the table
  // (SetApplier::DropEmptied); the caller flushes.
  void DropEmptiedSets();
  // The creates whose copy from another node ended since the last call: committed, or failed
  // and answered (NodeCopier::FinishCopies); the commits are sent.
  void FinishCopies();
  // At stop: the copies under way called off, or waited for where their bytes are arriving
  // (NodeCopier::StopCopies), and answered; the caller drains.
  void StopCopies();

 private:
  // Each Handle* takes the request (its parsed command ok) and queues its commit, whose
  // continuation owns the request from then on; or answers it with why not.
  void Handle(Request& request);
  void HandleCreate(Request& request);
  // A create's memory is allocated (and filled, for a copy): its hash is written.
  void CommitCreate(Request& request, TensorRecord record, Allocation allocation,
                    std::optional<Holder> filler, Clock::time_point t0);
  // Queues `pending`, a commit of `request` whose result goes to `then(request, result)`.
  template <typename Then>
  void Queue(Pending pending, Request& request, Then then);
  // The create's commit went through, or not: keep, settle later, or free and answer.
  void CreateCommitted(const Request& request, Entry entry, Clock::time_point t0,
                       Result<CommitResult> committed);
  // publish: the filler of a "creating" tensor says its bytes are in; the hash turns "ready" and
  // the create event goes out. abandon: the filler gives up, and the tensor goes unpublished.
  void HandlePublish(Request& request);
  void PublishCommitted(const Request& request, Clock::time_point t0,
                        Result<CommitResult> committed);
  void HandleAbandon(Request& request);
  // Why a command of `cmd.pid` may not publish or abandon tensor `entry` (ok when it may).
  Status FillerCheck(const Entry& entry, const Command& cmd) const;
  // The entry of the tensor `cmd` publishes or abandons, or end() once the command is answered
  // with why it may not.
  TensorTable::Map::iterator FillersEntry(const Request& request, Clock::time_point t0);
  // get (delta +1) and delete (-1): refcount changed in Redis; at 0 the hash goes (in the
  // script) before the memory.
  void HandleRefcount(Request& request, int delta);
  void RefcountCommitted(const Request& request, const char* op, Clock::time_point t0,
                         Result<CommitResult> committed);
  // Why `name` cannot be used here: on another node, not ready, of a dead instance, or absent.
  Status MissingStatus(const std::string& name);
  // A command taken from the queue that names another node, moved to that node's queue in one
  // script call (forward.lua); false when that node has no live server.
  bool Forwarded(const std::string& raw, const std::string& node);
  // The holder ("PID:START") a get or delete names with owner_pid, "" for none.
  Result<std::string> HolderOf(const Command& cmd) const;

  const ApplierOptions opt_;
  CommitPipeline& pipeline_;
  Intake& intake_;
  TensorTable& table_;
  DeviceSet& devices_;
  OutcomeLog& outcomes_;
  NodeCopier& copier_;
  Responder responder_;               // replies on a request's route, Redis's refusals, the resume
  std::unique_ptr<SetApplier> sets_;  // create_set, and publish and abandon of a set
};

}  // namespace mcd
