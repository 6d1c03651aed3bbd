// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Resettle (server/resettle.h) over a real redis-server and host memory: a create whose commit
// got no answer, the serving connection lost, is kept when Redis holds its hash and freed when it
// does not; the heartbeat is claimed again on the way. Main thread, and the heartbeat's idle
// thread.
#include "server/resettle.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <string>

#include "server/server_options.h"
#include "unit/server/serving_fixture.h"

namespace mcd {
namespace {

class ResettleTest : public test::ServingTest {
 protected:
  ResettleTest() { signal(SIGPIPE, SIG_IGN); }  // a send on the lost connection

  // Loses the serving connection, then applies the create of `name`: its commit is sent, and
  // gets no answer. With `ran`, Redis holds its hash then, as when the commit ran before the
  // connection went: written here as the commit writes it. Returns its memory's shm name.
  std::string CreateWithoutAnAnswer(const std::string& name, bool ran) {
    auto id = pipeline_.Command({"CLIENT", "ID"});
    EXPECT_TRUE(id.ok());
    EXPECT_TRUE(side_->Command({"CLIENT", "KILL", "ID", std::to_string(id->integer)}).ok());
    std::vector<Request> requests;
    requests.push_back(Intake::FromList(Create(name, "r-" + name)));
    applier_.ProcessBatch(std::move(requests));
    pipeline_.Drain();
    EXPECT_FALSE(pipeline_.connected());
    EXPECT_EQ(table_.find(name), table_.end()) << "a create of unknown outcome was kept";
    std::vector<std::string> objects = test::ShmObjects(prefix_.substr(1));
    EXPECT_EQ(objects.size(), 1u);
    std::string handle = objects.empty() ? "" : "/" + objects[0];
    if (ran) {
      EXPECT_TRUE(
          side_
              ->Command({"HSET", opt_.keys.Tensor(name), "node", "n1", "owner", "inst1",
                         "ipc_handle", handle, "offset", "0", "state", "ready", "refcount", "1"})
              .ok());
    }
    EXPECT_TRUE(pipeline_.Reconnect().ok());
    EXPECT_TRUE(pipeline_.LoadScript().ok());
    return handle;
  }

  StopSignal stop_;
  Heartbeat heartbeat_{HeartbeatOptionsOf(opt_), "inst1", stop_, *devices_, table_, outcomes_};
  bool stopped_ = false;
  Resettle resettle_{
      ResettleOptionsOf(opt_),    "inst1", pipeline_, table_, *devices_, heartbeat_, applier_,
      [this] { stopped_ = true; }};
};

TEST_F(ResettleTest, ACreateThatWentThroughIsKept) {
  std::string handle = CreateWithoutAnAnswer("t", true);
  Status settled = resettle_.Settle();
  ASSERT_TRUE(settled.ok()) << settled.ToString();
  ASSERT_NE(table_.find("t"), table_.end()) << "a create Redis holds was not kept";
  EXPECT_EQ(Hash("t")["owner"], "inst1");
  EXPECT_EQ(Hash("t")["refcount"], "1");
  EXPECT_TRUE(ShmExists(handle));
  EXPECT_FALSE(stopped_);
  auto heartbeat = side_->Command({"HGET", opt_.keys.Server("n1"), "instance"});
  ASSERT_TRUE(heartbeat.ok());
  EXPECT_EQ(heartbeat->str, "inst1");
}

TEST_F(ResettleTest, ACreateWhoseHashIsAbsentIsFreed) {
  std::string handle = CreateWithoutAnAnswer("t", false);
  Status settled = resettle_.Settle();
  ASSERT_TRUE(settled.ok()) << settled.ToString();
  EXPECT_EQ(table_.find("t"), table_.end()) << "a create Redis does not hold was kept";
  EXPECT_TRUE(Hash("t").empty()) << "the hash was put back";
  EXPECT_FALSE(ShmExists(handle)) << "the memory of a create that did not go through is held";
}

}  // namespace
}  // namespace mcd
