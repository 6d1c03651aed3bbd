// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// ServerView over heartbeats planted in a real redis-server: a live server, a dead one, a
// malformed field, and finding the node's server. Main thread only.
#include "client/server_view.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "common/process.h"
#include "memcuda/heartbeat.h"
#include "test_support.h"

namespace mcd {
namespace {

class ServerViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    conn_ = redis_.Connect();
    ASSERT_NE(conn_, nullptr);
    opt_.redis_url = redis_.parsed_url();
    opt_.node = "n1";
  }

  // A heartbeat as a live server of this process would write it.
  HeartbeatRecord LiveHere(const std::string& node, const std::string& instance) const {
    HeartbeatRecord hb;
    hb.instance = instance;
    hb.pid = getpid();
    hb.pid_start = ProcessStartTime(getpid());
    hb.pid_space = PidSpace();
    hb.node = node;
    hb.devices = "cpu";
    hb.allocator = "cpu:host_shm";
    hb.command_socket = "/nowhere/cmd.sock";
    hb.queue = opt_.keys.queue;
    hb.node_queue = opt_.keys.NodeQueue(node);
    hb.version = "1";
    hb.event_history = 100;
    hb.settled = "abc";
    return hb;
  }

  void Plant(const std::string& node,
             const std::vector<std::pair<std::string, std::string>>& fields) {
    std::vector<std::string> args = {"HSET", opt_.keys.Server(node)};
    for (const auto& [field, value] : fields) {
      args.push_back(field);
      args.push_back(value);
    }
    ASSERT_TRUE(conn_->Command(std::vector<std::string_view>(args.begin(), args.end())).ok());
    ASSERT_TRUE(conn_->Command({"EXPIRE", opt_.keys.Server(node), "60"}).ok());
  }
  void Plant(const HeartbeatRecord& hb) { Plant(hb.node, HeartbeatFields(hb)); }

  // A pid that named a process of this host a moment ago, and names none now.
  static int64_t GonePid() {
    pid_t child = fork();
    if (child == 0) _exit(0);
    int status = 0;
    waitpid(child, &status, 0);
    return child;
  }

  test::RedisServer redis_;
  std::unique_ptr<RedisConnection> conn_;
  ClientOptions opt_;
};

TEST_F(ServerViewTest, ReadsALiveServersHeartbeatThroughTheCodec) {
  HeartbeatRecord planted = LiveHere("n1", "i1");
  Plant(planted);
  ServerView view(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
  EXPECT_FALSE(view.known());
  auto read = view.Read();
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(HeartbeatFields(*read), HeartbeatFields(planted));
  view.Adopt(std::move(read).value());
  EXPECT_TRUE(view.known());
  EXPECT_EQ(view.heartbeat().instance, "i1");
  EXPECT_EQ(view.heartbeat().pid, getpid());
  EXPECT_EQ(view.heartbeat().command_socket, "/nowhere/cmd.sock");
  EXPECT_EQ(view.queue(), opt_.keys.NodeQueue("n1"));  // its own queue, which it names
  EXPECT_TRUE(view.Alive().ok());
  EXPECT_TRUE(view.EnsureAlive().ok());
  EXPECT_FALSE(ServerView::DeadHere(view.heartbeat()));

  auto live = ServerView::Live(*conn_, opt_.keys);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].instance, "i1");
}

