// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// QueueRelay (server/queue_relay.h) over a real redis-server: what is pushed onto the shared
// queue lands on this node's queue, in order, each command once.
#include "server/queue_relay.h"

#include <gtest/gtest.h>

#include "memcuda/server.h"
#include "test_support.h"

namespace mcd {
namespace {

class QueueRelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto url = RedisUrl::Parse(redis_.url());
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    opt_.redis_url = url.value();
    opt_.node = "n1";
    conn_ = redis_.Connect();
  }
  std::vector<std::string> Own() {
    auto items = conn_->Command({"LRANGE", opt_.keys.NodeQueue("n1"), "0", "-1"});
    std::vector<std::string> out;
    if (items.ok())
      for (const RedisValue& v : items->elements) out.push_back(v.str);
    return out;
  }
  long long SharedLength() { return conn_->Command({"LLEN", opt_.keys.queue})->integer; }

  test::RedisServer redis_;
  ServerOptions opt_;
  std::unique_ptr<RedisConnection> conn_;
};

TEST_F(QueueRelayTest, MovesEachCommandOfTheSharedQueueOntoTheNodesQueueInOrder) {
  QueueRelay relay(opt_.redis_url, opt_.keys.queue, opt_.keys.NodeQueue(opt_.node));
  relay.Start();
  // LPUSH, as redis-cli's users do: the first pushed is the first the serving loop takes (from
  // the right of the node's queue).
  for (const char* c : {"c1", "c2", "c3"})
    ASSERT_TRUE(conn_->Command({"LPUSH", opt_.keys.queue, c}).ok());
  ASSERT_TRUE(test::WaitFor([&] { return Own().size() == 3; }, 30000)) << Own().size();
  EXPECT_EQ(Own(), (std::vector<std::string>{"c3", "c2", "c1"}));
  EXPECT_EQ(SharedLength(), 0);
  relay.Stop();
  // Stopped, it moves nothing more.
  ASSERT_TRUE(conn_->Command({"LPUSH", opt_.keys.queue, "late"}).ok());
  ASSERT_FALSE(test::WaitFor([&] { return Own().size() != 3; }, 1500));
  EXPECT_EQ(SharedLength(), 1);
}

TEST_F(QueueRelayTest, KeepsRelayingAcrossARedisRestart) {
  QueueRelay relay(opt_.redis_url, opt_.keys.queue, opt_.keys.NodeQueue(opt_.node));
  relay.Start();
  redis_.Restart();
  conn_ = redis_.Connect();
  ASSERT_TRUE(conn_->Command({"LPUSH", opt_.keys.queue, "after"}).ok());
  ASSERT_TRUE(test::WaitFor([&] { return Own().size() == 1; }, 30000));
  EXPECT_EQ(Own(), std::vector<std::string>{"after"});
}

}  // namespace
}  // namespace mcd
