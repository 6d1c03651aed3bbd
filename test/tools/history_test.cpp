// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The history checker: concurrent clients create tensors from random bytes, wait for them, read
// them back and remove them through the tools, the library and the C ABI, hold references in
// processes that are SIGKILLed, and watch the event stream, while the test SIGKILLs mcd-serve
// and clients mid-command and restarts Redis with and without its AOF (a second case: a Sentinel
// failover). Every operation is recorded, and the whole history is then checked against the
// model of the lifecycle (history_model.h; docs/design.md, "The history checker").
// MCD_HISTORY_SECONDS sets the length of the first case (default 100; the failover case runs a
// third of it, at least 30 s); MCD_HISTORY_SEED its random choices; MCD_HISTORY_DUMP names a file
// to write the whole history to.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include "history_model.h"
#include "history_workload.h"
#include "lifecycle_fixture.h"
#include "sentinel_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

using history::Fault;
using history::FaultKind;

constexpr int kWorkers = 3;

double RunSeconds() {
  const char* text = std::getenv("MCD_HISTORY_SECONDS");
  return text != nullptr && std::atof(text) > 0 ? std::atof(text) : 100;
}

uint32_t Seed() {
  const char* text = std::getenv("MCD_HISTORY_SEED");
  return text != nullptr ? static_cast<uint32_t>(std::strtoul(text, nullptr, 10))
                         : static_cast<uint32_t>(time(nullptr));
}

void Load(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }

// The verdict: the figures, then every violation, a few of each invariant in full.
void ExpectTheModelHolds(const history::History& h, uint32_t seed) {
  std::string summary = history::Summary(h);
  std::cout << summary << " (MCD_HISTORY_SEED=" << seed << ")\n";
  ::testing::Test::RecordProperty("summary", summary);
  if (const char* path = std::getenv("MCD_HISTORY_DUMP")) std::ofstream(path) << history::Dump(h);
  std::map<char, std::vector<history::Violation>> by_invariant;
  for (auto& v : history::Check(h)) by_invariant[v.invariant].push_back(std::move(v));
  for (const auto& [invariant, violations] : by_invariant) {
    std::map<std::string, int> of_kind;
    std::string shown;
    for (const auto& v : violations) {
      if (of_kind[v.kind]++ < 3) shown += "\n  " + v.text;  // up to three of each kind
    }
    std::string counts;
    for (const auto& [kind, n] : of_kind)
      counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
    ADD_FAILURE() << violations.size() << " violation(s) of (" << invariant << "): " << counts
                  << shown;
  }
}

// Gives back the creator's reference of every tensor left: then nothing of the node may remain.
void RemoveEverythingLeft(const std::string& url, const std::string& node) {
  std::map<std::string, std::string> env = {{"MCD_REDIS_URL", url}};
  auto names = test::Run({test::ToolPath("mcd-ls"), "-q", "--node", node}, env);
  ASSERT_EQ(names.exit_code, 0) << names.err;
  std::istringstream left(names.out);
  for (std::string name; std::getline(left, name);) {
    auto rm = test::Run({test::ToolPath("mcd-rm"), name, "--detached", "--node", node}, env);
    EXPECT_EQ(rm.exit_code, 0) << name << ": " << rm.err;
  }
  EXPECT_TRUE(
      test::WaitFor([&] { return test::ShmObjects("mcd-mcd-" + node + "-").empty(); }, 3000));
}

// Device-wide GPU memory in use, MiB.
int64_t GpuUsedMiB() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return -1;
  return static_cast<int64_t>((total - free) >> 20);
}

class HistoryCheck : public Lifecycle {
 protected:
  HistoryCheck() { devices_ = history::Device(); }

