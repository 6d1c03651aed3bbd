// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/responder.h"

#include <algorithm>

#include "common/log.h"
#include "protocol/json_codec.h"
#include "server/replies.h"

namespace mcd {

Responder::Responder(std::string processing_key, CommitPipeline& pipeline, Intake& intake)
    : processing_key_(std::move(processing_key)), pipeline_(pipeline), intake_(intake) {}

void Responder::Fail(const Request& request, const char* op, const Status& status) {
  if (request.route.socket()) {
    intake_.Answer(request.route, ErrorReplyJson(request.req, op, status));
    return;
  }
  pipeline_.Queue(pipeline_.Make(request.route, request.raw, request.req, "",
                                 ErrorReplyJson(request.req, op, status), Pre::kNone,
                                 CommitChange::None(), CommitEvent{},
                                 [this, raw = request.raw](Pending&, Result<CommitResult> r) {
                                   if (!r.ok()) Unanswered(raw, r.status());
                                 }));
}

void Responder::AnswerNow(const Request& request, const char* op, const Status& status) {
  if (request.route.socket()) {
    intake_.Answer(request.route, ErrorReplyJson(request.req, op, status));
    return;
  }
  auto answered = pipeline_.CommitNow(pipeline_.Make(
      request.route, request.raw, request.req, "", ErrorReplyJson(request.req, op, status),
      Pre::kNone, CommitChange::None(), CommitEvent{}));
  if (!answered.ok()) Unanswered(request.raw, answered.status());
}

void Responder::AnswerUnknown(const Pending& pending, const Status& failed) {
  if (!intake_.Waiting(pending.route)) return;
  // Not answered by the handling: the commit got no answer from Redis (the connection broke).
  Status unknown(failed.ok() ? ErrorCode::kInternal : failed.code(),
                 "the server lost Redis before the change was confirmed, so it may or may not have "
                 "taken effect: check with mcd-ls before repeating it (" +
                     failed.message() + ")");
  intake_.Answer(pending.route, ErrorReplyJson(pending.req, nullptr, unknown));
}

void Responder::Unanswered(const std::string& raw, const Status& status) {
  if (RefusedByRedis(status) && pipeline_.connected()) {
    return MayPass(RedisWords(status)) ? ResumeLater() : Drop(raw, status);
  }
  Log(LogLevel::kError, "cannot write error reply: " + status.ToString());
}

void Responder::Refused(const Request& request, const char* op, const Status& status) {
  if (!RefusedByRedis(status) || !pipeline_.connected() || request.raw.empty()) return;
  std::string words = RedisWords(status);
  // A socket command is not kept to be tried again: its client hears Redis's words and decides
  // (AnswerNow answers it on the socket), told to try again when the refusal may pass.
  bool passes = MayPass(words);
  if (!request.route.socket() && passes) return ResumeLater();
  AnswerNow(request, op,
            Status(passes ? ErrorCode::kTryAgain : ErrorCode::kRedisError,
                   "Redis refused the change: " + words +
                       (passes ? " (nothing changed: try again in a moment)" : "")));
}

void Responder::ResumeLater() {
  if (!resume_due_) resume_at_ = Clock::now() + std::chrono::seconds(1);
  resume_due_ = true;
}

void Responder::Drop(const std::string& raw, const Status& why) {
  auto removed = pipeline_.Command({"LREM", processing_key_, "-1", raw});
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
