// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Reaper (server/reaper.h) over a real redis-server and host memory: the references of a holder
// that died are given back and the holder forgotten, and a stack tensor whose owner died is
// removed and its memory freed. The dead processes are sleeps this test starts and kills.
#include "server/reaper.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <string>

#include "common/process.h"
#include "server/server_options.h"
#include "unit/server/serving_fixture.h"

namespace mcd {
namespace {

class ReaperTest : public test::ServingTest {
 protected:
  std::string Handle(const std::string& name) { return Hash(name)["ipc_handle"]; }

  test::TempDir dir_;
  test::Background process_{{"/bin/sleep", "600"}, {}, dir_.path() + "/sleep.log"};
  const std::string pid_ = std::to_string(process_.pid());
  Reaper reaper_{ReaperOptionsOf(opt_), "inst1", pipeline_, table_, *devices_, outcomes_};
};

TEST_F(ReaperTest, ADeadHoldersReferencesAreGivenBackAndTheHolderForgotten) {
  const std::string holder = HolderId(process_.pid(), ProcessStartTime(process_.pid()));
  Apply({Create("t", "r1")});
  Apply({R"({"op":"get","name":"t","req":"r2","owner_pid":)" + pid_ + "}"});
  pipeline_.Drain();
  ASSERT_EQ(Hash("t")["refcount"], "2");
  ASSERT_TRUE(Holds(holder));
  reaper_.ReapDeadHolders();  // alive: kept
  EXPECT_EQ(Hash("t")["refcount"], "2");
  EXPECT_TRUE(Holds(holder));

  process_.Stop(SIGKILL);
  reaper_.ReapDeadHolders();
  EXPECT_EQ(Hash("t")["refcount"], "1") << "the dead holder's reference was not given back";
  EXPECT_FALSE(Holds(holder)) << "the dead holder is still in the node's set";
  EXPECT_EQ(Hash("t").count("holder:" + holder), 0u) << "the hash still names the dead holder";
  auto held = side_->Command({"EXISTS", opt_.keys.Held("n1", holder)});
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->integer, 0);
  // The creator's reference stays, and so does the tensor.
  ASSERT_NE(table_.find("t"), table_.end());
  EXPECT_TRUE(ShmExists(Handle("t")));
}

TEST_F(ReaperTest, AStackTensorWhoseOwnerDiedIsRemovedAndFreed) {
  Apply({Create("s", "r1", R"(,"lifetime":"stack","owner_pid":)" + pid_)});
  pipeline_.Drain();
  const std::string handle = Handle("s");
  ASSERT_EQ(Hash("s")["lifetime"], "stack");
  ASSERT_TRUE(ShmExists(handle));
  reaper_.ReapStackTensors();  // its owner lives: kept
  EXPECT_EQ(Hash("s")["refcount"], "1");
  ASSERT_NE(table_.find("s"), table_.end());

  process_.Stop(SIGKILL);
  reaper_.ReapStackTensors();
  EXPECT_TRUE(Hash("s").empty()) << "the hash of a stack tensor whose owner died is still there";
  EXPECT_EQ(table_.find("s"), table_.end());
  EXPECT_TRUE(test::WaitFor([&] { return !ShmExists(handle); }, 30000))
      << "the memory of a reclaimed stack tensor is not freed";
}

}  // namespace
}  // namespace mcd
