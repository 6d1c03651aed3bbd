// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// EventStream against a real redis-server: the stream written by hand, with the cap the servers
// use (XADD MAXLEN ~) or an exact trim, so that what a reader lost is known to the entry.
#include <gtest/gtest.h>

#include <algorithm>

#include "memcuda/events.h"
#include "test_support.h"

namespace mcd {
namespace {

class EventStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = EventStream::Open(redis_.parsed_url(), keys_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    stream_ = std::move(opened).value();
  }
  // Appends `count` create events named <prefix>0.. as the servers do, capped at about `cap`.
  void Add(const std::string& prefix, int count, int cap = 50) {
    auto conn = redis_.Connect();
    for (int i = 0; i < count; ++i) {
      ASSERT_TRUE(conn->Append({"XADD", keys_.Events(), "MAXLEN", "~", std::to_string(cap), "*",
                                "event", "create", "name", prefix + std::to_string(i), "node", "n",
                                "refcount", "1", "pid", "1", "reason", ""})
                      .ok());
    }
    for (int i = 0; i < count; ++i) ASSERT_TRUE(conn->ReadReply().ok());
  }
  test::StreamInfo Info() { return test::StreamInfoOf(*redis_.Connect(), keys_.Events()); }
  std::vector<LifecycleEvent> Read(const std::string& after) {
    auto got = stream_->Read(after, 200, 1000);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    return got.ok() ? got.value() : std::vector<LifecycleEvent>{};
  }

  test::RedisServer redis_;
  KeySpace keys_;
  std::unique_ptr<EventStream> stream_;
};

TEST_F(EventStreamTest, AReaderLeftBehindByTheCapGetsAGapWithTheCountLost) {
  Add("a", 5);
  auto from = stream_->Newest();
  ASSERT_TRUE(from.ok());
  EXPECT_TRUE(Read(from.value()).empty());
  Add("b", 300);  // b0.. are the 6th.. entries ever added
  long long trimmed = Info().added - Info().length;
  ASSERT_GT(trimmed, 5);
  auto got = Read(from.value());
  ASSERT_EQ(got.size(), 1 + static_cast<size_t>(Info().length));
  EXPECT_EQ(got[0].event, "gap");
  EXPECT_EQ(got[0].id, from.value());
  EXPECT_EQ(got[0].missed, trimmed - 5);
  EXPECT_EQ(got[0].reason, "trimmed");
  EXPECT_EQ(got[1].name, "b" + std::to_string(trimmed - 5))
      << "the first kept: every entry is lost or read";
  EXPECT_EQ(got[0].time_ms, got[1].time_ms);
  EXPECT_EQ(got.back().name, "b299");
  std::string text = EventToJson(got[0]);
  std::string tail = R"("reason":"trimmed","missed":)" + std::to_string(trimmed - 5) + "}";
  EXPECT_EQ(text.substr(text.size() - std::min(text.size(), tail.size())), tail) << text;
  // Caught up: no gap again.
  EXPECT_TRUE(Read(got.back().id).empty());
  Add("c", 3);
  got = Read(got.back().id);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].name, "c0");

  // From where another reader was, trimmed since: a gap of a count unknown, JSON null.
  got = Read(from.value());
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0].event, "gap");
  EXPECT_EQ(got[0].missed, -1);
  EXPECT_NE(EventToJson(got[0]).find(R"("missed":null)"), std::string::npos) << EventToJson(got[0]);
  // From the oldest kept ("0-0"): nothing lost.
  got = Read("0-0");
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0].event, "create");
}

// A reader whose own last entry was trimmed, and nothing after it, lost nothing.
TEST_F(EventStreamTest, TheReadersOwnEntryTrimmedIsNoGap) {
  Add("a", 10);
  auto from = stream_->Newest();
  ASSERT_TRUE(from.ok());
  Add("b", 3);
  ASSERT_EQ(redis_.Connect()->Command({"XTRIM", keys_.Events(), "MAXLEN", "3"})->integer, 10);
  auto got = Read(from.value());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].name, "b0");
  // One more trimmed than read: a gap of exactly one.
  Add("c", 3);
  ASSERT_EQ(redis_.Connect()->Command({"XTRIM", keys_.Events(), "MAXLEN", "2"})->integer, 4);
  got = Read(got.back().id);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].event, "gap");
  EXPECT_EQ(got[0].missed, 1);
  EXPECT_EQ(got[1].name, "c1");
}

// The first events of a stream that did not exist when the reader took its position.
TEST_F(EventStreamTest, AStreamMadeAfterTheReaderBeganLosesNothing) {
  auto from = stream_->Newest();
  ASSERT_TRUE(from.ok());
  EXPECT_EQ(from.value(), "0-0");
  EXPECT_TRUE(Read(from.value()).empty());
  Add("a", 4);
  auto got = Read(from.value());
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].name, "a0");
}

}  // namespace
}  // namespace mcd
