// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Where a command's answer goes, and what happens when Redis refuses one: an error reply on the
// request's route (its socket connection, or a commit that writes the reply to Redis and takes
// the command off the processing list), a command left in the list to be resumed when Redis's
// refusal may pass, or dropped when it will not; and the socket reply of a commit that went
// through. Main thread of the server only.
#pragma once

#include <chrono>
#include <string>

#include "memcuda/redis.h"
#include "server/commit_pipeline.h"
#include "server/intake.h"
#include "server/request.h"

namespace mcd {

class Responder {
 public:
  using Clock = std::chrono::steady_clock;
  // `processing_key`: the node's processing list, where the list's commands wait for their commit.
  Responder(std::string processing_key, CommitPipeline& pipeline, Intake& intake);

  // Error replies to `request`. Fail: queued with the batch (on the socket: sent at once).
  // AnswerNow: written now, and the command leaves the processing list.
  void Fail(const Request& request, const char* op, const Status& status);
  void AnswerNow(const Request& request, const char* op, const Status& status);
  // After a commit that Redis answered with an error (a key of the wrong type, Redis out of
  // memory under maxmemory): nothing of it was applied. The client gets an error reply; if Redis
  // refuses that too, the command still leaves the processing list (Drop), so that it is neither
  // run again after a reconnect nor waited for. An error that may pass (Redis busy with a
  // script, loading, a missing ACL permission) leaves the command in the list instead, to be
  // resumed. Only on a live connection: after a lost one, the commands left in the list are
  // resumed after reconnecting.
  void Refused(const Request& request, const char* op, const Status& status);

  // The commit `pending` of a request came back with `result`: a socket command whose commit went
  // through gets its success reply, then `then(result)` handles the result (and may answer
  // otherwise), then a socket command still unanswered is told that its outcome is unknown (its
  // commit got no answer from Redis: the connection broke).
  template <typename Then>
  void Committed(Pending& pending, Result<CommitResult> result, Then&& then) {
    bool socket = pending.route.socket();
    if (socket && result.ok() && result->kind == CommitResult::kOk)
      intake_.Answer(pending.route, CommitPipeline::SocketReply(pending, *result));
    Status failed = result.ok() ? Status::Ok() : result.status();
    then(std::move(result));
    if (socket) AnswerUnknown(pending, failed);
  }

  // Commands left in the processing list by a refusal that may pass are resumed from there once
  // nothing is in flight: a second after the refusal, then after 2, 4, 8 and 10 s while they keep
  // being refused. ResumeDue: that time has come; BeginResume and EndResume frame the resume.
  bool ResumeDue() const { return resume_due_ && Clock::now() >= resume_at_; }
  void BeginResume() { resume_due_ = false; }
  void EndResume();

 private:
  void AnswerUnknown(const Pending& pending, const Status& failed);
  // An error reply that could not be written: logged; on a live connection the command is
  // dropped all the same, or resumed later when the refusal may pass.
  void Unanswered(const std::string& raw, const Status& status);
  // Removes a command from the processing list without a reply (LREM needs no memory, so it
  // works when Redis refuses writes for lack of it).
  void Drop(const std::string& raw, const Status& why);
  void ResumeLater();

  const std::string processing_key_;
  CommitPipeline& pipeline_;
  Intake& intake_;
  bool resume_due_ = false;
  Clock::time_point resume_at_{};
  int resume_rounds_ = 0;  // resumes in a row that left commands behind again
};

}  // namespace mcd
