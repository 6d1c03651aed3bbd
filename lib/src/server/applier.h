// Applying commands: each command of a batch is checked, its memory allocated or freed through
// the device's allocator, and its effect queued as one commit (commit_pipeline.h); its reply goes
// back on the route it came by. Also the stack reaper (a stack tensor goes when its owner
// process dies) and the resume of commands that Redis refused for a moment. Main thread of the
// server only.
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
#include "server/outcome_log.h"
#include "server/tensor_table.h"

namespace mcd {


class CommandApplier {
 public:
  using Clock = std::chrono::steady_clock;
  CommandApplier(const ServerOptions& opt, std::string instance, RedisConnection& redis, CommitPipeline& pipeline,
                 Intake& intake, TensorTable& table, DeviceSet& devices, OutcomeLog& outcomes);

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
  bool ResumeDue() const { return resume_due_ && Clock::now() >= resume_at_; }
  void ResumeNow();
  // Deletes the stack tensors whose owner process is gone, and frees their memory.
  void ReapStackTensors();

 private:
  void Handle(const std::string& raw, const Result<Command>& parsed, const std::string& req);
  void HandleCreate(const std::string& raw, const Command& cmd);
  // The create's commit went through, or not: keep, settle later, or free and answer.
  void CreateCommitted(const std::string& raw, const Command& cmd, Entry entry, Clock::time_point t0,
                       Result<CommitResult> committed);
  // get (delta +1) and delete (-1): refcount changed in Redis; at 0 the hash goes (in the
  // script) before the memory.
  void HandleRefcount(const std::string& raw, const Command& cmd, int delta);
  void RefcountCommitted(const std::string& raw, const std::string& req, const std::string& name, const char* op,
                         Clock::time_point t0, Result<CommitResult> committed);
  // Why `name` cannot be used here: on another node, not ready, of a dead instance, or absent.
  Status MissingStatus(const std::string& name);
  TensorRecord NewRecord(const Command& cmd) const;

  // Error replies. Fail: queued with the batch (on the socket: sent at once). AnswerNow: written
  // now, and the command leaves the processing list.
  void Fail(const std::string& raw, const std::string& req, const char* op, const Status& status);
  void AnswerNow(const std::string& raw, const std::string& req, const char* op, const Status& status);
  // After a commit that Redis answered with an error (a key of the wrong type, Redis out of
  // memory under maxmemory): nothing of it was applied. The client gets an error reply; if Redis
  // refuses that too, the command still leaves the processing list (Drop), so that it is neither
  // run again after a reconnect nor waited for. An error that may pass (Redis busy with a
  // script, loading, a missing ACL permission) leaves the command in the list instead, to be
  // resumed (ResumeLater). Only on a live connection: after a lost one, the commands left in the
  // list are resumed after reconnecting.
  void Refused(const std::string& raw, const std::string& req, const char* op, const Status& status);
  // An error reply that could not be written: logged; on a live connection the command is
  // dropped all the same, or resumed later when the refusal may pass.
  void Unanswered(const std::string& raw, const Status& status);
  // Removes a command from the processing list without a reply (LREM needs no memory, so it
  // works when Redis refuses writes for lack of it).
  void Drop(const std::string& raw, const Status& why);
  void ResumeLater();

  const ServerOptions& opt_;
  const std::string instance_;
  const std::string processing_key_;
  RedisConnection& redis_;
  CommitPipeline& pipeline_;
  Intake& intake_;
  TensorTable& table_;
  DeviceSet& devices_;
  OutcomeLog& outcomes_;
  // The route of the command being handled, or whose commit's result is being acted on: where
  // Fail, AnswerNow and Refused answer, and how commits are made. Conn 0 (the list) otherwise.
  Route route_;
  bool resume_due_ = false;
  Clock::time_point resume_at_{};
  int resume_rounds_ = 0;  // resumes in a row that left commands behind again
};

}  // namespace mcd
