// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Intake and its Waker (server/intake.h) over a real redis-server: a command taken from the
// list moves into the processing list, a wake marker is dropped (and leaves the processing list
// with the next take), and socket lines come out as requests routed to their connection.
#include "server/intake.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "memcuda/keys.h"
#include "test_support.h"
#include "unit/socket_client.h"

namespace mcd {
namespace {

const char* kCommand = R"({"op":"get","name":"t1","req":"r1"})";

class IntakeTest : public ::testing::Test {
 protected:
  IntakeTest()
      : queue_(keys_.NodeQueue("n1")),
        processing_(keys_.Processing("n1")),
        waker_(redis_.parsed_url(), queue_),
        intake_(queue_, processing_, waker_) {}

  test::RedisServer redis_;
  KeySpace keys_;
  std::string queue_, processing_;
  Waker waker_;
  Intake intake_;
  std::unique_ptr<RedisConnection> conn_ = redis_.Connect();  // the serving connection
  std::unique_ptr<RedisConnection> side_ = redis_.Connect();
};

TEST_F(IntakeTest, ACommandTakenFromTheListIsParsedAndWaitsInTheProcessingList) {
  ASSERT_TRUE(side_->Command({"LPUSH", queue_, kCommand}).ok());
  auto taken = intake_.WaitForCommand(*conn_);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  std::vector<Request> requests = intake_.Requests(std::move(taken).value());
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_FALSE(requests[0].route.socket());
  EXPECT_EQ(requests[0].raw, kCommand);
  EXPECT_EQ(requests[0].req, "r1");
  ASSERT_TRUE(requests[0].parsed.ok());
  EXPECT_EQ(requests[0].parsed->name, "t1");
  EXPECT_EQ(test::List(*side_, processing_), std::vector<std::string>{kCommand});
  EXPECT_TRUE(test::List(*side_, queue_).empty());
}

TEST_F(IntakeTest, AWakeMarkerIsDroppedAndLeavesTheProcessingListWithTheNextTake) {
  ASSERT_TRUE(waker_.Wake().ok());
  auto taken = intake_.WaitForCommand(*conn_);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->str, kWakeMarker);
  EXPECT_TRUE(intake_.Requests(std::move(taken).value()).empty());
  EXPECT_EQ(test::List(*side_, processing_), std::vector<std::string>{std::string(kWakeMarker)});
  // The next take (which times out after a second, the queue being empty) removes it first.
  auto next = intake_.WaitForCommand(*conn_);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(next->is_nil());
  EXPECT_TRUE(test::List(*side_, processing_).empty());
}

TEST_F(IntakeTest, SocketLinesBecomeRequestsRoutedToTheirConnection) {
  test::TempDir dir;
  std::string path = dir.path() + "/cmd.sock";
  ASSERT_TRUE(intake_.ListenOnSocket(path, PeerPolicy{geteuid()}).ok());
  test::SocketClient client(path);
  client.Send(kCommand);
  test::CollectSocketLine(intake_);
  std::vector<Request> requests = intake_.Requests(RedisValue{});
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].route.socket());
  EXPECT_EQ(requests[0].req, "r1");
  ASSERT_TRUE(requests[0].parsed.ok());
  EXPECT_TRUE(intake_.Waiting(requests[0].route));
  // Answered once, on its connection.
  EXPECT_TRUE(intake_.Answer(requests[0].route, "{\"ok\":true}"));
  EXPECT_FALSE(intake_.Answer(requests[0].route, "again"));
  EXPECT_EQ(client.ReadLine(), "{\"ok\":true}");
}

// The blocking take (BLMOVE, a second) is woken from another thread by the Waker's marker, well
// before its timeout. The other thread wakes it once Redis shows it blocked.
TEST_F(IntakeTest, TheWakerWakesABlockedTakeFromAnotherThread) {
  std::thread waking([this] {
    test::WaitFor([this] { return test::BlockedClients(*side_, "blmove") > 0; }, 10000);
    EXPECT_TRUE(waker_.Wake().ok());
  });
  auto t0 = std::chrono::steady_clock::now();
  auto taken = intake_.WaitForCommand(*conn_);
  auto waited = std::chrono::steady_clock::now() - t0;
  waking.join();
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->str, kWakeMarker);
  // Blocked for the wait for CLIENT LIST and the wake alone: well under the take's second.
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count(), 800);
}

// A socket line that arrives while the take blocks calls the take off (a wake marker of its
// own), so that the socket command is served at once rather than after the take's second.
TEST_F(IntakeTest, ASocketLineDuringTheBlockingTakeCallsItOff) {
  test::TempDir dir;
  std::string path = dir.path() + "/cmd.sock";
  ASSERT_TRUE(intake_.ListenOnSocket(path, PeerPolicy{geteuid()}).ok());
  test::SocketClient client(path);
  std::thread sending([this, &client] {
    test::WaitFor([this] { return test::BlockedClients(*side_, "blmove") > 0; }, 10000);
    client.Send(kCommand);
  });
  auto t0 = std::chrono::steady_clock::now();
  auto taken = intake_.WaitForCommand(*conn_);
  auto waited = std::chrono::steady_clock::now() - t0;
  sending.join();
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->str, kWakeMarker);  // the take, called off
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count(), 800);
  std::vector<Request> requests = intake_.Requests(std::move(taken).value());
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].route.socket());
  EXPECT_EQ(requests[0].req, "r1");
}

}  // namespace
}  // namespace mcd
