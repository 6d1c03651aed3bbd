#include "server/responder.h"

#include <algorithm>

#include "common/log.h"
#include "protocol/json_codec.h"
#include "server/replies.h"

namespace mcd {

Responder::Responder(const ServerOptions& opt, RedisConnection& redis, CommitPipeline& pipeline,
                     Intake& intake)
    : opt_(opt),
      processing_key_(opt.keys.Processing(opt.node)),
      redis_(redis),
      pipeline_(pipeline),
      intake_(intake) {}

void Responder::Fail(const std::string& raw, const std::string& req, const char* op,
                     const Status& status) {
  if (route_.socket()) {
    intake_.Answer(route_, ErrorReplyJson(req, op, status));
    return;
  }
  pipeline_.Queue(pipeline_.Make(route_, raw, req, "", ErrorReplyJson(req, op, status), Pre::kNone,
                                 "none", CommitEvent{}, {}, [this, raw](Result<CommitResult> r) {
                                   if (!r.ok()) Unanswered(raw, r.status());
                                 }));
}

void Responder::AnswerNow(const std::string& raw, const std::string& req, const char* op,
                          const Status& status) {
  if (route_.socket()) {
    intake_.Answer(route_, ErrorReplyJson(req, op, status));
    return;
  }
  auto answered = pipeline_.CommitNow(pipeline_.Make(
      route_, raw, req, "", ErrorReplyJson(req, op, status), Pre::kNone, "none", CommitEvent{},
      {}));
  if (!answered.ok()) Unanswered(raw, answered.status());
}

void Responder::Unanswered(const std::string& raw, const Status& status) {
  if (RefusedByRedis(status) && redis_.connected()) {
    return MayPass(RedisWords(status)) ? ResumeLater() : Drop(raw, status);
  }
  Log(LogLevel::kError, "cannot write error reply: " + status.ToString());
}

void Responder::Refused(const std::string& raw, const std::string& req, const char* op,
                        const Status& status) {
  if (!RefusedByRedis(status) || !redis_.connected() || raw.empty()) return;
  std::string words = RedisWords(status);
  // A socket command is not kept to be tried again: its client hears Redis's words and decides
  // (AnswerNow answers it on the socket), told to try again when the refusal may pass.
  bool passes = MayPass(words);
  if (!route_.socket() && passes) return ResumeLater();
  AnswerNow(raw, req, op,
            Status(passes ? ErrorCode::kTryAgain : ErrorCode::kRedisError,
                   "Redis refused the change: " + words +
                       (passes ? " (nothing changed: try again in a moment)" : "")));
}

void Responder::ResumeLater() {
  if (!resume_due_) resume_at_ = Clock::now() + std::chrono::seconds(1);
  resume_due_ = true;
}

void Responder::Drop(const std::string& raw, const Status& why) {
  pipeline_.Drain();
  auto removed = redis_.Command({"LREM", processing_key_, "-1", raw});
  std::string what = "command " + raw.substr(0, 200) + " got no reply (" + why.message() + ")";
  if (removed.ok()) return Log(LogLevel::kWarn, what + "; dropped");
  Log(LogLevel::kError, what + " and cannot be dropped: " + removed.status().ToString());
}

void Responder::EndResume() {
  // Still refused: the next round waits longer, up to 10 s.
  resume_rounds_ = resume_due_ ? resume_rounds_ + 1 : 0;
  resume_at_ = Clock::now() + std::chrono::seconds(std::min(10, 1 << std::min(resume_rounds_, 4)));
}

}  // namespace mcd
