// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Heartbeat against a real redis-server: the claim, the record as it lands in Redis field by
// field, a second live instance refused, the beats, the stop and a node taken over. Host memory
// only (a DeviceSet without GPUs). Main thread, and the heartbeat thread under test.
#include "server/heartbeat.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <string>

#include "common/process.h"
#include "memcuda/heartbeat.h"
#include "server/device_set.h"
#include "server/outcome_log.h"
#include "server/server_options.h"
#include "server/stop_signal.h"
#include "server/tensor_table.h"
#include "test_support.h"

namespace mcd {
namespace {

class HeartbeatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    opt_.redis_url = redis_.parsed_url();
    opt_.node = "n1";
    opt_.all_devices = false;  // host memory only
    opt_.heartbeat_ttl_s = 4;  // a beat a second
    opt_.event_history = 50;
    auto devices =
        DeviceSet::Open(DeviceSetOptionsOf(opt_), "/mcd-hbtest-" + std::to_string(getpid()) + "-");
    ASSERT_TRUE(devices.ok()) << devices.status().ToString();
    devices_ = std::move(devices).value();
    conn_ = redis_.Connect();
    ASSERT_NE(conn_, nullptr);
  }

  std::unique_ptr<Heartbeat> Make(const std::string& instance) {
    return std::make_unique<Heartbeat>(HeartbeatOptionsOf(opt_), instance, stop_, *devices_, table_,
                                       outcomes_);
  }

  std::map<std::string, std::string> Stored() {
    auto all = conn_->Command({"HGETALL", opt_.keys.Server(opt_.node)});
    EXPECT_TRUE(all.ok());
    return all.ok() ? FieldMap(*all) : std::map<std::string, std::string>();
  }

  test::RedisServer redis_;
  ServerOptions opt_;
  std::unique_ptr<DeviceSet> devices_;
  TensorTable table_;
  OutcomeLog outcomes_;
  StopSignal stop_;  // outlives the heartbeats below it
  std::unique_ptr<RedisConnection> conn_;
};

TEST_F(HeartbeatTest, TheClaimWritesTheRecordFieldByField) {
  auto hb = Make("0123456789abcdef");
  hb->set_pool_socket("");
  hb->set_command_socket("/run/x/cmd.sock");
  hb->set_node_copies("", "", "off");
  ASSERT_TRUE(hb->Claim(*conn_).ok());
  EXPECT_TRUE(hb->owned());

  std::map<std::string, std::string> stored = Stored();
  EXPECT_EQ(stored["instance"], "0123456789abcdef");
  EXPECT_EQ(stored["pid"], std::to_string(getpid()));
  EXPECT_EQ(stored["pid_start"], std::to_string(ProcessStartTime(getpid())));
  uint64_t ino = PidfdInode(getpid());
  EXPECT_EQ(stored["pid_ino"], ino != 0 ? std::to_string(ino) : "");
  EXPECT_EQ(stored["pid_space"], PidSpace());
  EXPECT_EQ(stored["node"], "n1");
  EXPECT_EQ(stored["devices"], "cpu");
  EXPECT_EQ(stored["allocator"], "cpu:host_shm");
  EXPECT_EQ(stored["pool_socket"], "");
  EXPECT_EQ(stored["pool_fd"], "");
  EXPECT_EQ(stored["command_socket"], "/run/x/cmd.sock");
  EXPECT_EQ(stored["ucx_address"], "");
  EXPECT_EQ(stored["node_copies"], "off");
  EXPECT_EQ(stored["queue"], opt_.keys.queue);
  EXPECT_EQ(stored["node_queue"], opt_.keys.NodeQueue("n1"));
  EXPECT_EQ(stored["version"], "1");
  EXPECT_EQ(stored["event_history"], "50");
  EXPECT_EQ(stored["tensors"], "0");
  EXPECT_EQ(stored["tensor_bytes"], "0");
  EXPECT_EQ(stored["commands_ok"], "0");
  EXPECT_EQ(stored["commands_failed"], "0");
  EXPECT_EQ(stored["settled"], "");
  int64_t started = std::stoll(stored["started"]);
  EXPECT_GT(started, NowMs() - 600000);
  EXPECT_LE(started, NowMs());
  for (const char* op : OutcomeLog::kTimedOps) {
    EXPECT_EQ(stored.count(std::string("latency_") + op), 1u) << op;
  }
  // Nothing else, and what is there reads back through the codec.
  auto record = HeartbeatFromFields(stored);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(HeartbeatMap(*record), stored);
  // With the TTL a server's heartbeat has, and the claim told on the event stream.
  auto ttl = conn_->Command({"PTTL", opt_.keys.Server(opt_.node)});
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(ttl->integer, 0);
  EXPECT_LE(ttl->integer, 4000);
  auto events = conn_->Command({"XLEN", opt_.keys.Events()});
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->integer, 1);
}