  void SetUp() override {
    if (devices_ != "cpu") {
      if (!test::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
      gpu_before_mib_ = GpuUsedMiB();  // this process's context included, before any server
    }
    Lifecycle::SetUp();
    history_.ServerLaunched(0);
  }

  // On a GPU, the device's memory is back where it began once the server has stopped: no
  // tensor, stock or killed instance of the run holds any.
  void TearDown() override {
    Lifecycle::TearDown();
    if (gpu_before_mib_ < 0) return;
    int64_t used = -1;
    EXPECT_TRUE(test::WaitFor([&] { return (used = GpuUsedMiB()) <= gpu_before_mib_ + 64; }, 20000))
        << "GPU memory in use: " << used << " MiB after the run, " << gpu_before_mib_ << " before";
  }

  void StartWorkload() {
    workload_ = std::make_unique<history::Workload>(
        history::Target{redis_.url(), node_, dir_.path(), keys_}, history_);
    workload_->Start(kWorkers, seed_);
  }

  void KillServer() {
    double begun = history_.Now();
    ASSERT_EQ(server_->Stop(SIGKILL), -SIGKILL);
    double dead = history_.Now();
    history_.ServerKilled(dead);
    workload_->ServerKilled(dead);
    workload_->Burst(8, true);  // while the dead server's heartbeat lingers
    Load(1);
    history_.ServerLaunched(history_.Now());
    StartServer();
    history_.AddFault(Fault{FaultKind::kServerKill, begun, history_.Now()});
  }

  // Restarts Redis empty, from its AOF (every write synced before its reply), or from an AOF
  // that loads slowly; the fault lasts until the server has reconnected and beats again.
  void RestartRedis(FaultKind kind) {
    if (kind != FaultKind::kRedisEmpty)
      PersistWithFiller(kind == FaultKind::kRedisSlowAof ? 30000 : 0);
    if (HasFatalFailure()) return;
    size_t restored = Count(ServeLog(), "Redis connection restored");
    // Readers all through the restart, the server's reconnect and its settling.
    workload_->Burst(24, false);
    Load(0.15);
    double begun = history_.Now();
    if (kind == FaultKind::kRedisEmpty) {
      redis_.Restart();
    } else if (kind == FaultKind::kRedisAof) {
      redis_.Restart({"--appendonly", "yes", "--appendfsync", "always"});
    } else {
      RestartLoadingSlowly();
    }
    ASSERT_TRUE(test::WaitFor(
        [&] { return Count(ServeLog(), "Redis connection restored") > restored && Heartbeat(); },
        60000))
        << ServeLog();
    history_.AddFault(Fault{kind, begun, history_.Now()});
  }

  // Faults every few seconds until `seconds` into the run, in turn: mcd-serve SIGKILLed, Redis
  // restarted empty, from its AOF, from an AOF loading slowly; clients SIGKILLed between them.
  void RunFaults(double seconds) {
    const FaultKind cycle[] = {FaultKind::kServerKill, FaultKind::kRedisEmpty, FaultKind::kRedisAof,
                               FaultKind::kRedisSlowAof};
    for (int step = 0; history_.Now() + 12 < seconds && !HasFatalFailure(); ++step) {
      Load(4);
      workload_->KillTools(2, rng_);
      Load(1.5);
      FaultKind kind = cycle[step % 4];
      if (kind == FaultKind::kServerKill) {
        KillServer();
      } else {
        RestartRedis(kind);
      }
    }
    Load(std::max(0.0, seconds - history_.Now()));
  }

  uint32_t seed_ = Seed();
  std::mt19937 rng_{seed_};
  history::History history_;
  std::unique_ptr<history::Workload> workload_;
  int64_t gpu_before_mib_ = -1;  // GPU memory in use before the run; -1 on host memory
};

TEST_F(HistoryCheck, EveryOperationAgreesWithTheLifecycleModelUnderServerClientAndRedisFaults) {
  StartWorkload();
  RunFaults(RunSeconds());
  workload_->StopClients();
  workload_->Finish();
  ExpectTheModelHolds(history_, seed_);
  RemoveEverythingLeft(redis_.url(), node_);
}

class SentinelHistoryCheck : public Sentinel {
 protected:
  void SetUp() override {
    Sentinel::SetUp();
    if (HasFatalFailure()) return;
    server_ = std::make_unique<test::Background>(
        std::vector<std::string>{test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", node_,
                                 "--heartbeat-ttl", "3"},
        Env(), dir_.path() + "/serve.log");
    ASSERT_TRUE(
        test::WaitFor([&] { return ServeLog().find("serving node") != std::string::npos; }, 10000))
        << ServeLog();
    history_.ServerLaunched(0);
  }
  void TearDown() override {
    if (server_) EXPECT_EQ(server_->Stop(SIGTERM), 0) << ServeLog();
  }

  // The master SIGKILLed; the fault lasts until the server has reconnected to the promoted
  // replica and beats there.
  void Failover(history::Workload& workload) {
    size_t restored = Count(ServeLog(), "Redis connection restored");
    workload.Burst(24, false);
    Load(0.15);
    double begun = history_.Now();
    master_.Kill();
    ASSERT_TRUE(test::WaitFor(
        [&] {
          auto master = Master();
          if (Count(ServeLog(), "Redis connection restored") <= restored || master == nullptr)
            return false;
          auto beat = master->Command({"EXISTS", keys_.Server(node_)});
          return beat.ok() && beat->integer == 1;
        },
        60000))
        << ServeLog();
    history_.AddFault(Fault{FaultKind::kFailover, begun, history_.Now()});
  }

  uint32_t seed_ = Seed();
  std::mt19937 rng_{seed_};
  history::History history_;
  std::unique_ptr<test::Background> server_;
};

TEST_F(SentinelHistoryCheck, EveryOperationAgreesWithTheLifecycleModelThroughAFailover) {
  double seconds = std::max(30.0, RunSeconds() / 3);
  history::Workload workload(history::Target{url_, node_, dir_.path(), keys_}, history_);
  workload.Start(kWorkers, seed_);
  Load(seconds / 3);
  workload.KillTools(2, rng_);
  Failover(workload);
  while (history_.Now() + 5 < seconds) {
    Load(4);
    workload.KillTools(1, rng_);
  }
  Load(std::max(0.0, seconds - history_.Now()));
  workload.StopClients();
  workload.Finish();
  ExpectTheModelHolds(history_, seed_);
  RemoveEverythingLeft(url_, node_);
}

}  // namespace
}  // namespace mcd
