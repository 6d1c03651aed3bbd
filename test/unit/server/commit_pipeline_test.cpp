// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// CommitPipeline (server/commit_pipeline.h), the serving connection's owner, over a real
// redis-server: pipelined commits settle in order, a plain command drains first, and NOSCRIPT
// after SCRIPT FLUSH loads the script again and reruns the commit. Main thread only.
#include "server/commit_pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/server_options.h"
#include "test_support.h"

namespace mcd {
namespace {

class CommitPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    opt_.redis_url = redis_.parsed_url();
    opt_.node = "n1";
    pipeline_ = std::make_unique<CommitPipeline>(redis_.Connect(), CommitOptionsOf(opt_), "inst1");
    ASSERT_TRUE(pipeline_->LoadScript().ok());
    side_ = redis_.Connect();
  }

  // A commit creating tensor `name` with field "bytes" = `bytes`, whose continuation appends
  // its name and result to settled_.
  Pending Create(const std::string& name, const std::string& bytes) {
    return pipeline_->Make(
        Route{}, "", "", name, "", Pre::kAbsent,
        CommitChange::Hset({"bytes", bytes, "owner", "inst1", "state", "ready"}), CommitEvent{},
        [this, name](Pending&, Result<CommitResult> r) {
          settled_.push_back(name + ":" + (r.ok() ? std::to_string(r->kind) : "error"));
        });
  }
  std::string Field(const std::string& name, const std::string& field) {
    auto v = side_->Command({"HGET", opt_.keys.Tensor(name), field});
    return v.ok() ? v->str : "error: " + v.status().ToString();
  }

  test::RedisServer redis_;
  ServerOptions opt_;
  std::unique_ptr<CommitPipeline> pipeline_;
  std::unique_ptr<RedisConnection> side_;
  std::vector<std::string> settled_;
};

TEST_F(CommitPipelineTest, PipelinedCommitsSettleInTheOrderSent) {
  for (const char* name : {"a", "b", "c"}) pipeline_->Queue(Create(name, "16"));
  pipeline_->Flush();
  EXPECT_TRUE(pipeline_->IsDue("b"));
  pipeline_->Drain();
  EXPECT_FALSE(pipeline_->IsDue("b"));
  EXPECT_EQ(settled_, (std::vector<std::string>{"a:0", "b:0", "c:0"}));
  EXPECT_EQ(Field("c", "bytes"), "16");
  // The same create again: the hash exists, so the script answers a conflict.
  pipeline_->Queue(Create("a", "32"));
  pipeline_->Flush();
  pipeline_->Drain();
  EXPECT_EQ(settled_.back(), "a:" + std::to_string(CommitResult::kConflict));
  EXPECT_EQ(Field("a", "bytes"), "16");
}

// While the connection is lent its holder may have replies outstanding that the pipeline does
// not know of: any use of the pipeline then would read them as its own, so it is asserted.
TEST_F(CommitPipelineTest, UsingThePipelineWhileItsConnectionIsLentIsCaught) {
  {
    ConnectionLease lease = pipeline_->Drained();
    EXPECT_DEBUG_DEATH((void)pipeline_->Command({"PING"}), "lent");
    EXPECT_DEBUG_DEATH(pipeline_->Flush(), "lent");
    EXPECT_DEBUG_DEATH(pipeline_->Drain(), "lent");
    EXPECT_DEBUG_DEATH(pipeline_->SendTake(), "lent");
    EXPECT_DEBUG_DEATH((void)pipeline_->CommitNow(Create("x", "8")), "lent");
    EXPECT_DEBUG_DEATH((void)pipeline_->Drained(), "lent");
  }
  pipeline_->Drain();  // a release build ran them: the take sent above
  // The lease over, the pipeline is its own again.
  auto pong = pipeline_->Command({"PING"});
  ASSERT_TRUE(pong.ok()) << pong.status().ToString();
  EXPECT_EQ(pong->str, "PONG");
}

TEST_F(CommitPipelineTest, APlainCommandReadsTheRepliesDueFirst) {
  pipeline_->Queue(Create("t", "64"));
  pipeline_->Flush();  // sent, its reply not read
  ASSERT_TRUE(settled_.empty());
  auto bytes = pipeline_->Command({"HGET", opt_.keys.Tensor("t"), "bytes"});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(bytes->str, "64");  // its own reply, not the commit's
  EXPECT_EQ(settled_, (std::vector<std::string>{"t:0"}));
  EXPECT_FALSE(pipeline_->IsDue("t"));
}

TEST_F(CommitPipelineTest, NoscriptAfterScriptFlushLoadsTheScriptAndRunsTheCommitAgain) {
  ASSERT_TRUE(side_->Command({"SCRIPT", "FLUSH"}).ok());
  pipeline_->Queue(Create("p", "8"));
  pipeline_->Queue(Create("q", "8"));
  pipeline_->Flush();
  pipeline_->Drain();
  EXPECT_EQ(settled_, (std::vector<std::string>{"p:0", "q:0"}));
  EXPECT_EQ(Field("q", "owner"), "inst1");
  // And CommitNow, after another flush.
  ASSERT_TRUE(side_->Command({"SCRIPT", "FLUSH"}).ok());
  auto now = pipeline_->CommitNow(Create("r", "8"));
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_EQ(now->kind, CommitResult::kOk);
  EXPECT_EQ(Field("r", "bytes"), "8");
}

TEST_F(CommitPipelineTest, TheTakeSentAheadIsReadAfterTheCommitsBeforeIt) {
  std::string queue = opt_.keys.NodeQueue("n1");
  ASSERT_TRUE(side_->Command({"LPUSH", queue, "c1", "c2"}).ok());
  pipeline_->Queue(Create("x", "1"));
  pipeline_->Flush();
  pipeline_->SendTake();  // 4 LMOVEs
  auto taken = pipeline_->TakeReply();
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(settled_, (std::vector<std::string>{"x:0"}));
  ASSERT_EQ(taken->elements.size(), 2u);
  EXPECT_EQ(taken->elements[0].str, "c1");
  auto processing = side_->Command({"LLEN", opt_.keys.Processing("n1")});
  EXPECT_EQ(processing->integer, 2);
}

}  // namespace
}  // namespace mcd
