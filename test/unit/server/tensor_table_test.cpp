// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// TensorTable (server/tensor_table.h): the server's index of the tensors it holds, kept in step
// with its stack and filling indexes and the count and bytes the heartbeat reads.
#include "server/tensor_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "common/process.h"

namespace mcd {
namespace {

constexpr int64_t kNoSuchPid = 0x3fffffff;  // above pid_max: never a live process

Entry MakeEntry(const std::string& name, uint64_t bytes, int device = kHostDevice) {
  Entry entry;
  entry.record.name = name;
  entry.record.bytes = bytes;
  entry.record.device = device;
  entry.record.lifetime = Lifetime::kHeap;
  entry.record.state = "ready";
  return entry;
}

Entry StackEntry(const std::string& name, int64_t owner_pid, uint64_t owner_start) {
  Entry entry = MakeEntry(name, 16);
  entry.record.lifetime = Lifetime::kStack;
  entry.record.owner_pid = owner_pid;
  entry.record.owner_start = owner_start;
  return entry;
}

TEST(TensorTable, KeepAndForgetKeepCountAndBytesWithTheMap) {
  TensorTable table;
  table.Keep(MakeEntry("a", 100));
  table.Keep(MakeEntry("b", 20));
  EXPECT_EQ(table.count(), 2u);
  EXPECT_EQ(table.bytes(), 120u);
  // The same name again replaces the entry: its old bytes go, the new ones count.
  table.Keep(MakeEntry("a", 7));
  EXPECT_EQ(table.count(), 2u);
  EXPECT_EQ(table.bytes(), 27u);
  Entry gone = table.Forget(table.find("a"));
  EXPECT_EQ(gone.record.name, "a");
  EXPECT_EQ(gone.record.bytes, 7u);
  EXPECT_EQ(table.count(), 1u);
  EXPECT_EQ(table.bytes(), 20u);
  EXPECT_EQ(table.find("a"), table.end());
  ASSERT_NE(table.find("b"), table.end());
}

TEST(TensorTable, DeadStackTensorsAreThoseWhoseOwnerIsGone) {
  TensorTable table;
  const int64_t me = getpid();
  table.Keep(StackEntry("mine", me, ProcessStartTime(me)));
  table.Keep(StackEntry("orphaned", kNoSuchPid, 1));
  // A live pid with another start time is another process: its owner is gone.
  table.Keep(StackEntry("reused_pid", me, ProcessStartTime(me) + 1));
  table.Keep(MakeEntry("heap", 16));  // heap tensors never die with a process
  std::vector<std::string> dead = table.DeadStackTensors();
  std::sort(dead.begin(), dead.end());
  EXPECT_EQ(dead, (std::vector<std::string>{"orphaned", "reused_pid"}));
  // Kept again as a heap tensor, a name leaves the stack index; forgotten, it leaves it too.
  table.Keep(MakeEntry("orphaned", 16));
  table.Forget(table.find("reused_pid"));
  EXPECT_TRUE(table.DeadStackTensors().empty());
}

TEST(TensorTable, AFillerThatDiedIsFoundUntilTheTensorIsPublished) {
  TensorTable table;
  Entry filling = MakeEntry("f", 16);
  filling.record.state = "creating";
  filling.filler = Holder{kNoSuchPid, 1, 0};
  table.Keep(std::move(filling));
  Entry alive = MakeEntry("g", 16);
  alive.filler = Holder{getpid(), ProcessStartTime(getpid()), 0};
  table.Keep(std::move(alive));
  EXPECT_EQ(table.DeadFillers(), std::vector<std::string>{"f"});
  table.Published(table.find("f"));
  EXPECT_TRUE(table.DeadFillers().empty());
  const Entry& published = table.find("f")->second;
  EXPECT_FALSE(published.filler.has_value());
  EXPECT_EQ(published.record.state, "ready");
  // The replies' head is rebuilt from the published record.
  EXPECT_EQ(published.json_head, RecordJsonHead(published.record));
  EXPECT_NE(published.json_head.find("\"ready\""), std::string::npos) << published.json_head;
}

TEST(TensorTable, HeldByDeviceCountsTensorsOrphansAndUnsettledCreatesUntilClear) {
  TensorTable table;
  table.Keep(MakeEntry("a", 1, 0));
  table.Keep(MakeEntry("b", 1, kHostDevice));
  table.Orphan(MakeEntry("lost", 1, 0));
  table.Unsettled(MakeEntry("pending", 1, 1));
  EXPECT_EQ(table.held(), 4u);
  auto by_device = table.HeldByDevice();
  ASSERT_EQ(by_device.size(), 3u);
  EXPECT_EQ(by_device[0].size(), 2u);
  EXPECT_EQ(by_device[1].size(), 1u);
  EXPECT_EQ(by_device[1][0]->record.name, "pending");
  EXPECT_EQ(by_device[kHostDevice].size(), 1u);
  // Unsettled creates are taken once, for the resettle after a reconnect.
  std::vector<Entry> unsettled = table.TakeUnsettled();
  ASSERT_EQ(unsettled.size(), 1u);
  EXPECT_TRUE(table.TakeUnsettled().empty());
  table.MaybeDeleted("a");
  EXPECT_EQ(table.TakeMaybeDeleted(), std::set<std::string>{"a"});
  EXPECT_TRUE(table.TakeMaybeDeleted().empty());
  table.Clear();
  EXPECT_EQ(table.held(), 0u);
  EXPECT_EQ(table.count(), 0u);
  EXPECT_EQ(table.bytes(), 0u);
}

}  // namespace
}  // namespace mcd
