// Where a command's answer goes, and what happens when Redis refuses one: an error reply on the
// command's route (its socket connection, or a commit that writes the reply to Redis and takes
// the command off the processing list), a command left in the list to be resumed when Redis's
// refusal may pass, or dropped when it will not. Main thread of the server only.
#pragma once

#include <chrono>
#include <string>

#include "memcuda/redis.h"
#include "memcuda/server.h"
#include "server/commit_pipeline.h"
#include "server/intake.h"

namespace mcd {

class Responder {
 public:
  using Clock = std::chrono::steady_clock;
  Responder(const ServerOptions& opt, RedisConnection& redis, CommitPipeline& pipeline,
            Intake& intake);

  // The route of the command being handled, or whose commit's result is being acted on: where
  // the replies below go, and how commits are made. Conn 0 (the list) otherwise.
  const Route& route() const { return route_; }
  void set_route(const Route& route) { route_ = route; }

  // Error replies. Fail: queued with the batch (on the socket: sent at once). AnswerNow: written
  // now, and the command leaves the processing list.
  void Fail(const std::string& raw, const std::string& req, const char* op, const Status& status);
  void AnswerNow(const std::string& raw, const std::string& req, const char* op,
                 const Status& status);
  // After a commit that Redis answered with an error (a key of the wrong type, Redis out of
  // memory under maxmemory): nothing of it was applied. The client gets an error reply; if Redis
  // refuses that too, the command still leaves the processing list (Drop), so that it is neither
  // run again after a reconnect nor waited for. An error that may pass (Redis busy with a
  // script, loading, a missing ACL permission) leaves the command in the list instead, to be
  // resumed. Only on a live connection: after a lost one, the commands left in the list are
  // resumed after reconnecting.
  void Refused(const std::string& raw, const std::string& req, const char* op,
               const Status& status);

  // Commands left in the processing list by a refusal that may pass are resumed from there once
  // nothing is in flight: a second after the refusal, then after 2, 4, 8 and 10 s while they keep
  // being refused. ResumeDue: that time has come; BeginResume and EndResume frame the resume.
  bool ResumeDue() const { return resume_due_ && Clock::now() >= resume_at_; }
  void BeginResume() { resume_due_ = false; }
  void EndResume();

 private:
  // An error reply that could not be written: logged; on a live connection the command is
  // dropped all the same, or resumed later when the refusal may pass.
  void Unanswered(const std::string& raw, const Status& status);
  // Removes a command from the processing list without a reply (LREM needs no memory, so it
  // works when Redis refuses writes for lack of it).
  void Drop(const std::string& raw, const Status& why);
  void ResumeLater();

  const ServerOptions& opt_;
  const std::string processing_key_;
  RedisConnection& redis_;
  CommitPipeline& pipeline_;
  Intake& intake_;
  Route route_;
  bool resume_due_ = false;
  Clock::time_point resume_at_{};
  int resume_rounds_ = 0;  // resumes in a row that left commands behind again
};

}  // namespace mcd
