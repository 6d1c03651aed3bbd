// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Responder (server/responder.h) over a real redis-server: an error reply goes to a socket
// command's connection, and to Redis for a list command (which then leaves the processing list);
// a refusal that may pass leaves the list command to be resumed, one that will not answers it.
#include "server/responder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "protocol/json_codec.h"
#include "server/server_options.h"
#include "test_support.h"
#include "unit/socket_client.h"

namespace mcd {
namespace {

const char* kCommand = R"({"op":"get","name":"t1","req":"r1"})";

ServerOptions Options(const test::RedisServer& redis) {
  ServerOptions opt;
  opt.redis_url = redis.parsed_url();
  opt.node = "n1";
  return opt;
}

class ResponderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pipeline_.LoadScript().ok());
    ASSERT_TRUE(side_->Command({"LPUSH", processing_, kCommand}).ok());
  }
  test::RedisServer redis_;
  ServerOptions opt_ = Options(redis_);
  std::string processing_ = opt_.keys.Processing("n1");
  std::unique_ptr<RedisConnection> side_ = redis_.Connect();
  CommitPipeline pipeline_{redis_.Connect(), CommitOptionsOf(opt_), "inst1"};
  Waker waker_{redis_.parsed_url(), opt_.keys.NodeQueue("n1")};
  Intake intake_{opt_.keys.NodeQueue("n1"), processing_, waker_};
  Responder responder_{processing_, pipeline_, intake_};
  Status not_found_{ErrorCode::kNotFound, "no tensor named 't1'"};
};

TEST_F(ResponderTest, AListCommandsErrorReplyIsCommittedAndTheCommandLeavesTheList) {
  Request request = Intake::FromList(kCommand);
  responder_.Fail(request, "get", not_found_);
  EXPECT_EQ(test::List(*side_, processing_).size(), 1u);  // queued with the batch, not sent yet
  pipeline_.Flush();
  pipeline_.Drain();
  EXPECT_EQ(test::List(*side_, opt_.keys.Reply("r1")),
            std::vector<std::string>{ErrorReplyJson("r1", "get", not_found_)});
  EXPECT_TRUE(test::List(*side_, processing_).empty());
}

TEST_F(ResponderTest, ASocketCommandsErrorReplyGoesToItsConnectionAndNotToRedis) {
  test::TempDir dir;
  ASSERT_TRUE(intake_.ListenOnSocket(dir.path() + "/cmd.sock", PeerPolicy{geteuid()}).ok());
  test::SocketClient client(dir.path() + "/cmd.sock");
  client.Send(kCommand);
  test::CollectSocketLine(intake_);
  std::vector<Request> requests = intake_.Requests(RedisValue{});
  ASSERT_EQ(requests.size(), 1u);
  responder_.Fail(requests[0], "get", not_found_);
  EXPECT_EQ(client.ReadLine(), ErrorReplyJson("r1", "get", not_found_));
  EXPECT_FALSE(intake_.Waiting(requests[0].route));
  pipeline_.Flush();
  pipeline_.Drain();
  EXPECT_TRUE(test::List(*side_, opt_.keys.Reply("r1")).empty());
  EXPECT_EQ(test::List(*side_, processing_).size(), 1u);  // the list's own command, untouched
}

TEST_F(ResponderTest, ARefusalThatMayPassLeavesTheCommandToBeResumed) {
  Request request = Intake::FromList(kCommand);
  responder_.Refused(request, "get",
                     Status(ErrorCode::kTryAgain,
                            "Redis EVALSHA: BUSY Redis is busy running a "
                            "script. script: abc, on @user_script:1."));
  EXPECT_EQ(test::List(*side_, processing_), std::vector<std::string>{kCommand});
  EXPECT_TRUE(test::List(*side_, opt_.keys.Reply("r1")).empty());
  EXPECT_FALSE(responder_.ResumeDue());  // a second after the refusal
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!responder_.ResumeDue() && std::chrono::steady_clock::now() < deadline)
    poll(nullptr, 0, 50);
  EXPECT_TRUE(responder_.ResumeDue());
}

