// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Chaos under load: eight shell clients run create, get, release, release through the real
// tools while mcd-serve is SIGKILLed, Redis restarts (empty, from its AOF, from a slow AOF load)
// and clients and their tools are SIGKILLed mid-command. Afterwards, with every client gone,
// what Redis says must be exactly what the server holds. MCD_CHAOS_DEVICE picks the device of
// the tensors ("cpu" by default; a GPU ordinal on a GPU host).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "lifecycle_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

constexpr int kClients = 8;
constexpr int kTimeoutMs = 3000;

class Chaos : public Lifecycle {
 protected:
  Chaos() { devices_ = device_; }
  void SetUp() override {
    if (device_ != "cpu" && !test::HasCudaDevice())
      GTEST_SKIP() << "no CUDA device for MCD_CHAOS_DEVICE=" << device_;
    Lifecycle::SetUp();
  }
  std::string device_ = std::getenv("MCD_CHAOS_DEVICE") ? std::getenv("MCD_CHAOS_DEVICE") : "cpu";

  // One client: a shell that runs the four steps on names of its own until told to stop, and
  // logs "<tool> <exit code> <start s> <end s>" for each command. The shell holds the
  // references its mcd-get takes.
  std::string WriteClientScript() {
    std::string path = dir_.path() + "/client.sh";
    std::ofstream out(path);
    out << "id=$1; i=0\n"
        << "run() { t0=$EPOCHREALTIME; \"$@\" --node " << node_ << " --timeout-ms " << kTimeoutMs
        << " -q 2>>" << dir_.path()
        << "/client$id.err; rc=$?; echo \"${1##*/} $rc $t0 $EPOCHREALTIME\" >> " << dir_.path()
        << "/client$id.log; }\n"
        << "while [ ! -e " << dir_.path() << "/stop ]; do\n"
        << "  n=c$id.$$.$i; i=$((i+1))\n"
        << "  run " << test::ToolPath("mcd-create") << " $n --dtype u8 --shape 4096 --device "
        << device_ << "\n"
        << "  run " << test::ToolPath("mcd-get") << " $n\n"
        << "  run " << test::ToolPath("mcd-rm") << " $n\n"
        << "  run " << test::ToolPath("mcd-rm") << " $n\n"
        << "done\n";
    return path;
  }

  void StartClient(int id) {
    clients_[id] = std::make_unique<test::Background>(
        std::vector<std::string>{"/bin/bash", script_, std::to_string(id)}, Env(),
        dir_.path() + "/client" + std::to_string(id) + ".out");
  }

