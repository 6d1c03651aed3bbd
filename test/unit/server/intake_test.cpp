// Intake and its Waker (server/intake.h) over a real redis-server: a command taken from the
// list moves into the processing list, a wake marker is dropped (and leaves the processing list
// with the next take), and socket lines come out as requests routed to their connection.
#include "server/intake.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

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

  std::vector<std::string> List(const std::string& key) {
    std::vector<std::string> out;
    auto v = side_->Command({"LRANGE", key, "0", "-1"});
    if (v.ok())
      for (auto& e : v->elements) out.push_back(e.str);
    return out;
  }

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
  EXPECT_EQ(List(processing_), std::vector<std::string>{kCommand});
  EXPECT_TRUE(List(queue_).empty());
}

TEST_F(IntakeTest, AWakeMarkerIsDroppedAndLeavesTheProcessingListWithTheNextTake) {
  ASSERT_TRUE(waker_.Wake().ok());
  auto taken = intake_.WaitForCommand(*conn_);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->str, kWakeMarker);
  EXPECT_TRUE(intake_.Requests(std::move(taken).value()).empty());
  EXPECT_EQ(List(processing_), std::vector<std::string>{std::string(kWakeMarker)});
  // The next take (which times out after a second, the queue being empty) removes it first.
  auto next = intake_.WaitForCommand(*conn_);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(next->is_nil());
  EXPECT_TRUE(List(processing_).empty());
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

}  // namespace
}  // namespace mcd