TEST_F(ServerViewTest, AServerWithoutANodeQueueIsSentToTheSharedOne) {
  HeartbeatRecord older = LiveHere("n1", "i1");
  older.node_queue = "";
  Plant(older);
  ServerView view(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
  ASSERT_TRUE(view.Refresh().ok());
  EXPECT_EQ(view.queue(), opt_.keys.queue);
}

TEST_F(ServerViewTest, ADeadServerIsNotLiveAndItsViewSaysSo) {
  HeartbeatRecord dead = LiveHere("n1", "dead1");
  dead.pid = GonePid();
  dead.pid_start = 0;
  Plant(dead);
  Plant(LiveHere("n2", "live2"));

  std::vector<HeartbeatRecord> gone;
  auto live = ServerView::Live(*conn_, opt_.keys, &gone);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].node, "n2");
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].instance, "dead1");
  EXPECT_TRUE(ServerView::DeadHere(gone[0]));

  ServerView view(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
  ASSERT_TRUE(view.Refresh().ok());  // its heartbeat lingers until its TTL
  Status alive = view.Alive();
  EXPECT_EQ(alive.code(), ErrorCode::kUnavailable);
  EXPECT_NE(alive.message().find("(pid " + std::to_string(dead.pid) + ") is not running"),
            std::string::npos)
      << alive.message();
}

// A heartbeat of another host or PID namespace says nothing about its pid here.
TEST_F(ServerViewTest, AServerOfAnotherPidSpaceIsNotJudged) {
  HeartbeatRecord elsewhere = LiveHere("n1", "far");
  elsewhere.pid = GonePid();
  elsewhere.pid_space = "another-boot/1";
  Plant(elsewhere);
  EXPECT_FALSE(ServerView::DeadHere(elsewhere));
  ServerView view(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
  ASSERT_TRUE(view.Refresh().ok());
  EXPECT_TRUE(view.Alive().ok());
}

TEST_F(ServerViewTest, AMalformedFieldIsRefusedWithAClearError) {
  auto fields = HeartbeatFields(LiveHere("n1", "i1"));
  for (auto& [field, value] : fields) {
    if (field == heartbeat_field::kPid) value = "4242; rm -rf";
  }
  Plant("n1", fields);
  ServerView view(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
  auto read = view.Read();
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), ErrorCode::kUnexpectedReply);
  EXPECT_NE(read.status().message().find("the heartbeat of node 'n1'"), std::string::npos)
      << read.status().message();
  EXPECT_NE(read.status().message().find("field 'pid' is '4242; rm -rf'"), std::string::npos)
      << read.status().message();
  EXPECT_FALSE(view.known());

  // Listed nowhere: it is no server's.
  std::vector<HeartbeatRecord> gone;
  auto live = ServerView::Live(*conn_, opt_.keys, &gone);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_TRUE(live->empty());
  EXPECT_TRUE(gone.empty());
}

TEST_F(ServerViewTest, ANodeWithoutAHeartbeatNamesTheLiveOnes) {
  ServerView view(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
  auto none = view.Read();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(none.status().message().find("no server is live there"), std::string::npos)
      << none.status().message();

  Plant(LiveHere("n2", "i2"));
  Plant(LiveHere("n3", "i3"));
  auto others = view.Read();
  ASSERT_FALSE(others.ok());
  EXPECT_EQ(others.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(others.status().message().find("live there: n2, n3 (--node or MCD_NODE picks one)"),
            std::string::npos)
      << others.status().message();
}

// The node's heartbeat under another key (a prefix's server key that names the node) is found
// by its node field: a Redis back from a restart has it again a moment after it answers.
TEST_F(ServerViewTest, TheNodesServerIsFoundByItsNodeField) {
  Plant("elsewhere", HeartbeatFields(LiveHere("n1", "i1")));
  ServerView view(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
  auto read = view.Read();
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->instance, "i1");
  EXPECT_EQ(read->node, "n1");
}

TEST_F(ServerViewTest, AMissingTensorIsNotFoundUnlessRedisLostTheSettledScript) {
  Plant(LiveHere("n1", "i1"));  // settled "abc": a script Redis does not have
  ServerView view(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
  ASSERT_TRUE(view.Refresh().ok());
  EXPECT_EQ(view.Missing("t").code(), ErrorCode::kTryAgain);
  HeartbeatRecord settled = LiveHere("n1", "i1");
  auto sha = conn_->Command({"SCRIPT", "LOAD", "return 1"});
  ASSERT_TRUE(sha.ok());
  settled.settled = sha->str;
  Plant(settled);
  EXPECT_EQ(view.Missing("t").code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace mcd