  // SIGKILLs a tool that a client is running, mid-command.
  bool KillATool(std::mt19937& rng) {
    for (int tries = 0; tries < 20; ++tries) {
      int id = static_cast<int>(rng() % kClients);
      auto tools = test::ChildrenOf(clients_[id]->pid());
      if (!tools.empty() && tools[0] > 0 && kill(tools[0], SIGKILL) == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // GPU memory of process `pid` in MiB, as nvidia-smi sees it; -1 when it has none.
  static long long GpuMiB(pid_t pid) {
    auto smi = test::Run(
        {"/bin/sh", "-c",
         "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits"});
    std::istringstream lines(smi.out);
    for (std::string line; std::getline(lines, line);) {
      size_t comma = line.find(',');
      if (comma != std::string::npos && std::atoll(line.c_str()) == pid)
        return std::atoll(line.c_str() + comma + 1);
    }
    return -1;
  }
  // The server's GPU memory right after its start, before any tensor.
  void NoteGpuBaseline() {
    if (device_ != "cpu") baseline_mib_ = GpuMiB(server_->pid());
  }
  long long baseline_mib_ = -1;

  // The faults, in the order of the schedule below, counted by kind in faults_.
  void Load(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
  void KillTools(int n) {
    for (int i = 0; i < n; ++i) {
      faults_["tool SIGKILLed mid-command"] += KillATool(rng_) ? 1 : 0;
      Load(100 + static_cast<int>(rng_() % 200));
    }
  }
  void KillServer() {
    ASSERT_EQ(server_->Stop(SIGKILL), -SIGKILL);
    ++faults_["mcd-serve SIGKILLed"];
    Load(300);
    StartServer();
    NoteGpuBaseline();
  }
  void KillClient() {
    int id = static_cast<int>(rng_() % kClients);
    clients_[id]->Stop(SIGKILL);  // its tool, if any, runs on to its end
    ++faults_["client shell SIGKILLed (a holder)"];
    StartClient(id);
  }
  // "empty", "aof" or "slow AOF load"; the AOF is turned on (with filler keys to load) the first
  // time it is needed after an empty restart.
  void RestartRedis(const std::string& kind) {
    if (kind != "empty" && !aof_) {
      auto conn = redis_.Connect();
      ASSERT_TRUE(
          conn->Command(
                  {"EVAL", "for i = 1, 50000 do redis.call('SET', 'filler:' .. i, 'x') end", "0"})
              .ok());
      ASSERT_TRUE(conn->Command({"CONFIG", "SET", "appendonly", "yes"}).ok());
      ASSERT_TRUE(test::WaitFor(
          [&] {
            auto info = conn->Command({"INFO", "persistence"});
            return info.ok() && InfoField(info->str, "aof_rewrite_in_progress") == "0" &&
                   InfoField(info->str, "aof_rewrite_scheduled") == "0";
          },
          20000));
      aof_ = true;
    }
    if (kind == "empty") {
      redis_.Restart();
      aof_ = false;
    } else if (kind == "aof") {
      redis_.Restart({"--appendonly", "yes"});
    } else {
      redis_.Restart({"--appendonly", "yes", "--key-load-delay", "20",
                      "--loading-process-events-interval-bytes", "1024"});
    }
    ++faults_["Redis restarted (" + kind + ")"];
  }
  void RunFaults() {
    Load(2000);
    for (int round = 0; round < 2; ++round) {
      KillTools(6);
      KillServer();
      KillTools(4);
      RestartRedis("empty");
      Load(1500);
      KillClient();
      RestartRedis("aof");
      Load(1500);
      KillTools(4);
      KillServer();
      Load(1000);
      RestartRedis("slow AOF load");
      Load(1500);
      KillClient();
      KillTools(4);
      RestartRedis("empty");
      Load(1500);
    }
    LoadUntilCreated(kEnoughCreates);
  }

  // Load goes on until the clients' creates have succeeded `count` times in all (a loaded machine
  // runs fewer commands in the same time), for 2 s at least and 120 s at most.
  static constexpr int kEnoughCreates = 120;
  void LoadUntilCreated(int count) {
    Load(2000);
    test::WaitFor([&] { return SuccessfulCreates() >= count; }, 118000);
  }
  int SuccessfulCreates() const {
    int created = 0;
    for (int id = 0; id < kClients; ++id) {
      std::istringstream log(test::ReadFile(dir_.path() + "/client" + std::to_string(id) + ".log"));
      for (std::string line; std::getline(log, line);)
        created += line.rfind("mcd-create 0 ", 0) == 0;
    }
    return created;
  }

  // Every command's exit code is in the documented set and none hung. A command waits up to its
  // timeout for a Redis that is away (restarting, loading) while it connects, and up to its
  // timeout again for its reply; starting the tool comes on top (a second at most here, also on a
  // loaded machine).
  void CheckCommands() {
    for (int id = 0; id < kClients; ++id) {
      std::istringstream log(test::ReadFile(dir_.path() + "/client" + std::to_string(id) + ".log"));
      std::string tool;
      int rc = 0;
      double t0 = 0, t1 = 0;
      while (log >> tool >> rc >> t0 >> t1) {
        ++commands_;
        ++codes_[tool][rc];
        if (rc == 128 + SIGKILL) continue;  // killed by the test
        EXPECT_TRUE(rc == 0 || rc == 1 || rc == 69 || rc == 75) << tool << " exited " << rc;
        slowest_ = std::max(slowest_, t1 - t0);
        if (t1 - t0 > 2 * kTimeoutMs / 1000.0 + 1) {
          ++late_;
          ADD_FAILURE() << tool << " of client " << id << " exited " << rc << " after " << t1 - t0
                        << " s";
        }
      }
    }
    EXPECT_EQ(late_, 0) << "commands past twice their timeout plus a second; slowest " << slowest_
                        << " s";
    std::map<std::string, int> errors;  // what the failed commands said, by their first words
    for (int id = 0; id < kClients; ++id) {
      std::istringstream err(test::ReadFile(dir_.path() + "/client" + std::to_string(id) + ".err"));
      for (std::string line; std::getline(err, line);) {
        // "<tool>: error: <message> (<code>)": the code and the message's first three words.
        size_t at = line.find("error: "), code = line.rfind(" (");
        if (at == std::string::npos || code == std::string::npos) continue;
        std::istringstream words(line.substr(at + 7));
        std::string head, word;
        for (int i = 0; i < 3 && words >> word; ++i) head += word + " ";
        ++errors[line.substr(code + 1) + " " + head + "..."];
      }
    }
    for (const auto& [what, n] : errors) std::cout << "  " << n << " x " << what << "\n";
  }

  // With every client gone: the lists are empty, every hash is ready, this instance's, at
  // refcount 1 with no holder, the server counts as many tensors, and (host) the shm objects are
  // exactly those the hashes name. Returns the number of hashes.
  size_t CheckQuiescentState() {
    auto conn = redis_.Connect();
    EXPECT_EQ(conn->Command({"LLEN", keys_.Processing(node_)})->integer, 0);
    EXPECT_EQ(conn->Command({"LLEN", keys_.queue})->integer, 0);
    EXPECT_EQ(conn->Command({"LLEN", keys_.NodeQueue(node_)})->integer, 0);
    std::string instance = conn->Command({"HGET", keys_.Server(node_), "instance"})->str;
    std::set<std::string> handles;
    size_t hashes = 0;
    for (const std::string& key : TensorKeys()) {
      ++hashes;
      std::map<std::string, std::string> f = FieldMap(conn->Command({"HGETALL", key}).value());
      EXPECT_EQ(f["state"], "ready") << key;
      EXPECT_EQ(f["owner"], instance) << key;
      // Every holder is gone: only the creator's reference, bound to nobody, can be left.
      EXPECT_EQ(f["refcount"], "1") << key;
      for (const auto& [field, value] : f)
        EXPECT_NE(field.rfind("holder:", 0), 0u) << key << " " << field;
      EXPECT_TRUE(f["bound"].empty() || f["bound"] == "0") << key << " bound " << f["bound"];
      handles.insert(f["ipc_handle"]);
    }
    EXPECT_EQ(conn->Command({"HGET", keys_.Server(node_), "tensors"})->str, std::to_string(hashes))
        << ServeLog();
    // The reaper gave back every dead holder's references (the hashes above hold none) without
    // an error other than Redis being away: a give-back that a Redis restart cut off is logged
    // and done again on a later pass.
    const std::string log = ServeLog();
    for (size_t at = log.find("release_dead of '"); at != std::string::npos;
         at = log.find("release_dead of '", at + 1)) {
      std::string line = log.substr(at, log.find('\n', at) - at);
      size_t reason = line.find("': ");
      std::string code = reason == std::string::npos
                             ? line
                             : line.substr(reason + 3, line.find(':', reason + 3) - reason - 3);
      EXPECT_TRUE(code == "unavailable" || code == "try_again") << line << "\n" << log;
    }
    if (device_ == "cpu") {
      std::set<std::string> objects;
      for (const std::string& name : test::ShmObjects("mcd-mcd-" + node_))
        objects.insert("/" + name);
      EXPECT_EQ(objects, handles);
    }
    return hashes;
  }

  void PrintSummary(size_t hashes) {
    std::string summary =
        "chaos: " + std::to_string(commands_) + " commands on device " + device_ + ";";
    for (const auto& [what, n] : faults_) summary += " " + std::to_string(n) + " x " + what + ";";
    for (const auto& [tool, by_code] : codes_) {
      summary += " " + tool + ":";
      for (const auto& [rc, n] : by_code)
        summary += " " + std::to_string(rc) + "=" + std::to_string(n);
      summary += ";";
    }
    summary += " tensors left " + std::to_string(hashes) + ", slowest command " +
               std::to_string(slowest_) + " s";
    std::cout << summary << "\n";
    RecordProperty("summary", summary);
  }

  // What is left goes with the creators' references, and then nothing may remain: no hash, no
  // shm object, no holder set, and (GPU) the server's memory back at its level at start.
  void RemoveEverythingLeft() {
    for (const std::string& key : TensorKeys()) {
      std::string name = keys_.NameFromTensorKey(key);
      EXPECT_EQ(Tool("mcd-rm", {name, "--detached", "-q"}).exit_code, 0) << name;
    }
    EXPECT_TRUE(TensorKeys().empty());
    auto conn = redis_.Connect();
    EXPECT_EQ(conn->Command({"KEYS", keys_.prefix + ":held:*"})->elements.size(), 0u);
    if (device_ == "cpu") {
      EXPECT_TRUE(ShmFreedSoon());
      return;
    }
    // Give or take the slabs and the ready stock the server keeps for the next creates (its
    // heartbeat says how much).
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    auto beat = conn->Command({"HMGET", keys_.Server(node_), "slab_bytes", "ready_bytes"});
    long long kept_mib =
        (std::atoll(beat->elements[0].str.c_str()) + std::atoll(beat->elements[1].str.c_str())) >>
        20;
    long long now_mib = GpuMiB(server_->pid());
    std::cout << "chaos: server GPU memory " << baseline_mib_ << " MiB at its start, " << now_mib
              << " MiB after the clean-up, of which " << kept_mib << " MiB slabs and ready stock\n";
    EXPECT_LE(now_mib, baseline_mib_ + kept_mib + 64);
  }

  std::unique_ptr<test::Background> clients_[kClients];
  std::string script_;
  std::mt19937 rng_{12345};
  bool aof_ = false;
  std::map<std::string, int> faults_;
  std::map<std::string, std::map<int, int>> codes_;  // tool -> exit code -> commands
  int commands_ = 0, late_ = 0;
  double slowest_ = 0;
};

TEST_F(Chaos, WhatRedisSaysIsWhatTheServerHoldsAfterFaultsUnderLoad) {
  NoteGpuBaseline();
  script_ = WriteClientScript();
  for (int id = 0; id < kClients; ++id) StartClient(id);
  RunFaults();
  // Every client stops after its current command; the reaper then gives back what they held.
  std::ofstream(dir_.path() + "/stop").close();
  for (auto& client : clients_) EXPECT_EQ(client->Stop(0, 60), 0);
  CheckCommands();
  ASSERT_GE(codes_["mcd-create"][0], kEnoughCreates) << "too little load to say anything";
  // Quiescence: the reaper has had its second, the heartbeat its beat.
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return redis_.Connect()->Command({"SCARD", keys_.Holders(node_)})->integer == 0;
      },
      5000))
      << ServeLog();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  PrintSummary(CheckQuiescentState());
  RemoveEverythingLeft();
}

}  // namespace
}  // namespace mcd
