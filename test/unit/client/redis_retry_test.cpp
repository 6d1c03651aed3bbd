// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// RedisRetry over a real redis-server that goes away: a try Redis refused for now (kTryAgain) is
// made again, an error of the op's own is not; a connection lost before a request left is made
// again and one Redis closed between requests is found before an op that may not repeat is sent;
// a request of such an op lost unanswered is reported as of unknown outcome, and a Redis that
// stays away is waited for to the end of the timeout.
#include "client/redis_retry.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "test_support.h"

namespace mcd {
namespace {

class RedisRetryTest : public ::testing::Test {
 protected:
  void SetUp() override { conn_ = redis_.Connect(); }

  test::RedisServer redis_;
  std::unique_ptr<RedisConnection> conn_;
  RedisRetry retry_{800, "unix:///the-redis"};
};

Result<RedisValue> Ping(RedisConnection& redis) { return redis.Command({"PING"}); }

TEST_F(RedisRetryTest, AnOpRefusedForNowIsTriedAgainUntilItRuns) {
  int calls = 0;
  auto result = retry_.Run(*conn_, "read", false, [&]() -> Result<RedisValue> {
    if (++calls < 3) return Status(ErrorCode::kTryAgain, "LOADING");
    return Ping(*conn_);
  });
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->str, "PONG");
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(retry_.AwayLately()) << "Redis refusing for now is Redis away";
}

TEST_F(RedisRetryTest, AnErrorOfTheOpsOwnIsReturnedAtOnce) {
  int calls = 0;
  auto result = retry_.Run(*conn_, "read", true, [&]() -> Result<RedisValue> {
    ++calls;
    return Status(ErrorCode::kNotFound, "no such tensor");
  });
  EXPECT_EQ(result.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(retry_.AwayLately());
}

TEST_F(RedisRetryTest, AnOpStillRefusedAtTheTimeoutReturnsItsOwnRefusal) {
  int calls = 0;
  auto start = std::chrono::steady_clock::now();
  auto result = retry_.Run(*conn_, "read", true, [&]() -> Result<RedisValue> {
    ++calls;
    return Status(ErrorCode::kTryAgain, "LOADING Redis is loading");
  });
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(result.status().code(), ErrorCode::kTryAgain);
  EXPECT_EQ(result.status().message(), "LOADING Redis is loading");
  EXPECT_GE(calls, 2);
  EXPECT_LT(waited, std::chrono::seconds(30));
}

// Redis restarted between requests: the closed connection is found and replaced before an op
// that may not repeat is sent, so it runs once, on the new connection.
TEST_F(RedisRetryTest, AConnectionClosedBetweenRequestsIsReplacedBeforeTheOpIsSent) {
  ASSERT_TRUE(Ping(*conn_).ok());
  redis_.Restart();
  int calls = 0;
  auto result = retry_.Run(*conn_, "create", false, [&]() -> Result<RedisValue> {
    ++calls;
    return conn_->Command({"INCR", "counter"});
  });
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(result->integer, 1) << "the op ran more than once";
}

// A repeatable op whose connection is lost is made again once Redis is back.
TEST_F(RedisRetryTest, ARepeatableOpIsMadeAgainOnceRedisIsBack) {
  ASSERT_TRUE(Ping(*conn_).ok());
  redis_.Restart();
  int calls = 0;
  auto result = retry_.Run(*conn_, "read", true, [&]() -> Result<RedisValue> {
    ++calls;
    return Ping(*conn_);
  });
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->str, "PONG");
  EXPECT_TRUE(conn_->connected());
}

// The connection is lost while the op's request waits for its reply: it may have run.
TEST_F(RedisRetryTest, AnOpLostWithItsRequestUnansweredHasAnUnknownOutcome) {
  std::thread killer([&] {
    auto watcher = redis_.Connect();
    test::WaitFor([&] { return test::BlockedClients(*watcher, "blpop") > 0; }, 20000);
    redis_.Kill();
  });
  int calls = 0;
  auto result = retry_.Run(*conn_, "release", false, [&]() -> Result<RedisValue> {
    ++calls;
    return conn_->Command({"BLPOP", "never-pushed", "20"});
  });
  killer.join();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(result.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(result.status().message().find(
                "Redis went away during the release, which may or may not have taken effect"),
            std::string::npos)
      << result.status().message();
}

// Refused for the whole timeout: the refusal, which names the address, once the timeout is over.
TEST_F(RedisRetryTest, ARedisThatStaysAwayIsWaitedForThenNamed) {
  redis_.Kill();
  auto start = std::chrono::steady_clock::now();
  auto result = retry_.Run(*conn_, "read", true, [&] { return Ping(*conn_); });
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(result.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(result.status().message().find("cannot connect to Redis at " + redis_.url()),
            std::string::npos)
      << result.status().message();
  EXPECT_GE(waited, std::chrono::milliseconds(500)) << "gave up before its timeout";
  EXPECT_TRUE(retry_.AwayLately());
}

// Pauses of 20 ms doubling up to 200 ms (each at least that long: a loaded machine only makes
// them longer), and no pause that would end past the timeout.
TEST(Backoff, PausesDoubleAndEndWithinTheTimeout) {
  using std::chrono::milliseconds;
  Backoff growing(60000);
  for (int expected : {20, 40, 80, 160, 200, 200}) {
    auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(growing.Wait());
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(expected));
  }
  // Within 1000 ms: 20 + 40 + 80 + 160 + 200 + 200 + 200 = 900 at most, the next would end past
  // it (a loaded machine makes fewer fit, never more).
  Backoff bounded(1000);
  int waits = 0;
  while (bounded.Wait()) ++waits;
  EXPECT_GE(waits, 1);
  EXPECT_LE(waits, 7) << "a pause ended past the timeout";
}

}  // namespace
}  // namespace mcd
