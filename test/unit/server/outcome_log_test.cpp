// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// OutcomeLog (server/outcome_log.h): the counters and latency histograms the heartbeat
// publishes from each command's outcome.
#include "server/outcome_log.h"

#include <gtest/gtest.h>

namespace mcd {
namespace {

using Clock = OutcomeLog::Clock;

TEST(OutcomeLog, CountsSuccessesAndEachErrorCode) {
  OutcomeLog log;
  auto now = Clock::now();
  log.Record("create", "a", Status::Ok(), now);
  log.Record("get", "a", Status::Ok(), now);
  log.Record("get", "b", Status(ErrorCode::kNotFound, "no b"), now);
  log.Record("get", "c", Status(ErrorCode::kNotFound, "no c"), now);
  log.Record("create", "d", Status(ErrorCode::kOutOfMemory, "full"), now);
  EXPECT_EQ(log.ok(), 2u);
  auto errors = log.Errors();
  // In code order, each code met once or more.
  std::vector<std::pair<std::string, uint64_t>> expected = {{"not_found", 2}, {"out_of_memory", 1}};
  EXPECT_EQ(errors, expected);
}

TEST(OutcomeLog, TimesCreateGetAndDeleteInTheirBuckets) {
  OutcomeLog log;
  auto now = Clock::now();
  // 300 us ago lands in the (250, 500] bucket; 2 s ago in +Inf.
  log.Record("create", "a", Status::Ok(), now - std::chrono::microseconds(300));
  log.Record("create", "b", Status::Ok(), now - std::chrono::seconds(2));
  log.Record("reclaim", "c", Status::Ok(), now - std::chrono::seconds(2));  // not timed
  std::string create = log.LatencyText(0);
  // 50,100,250,500,...: the fourth bucket and the last one hold one each.
  EXPECT_EQ(create.substr(0, create.find(';')),
            "50:0,100:0,250:0,500:1,1000:0,2500:0,5000:0,10000:0,25000:0,100000:0,1000000:0,"
            "+Inf:1");
  EXPECT_EQ(create.substr(create.rfind(';')), ";2");  // the count
  uint64_t sum = std::stoull(create.substr(create.find(';') + 1));
  EXPECT_GE(sum, 2000300u);
  EXPECT_LT(sum, 2000300u + 60'000'000u);  // a loaded machine may take long between the lines
  EXPECT_EQ(log.LatencyText(1),
            "50:0,100:0,250:0,500:0,1000:0,2500:0,5000:0,10000:0,25000:0,"
            "100000:0,1000000:0,+Inf:0;0;0");
  EXPECT_EQ(log.ok(), 3u);
}

TEST(OutcomeLog, QueueWaitIsInMicrosecondsAndAClockAheadIsNoWait) {
  OutcomeLog log;
  log.RecordQueueWait(3);    // 3000 us: (2500, 5000]
  log.RecordQueueWait(-40);  // the client's clock ahead: 0 us, the first bucket
  EXPECT_EQ(log.LatencyText(3),
            "50:1,100:0,250:0,500:0,1000:0,2500:0,5000:1,10000:0,25000:0,"
            "100000:0,1000000:0,+Inf:0;3000;2");
  EXPECT_STREQ(OutcomeLog::kTimedOps[3], "queue_wait");
}

}  // namespace
}  // namespace mcd