TEST_F(HeartbeatTest, MarkSettledNamesTheScriptItLoaded) {
  auto hb = Make("0123456789abcdef");
  ASSERT_TRUE(hb->Claim(*conn_).ok());
  ASSERT_TRUE(hb->MarkSettled(*conn_).ok());
  std::string sha = Stored()["settled"];
  ASSERT_EQ(sha.size(), 40u);
  auto exists = conn_->Command({"SCRIPT", "EXISTS", sha});
  ASSERT_TRUE(exists.ok());
  EXPECT_EQ(exists->elements[0].integer, 1);
}

// A live process holding the node: a child whose thread bears the instance's heartbeat-thread
// name, as a server's does.
TEST_F(HeartbeatTest, ASecondInstanceIsRefusedWhileTheFirstLives) {
  const std::string other = "fedcba9876543210";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_NAME, Heartbeat::ThreadName(other).c_str());
    char c = 1;
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  close(ready[1]);
  HeartbeatRecord holder;
  holder.instance = other;
  holder.pid = child;
  holder.pid_start = ProcessStartTime(child);
  holder.pid_space = PidSpace();
  holder.node = "n1";
  std::vector<std::string> args = {"HSET", opt_.keys.Server("n1")};
  for (auto& [field, value] : HeartbeatFields(holder)) {
    args.push_back(field);
    args.push_back(value);
  }
  ASSERT_TRUE(conn_->Command(std::vector<std::string_view>(args.begin(), args.end())).ok());
  ASSERT_TRUE(conn_->Command({"EXPIRE", opt_.keys.Server("n1"), "60"}).ok());

  auto hb = Make("0123456789abcdef");
  Status claimed = hb->Claim(*conn_);
  EXPECT_EQ(claimed.code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(claimed.message().find("another mcd-serve (pid " + std::to_string(child) +
                                   ", instance " + other + ") already serves node 'n1'"),
            std::string::npos)
      << claimed.message();
  EXPECT_FALSE(hb->owned());
  EXPECT_EQ(Stored()["instance"], other);  // left alone

  // Once its process is gone, the node is taken over.
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(hb->Claim(*conn_).ok());
  EXPECT_EQ(Stored()["instance"], "0123456789abcdef");
  EXPECT_EQ(Stored()["pid"], std::to_string(getpid()));
}

TEST_F(HeartbeatTest, BeatsUntilTheStopWhichWakesTheServingLoop) {
  auto hb = Make("0123456789abcdef");
  ASSERT_TRUE(hb->Claim(*conn_).ok());
  std::atomic<int> woken{0};
  hb->Start([&] { ++woken; });
  // A beat rewrites what changed: a counter, and a field removed behind its back.
  ASSERT_TRUE(conn_->Command({"HDEL", opt_.keys.Server("n1"), "tensors"}).ok());
  outcomes_.Record("create", "t", Status::Ok(), OutcomeLog::Clock::now());
  EXPECT_TRUE(test::WaitFor(
      [&] {
        auto s = Stored();
        return s["commands_ok"] == "1" && s["tensors"] == "0";
      },
      20000))
      << Stored()["commands_ok"];
  EXPECT_EQ(woken.load(), 0);
  EXPECT_FALSE(stop_.requested());

  stop_.Request();
  EXPECT_TRUE(test::WaitFor([&] { return woken.load() == 1; }, 20000));
  hb->Stop();  // joins
  EXPECT_EQ(woken.load(), 1);
  EXPECT_TRUE(hb->node_lost().empty());
  // The heartbeat stays until Remove: a stop is not a shutdown.
  EXPECT_EQ(Stored()["instance"], "0123456789abcdef");
  hb->Remove(*conn_);
  EXPECT_TRUE(Stored().empty());
}

TEST_F(HeartbeatTest, ANodeTakenOverStopsTheServer) {
  auto hb = Make("0123456789abcdef");
  ASSERT_TRUE(hb->Claim(*conn_).ok());
  std::atomic<int> woken{0};
  hb->Start([&] { ++woken; });
  // Another instance wrote the node's heartbeat while this one was not heard from.
  ASSERT_TRUE(
      conn_->Command({"HSET", opt_.keys.Server("n1"), "instance", "other", "pid", "1"}).ok());
  EXPECT_TRUE(test::WaitFor([&] { return stop_.requested(); }, 20000));
  EXPECT_TRUE(test::WaitFor([&] { return woken.load() == 1; }, 20000));
  EXPECT_NE(hb->node_lost().find("(pid 1, instance other) took node 'n1' over"), std::string::npos)
      << hb->node_lost();
  hb->Stop();
  hb->Remove(*conn_);  // the other's now: left alone
  EXPECT_EQ(Stored()["instance"], "other");
}

TEST_F(HeartbeatTest, AStopBeforeStartEndsTheThreadWithoutWaking) {
  auto hb = Make("0123456789abcdef");
  hb->Stop();
  EXPECT_TRUE(stop_.requested());
  EXPECT_TRUE(Stored().empty());  // never claimed: nothing written
}

}  // namespace
}  // namespace mcd