TEST_F(ResponderTest, ARefusalThatWillNotPassIsAnsweredAndTheCommandLeavesTheList) {
  Request request = Intake::FromList(kCommand);
  responder_.Refused(request, "get",
                     Status(ErrorCode::kRedisError,
                            "Redis EVALSHA: OOM command not allowed when used memory > "
                            "'maxmemory'. script: abc, on @user_script:1."));
  EXPECT_TRUE(test::List(*side_, processing_).empty());
  std::vector<std::string> reply = test::List(*side_, opt_.keys.Reply("r1"));
  ASSERT_EQ(reply.size(), 1u);
  EXPECT_NE(reply[0].find("Redis refused the change: OOM command not allowed"), std::string::npos)
      << reply[0];
  EXPECT_FALSE(responder_.ResumeDue());
}

// A socket request (its route waiting for an answer) made from kCommand on `client`.
class ResponderSocketTest : public ResponderTest {
 protected:
  void SetUp() override {
    ResponderTest::SetUp();
    ASSERT_TRUE(intake_.ListenOnSocket(dir_.path() + "/cmd.sock", PeerPolicy{geteuid()}).ok());
    client_ = std::make_unique<test::SocketClient>(dir_.path() + "/cmd.sock");
    client_->Send(kCommand);
    test::CollectSocketLine(intake_);
    std::vector<Request> requests = intake_.Requests(RedisValue{});
    ASSERT_EQ(requests.size(), 1u);
    request_ = std::move(requests[0]);
  }
  // The get's commit as the applier makes it: the reply's head and tails around the count.
  Pending Get() {
    parts_ = TensorReplyHead("r1", Op::kGet, R"({"name":"t1")");
    return pipeline_.Make(request_.route, request_.raw, request_.req, "t1", parts_.head, Pre::kMine,
                          CommitChange::Incr("", 1, parts_.held_tail, parts_.freed_tail),
                          CommitEvent{});
  }

  test::TempDir dir_;
  std::unique_ptr<test::SocketClient> client_;
  Request request_;
  TensorReplyParts parts_;
};

TEST_F(ResponderSocketTest, ACommittedGetIsAnsweredOnItsConnectionWithTheCountAndTheHeldTail) {
  Pending pending = Get();
  std::vector<std::string> handled;
  responder_.Committed(pending, CommitResult{CommitResult::kOk, 2}, [&](Result<CommitResult> r) {
    handled.push_back(r.ok() ? "ok" : "failed");
  });
  EXPECT_EQ(client_->ReadLine(),
            TensorReplyJson(parts_.head, 2, parts_.held_tail, parts_.freed_tail));
  EXPECT_EQ(handled, std::vector<std::string>{"ok"});
  EXPECT_FALSE(intake_.Waiting(request_.route));
  EXPECT_TRUE(test::List(*side_, opt_.keys.Reply("r1")).empty());  // nothing written to Redis
}

TEST_F(ResponderSocketTest, ACommittedReleaseToZeroIsAnsweredWithTheFreedTail) {
  Pending pending = Get();
  responder_.Committed(pending, CommitResult{CommitResult::kOk, 0}, [](Result<CommitResult>) {});
  std::string reply = client_->ReadLine();
  EXPECT_EQ(reply, TensorReplyJson(parts_.head, 0, parts_.held_tail, parts_.freed_tail));
  EXPECT_NE(reply, TensorReplyJson(parts_.head, 0, parts_.held_tail, parts_.held_tail));
}

TEST_F(ResponderSocketTest, ACommitWithoutAnAnswerFromRedisIsToldItsOutcomeIsUnknown) {
  Pending pending = Get();
  std::vector<std::string> handled;
  responder_.Committed(
      pending, Status(ErrorCode::kUnavailable, "Redis connection lost"),
      [&](Result<CommitResult> r) { handled.push_back(r.ok() ? "ok" : r.status().message()); });
  EXPECT_EQ(handled, std::vector<std::string>{"Redis connection lost"});
  std::string reply = client_->ReadLine();
  EXPECT_NE(reply.find("\"ok\":false"), std::string::npos) << reply;
  EXPECT_NE(reply.find("may or may not have taken effect"), std::string::npos) << reply;
  EXPECT_NE(reply.find("Redis connection lost"), std::string::npos) << reply;
  EXPECT_FALSE(intake_.Waiting(request_.route));
}

}  // namespace
}  // namespace mcd
