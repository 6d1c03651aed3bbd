// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The clients of the history test: worker threads that create tensors from random bytes and
// read, wait for and remove them through the tools, the library and the C ABI; processes that
// hold references until the test SIGKILLs them; a look at every hash's holders twice a second;
// and `mcd-ls --watch --json` all along. Everything they do and see goes into a History
// (history_model.h). The faults are the test's.
#pragma once

#include <atomic>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "history_model.h"
#include "memcuda/keys.h"
#include "test_support.h"

namespace mcd::history {

// The device the checker's tensors live on: MCD_HISTORY_DEVICE, host memory ("cpu") by default;
// CTest runs the checker again on GPU 0 as gpu.HistoryCheck (label gpu).
inline std::string Device() {
  const char* device = std::getenv("MCD_HISTORY_DEVICE");
  return device != nullptr && *device != '\0' ? device : "cpu";
}

// What the clients talk to.
struct Target {
  std::string url;  // MCD_REDIS_URL of every client
  std::string node;
  std::string dir;  // scratch files
  KeySpace keys;
};

class Workload {
 public:
  Workload(Target target, History& history);
  ~Workload();

  // Starts `workers` client threads, the holders, the looks and the watch.
  void Start(int workers, uint32_t seed);
  // Lets every worker finish its operation and SIGKILLs every holder.
  void StopClients();
  // Once the server has given back what the holders held (bounded wait), stops the looks and
  // the watch and records the final state in the history.
  void Finish();

  // Faults the test injects through the workload.
  int KillTools(int count, std::mt19937& rng);  // client processes SIGKILLed mid-command
  // Reads of `count` tensors started 25 ms apart from now, beside the workers: a fault's window
  // is short, and a reader in it is what the fault must not fool. `dead`: gets of the tensors of
  // the server just killed.
  void Burst(int count, bool dead);
  // The server died at `t`: the tensors acknowledged before it are read for 3 s still (no get of
  // them may succeed), then left alone.
  void ServerKilled(double t);

 private:
  struct Holder;

  void WorkerLoop(int worker, uint32_t seed);
  void HolderLoop(uint32_t seed);
  void ScanLoop();

  // The operations of a worker.
  void ProduceWithWaiter(std::mt19937& rng, const std::string& name, Api api);
  void Read(std::mt19937& rng, bool dead_only = false);
  void Remove(std::mt19937& rng);
  void OrphanGet(std::mt19937& rng);
  void ResolveUnknown();

  // The holders.
  std::unique_ptr<Holder> SpawnHolder(std::mt19937& rng);  // null when no tensor is there to hold
  // Records one hold per name, with the code the holder printed for it, once it said "held",
  // ended by itself, or was `killed` (the code of the names it printed nothing for); true then.
  bool CollectHolder(Holder& holder, std::optional<int> killed = std::nullopt);
  void KillHolder(Holder& holder);

  // Runs one client process and records when it ran and what it said (not yet in the history).
  Op RunOp(OpKind kind, Api api, const std::string& name, const std::vector<std::string>& argv);
  std::vector<std::string> ToolArgv(const std::string& tool, std::vector<std::string> args) const;
  std::vector<std::string> ClientArgv(Api api, const std::string& op,
                                      std::vector<std::string> args) const;
  void RecordCreate(Op create, std::string bytes);

  // The tensors the workers know of.
  bool PickLive(std::mt19937& rng, std::string* name, bool take = false, bool dead_only = false);
  std::string BytesOf(const std::string& name);
  std::string NewName(int worker);

  FinalState ReadFinalState();

  const Target target_;
  History& history_;
  std::atomic<bool> stop_clients_{false}, stop_scans_{false};
  std::vector<std::thread> threads_, burst_threads_;  // burst_threads_: guarded by mutex_
  std::thread holder_thread_, scan_thread_;
  std::unique_ptr<test::Background> watch_;

  std::mutex mutex_;                                    // guards what follows
  std::vector<std::string> live_;                       // acknowledged, not being removed
  std::vector<std::pair<std::string, double>> dead_;    // of a SIGKILLed server, since
  std::deque<std::pair<std::string, double>> unknown_;  // a create's outcome unknown, since
  std::map<std::string, std::string> bytes_;            // what each create wrote
  std::set<pid_t> holder_pids_;
  std::map<int, int> sequence_;
  std::mt19937 burst_rng_;
};

}  // namespace mcd::history
