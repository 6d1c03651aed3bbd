// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The history checker's record and model: what the history test's clients did and saw (every
// operation with its invocation and completion time, arguments, exit code and output), the
// faults it injected, what it saw of the references held in Redis while it ran, and what Redis
// and /dev/shm held at the end; and the model of the lifecycle that the whole history is checked
// against (docs/design.md, "The history checker"):
//
//  (a) every successful read returns exactly the bytes its create wrote;
//  (b) no acknowledged create is lost until removed, unless its server was SIGKILLed, and then
//      its tensors are gone: nothing of a dead instance is served;
//  (c) no "not found" for an acknowledged tensor that was not removed and whose server lives;
//  (d) every reference of a dead process goes back within the documented second (plus a bounded
//      slack, and the time the server or Redis was down);
//  (e) at the end, the hashes, refcounts, holders, shm objects and lists are the model's.
//
// Besides these, every exit code must be one the workload can cause, and the event stream that
// `mcd-ls --watch --json` printed must agree with the history.
#pragma once

#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace mcd::history {

// Seconds since the start of the run (a steady clock).
class RunClock {
 public:
  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

enum class OpKind {
  kCreate,     // a tensor made from random bytes (mcd-create --from, or the library or C ABI)
  kRead,       // the bytes read back after the create was acknowledged
  kWaitRead,   // mcd-get --wait -o, started with (often before) the create
  kRemove,     // mcd-rm of the creator's reference
  kHold,       // a reference taken by a process that the test later SIGKILLs
  kOrphanGet,  // mcd-get whose parent shell has exited
  kList,       // mcd-ls NAME: did a create whose outcome was unknown happen?
};
enum class Api { kTool, kLibrary, kCAbi };

const char* KindName(OpKind kind);
const char* ApiName(Api api);

inline constexpr double kNever = std::numeric_limits<double>::infinity();

struct Op {
  int id = 0;
  OpKind kind = OpKind::kCreate;
  Api api = Api::kTool;
  std::string name;
  std::string command;      // what ran, for the report
  double invoked = 0;       // before the process was started
  double completed = 0;     // after it exited (a hold: when the test saw "held")
  int exit_code = 0;        // -9: SIGKILLed by the test; -1000: still running at its deadline
  std::string output;       // stdout and stderr, shortened
  std::string bytes_wrong;  // reads with exit 0: "" when every byte was the create's, else how not
  bool freed = false;       // kRemove: the tool said the tensor was freed
  bool takes_reference = false;  // the op's process held a reference of it while it ran
  double references_until = 0;   // when that process was gone (a holder: when it was killed)
  bool Succeeded() const { return exit_code == 0; }
};

enum class FaultKind {
  kServerKill,    // mcd-serve SIGKILLed, then a new one started
  kRedisEmpty,    // Redis SIGKILLed and started without persistence: every key lost
  kRedisAof,      // Redis SIGKILLed and started from its AOF (appendfsync always)
  kRedisSlowAof,  // the same, loading slowly (LOADING answered meanwhile)
  kFailover,      // the Sentinel master SIGKILLed; the replica promoted
  kToolKill,      // a client process SIGKILLed mid-command
};
const char* FaultName(FaultKind kind);

struct Fault {
  FaultKind kind = FaultKind::kToolKill;
  double begun = 0;
  double recovered = 0;  // the node's heartbeat back (the server serving again)
  // Redis may have lost what it held: references, and events not yet read.
  bool ResetsRedis() const {
    return kind == FaultKind::kRedisEmpty || kind == FaultKind::kFailover;
  }
  // The server could not serve (and its reaper not run) for a while.
  bool StopsServing() const { return kind != FaultKind::kToolKill; }
};

// One mcd-serve process: from its start to its SIGKILL (kNever: it lived to the end).
struct Instance {
  double launched = 0;
  double killed = kNever;
};

// A process that held references and was SIGKILLed by the test.
struct HolderDeath {
  std::string holder;  // "PID:START", as the hashes name it
  double killed = 0;
};

// What one look at every tensor hash found: the holders with references (> 0) and whether each
// process still ran.
struct Scan {
  double at = 0;
  std::map<std::string, bool> holders;  // "PID:START" -> alive
};

// What Redis and /dev/shm held once every client was gone.
struct FinalState {
  std::map<std::string, std::map<std::string, std::string>> hashes;  // name -> fields
  std::string instance;                                              // the live server's
  std::string heartbeat_tensors;
  std::set<std::string> shm_objects;  // "/mcd-mcd-<node>-..."
  long long queue = 0, node_queue = 0, processing = 0, holders = 0, held_keys = 0;
};

struct Violation {
  char invariant;    // 'a'..'e'; 'x' for exit codes, 'w' for the watch
  const char* kind;  // which check, in a few words
  std::string text;
};

// The whole record of a run. Appends are thread-safe; the checker reads it once the run is over.
class History {
 public:
  const RunClock& clock() const { return clock_; }
  double Now() const { return clock_.Now(); }

  int Add(Op op);  // returns its id
  void SetReferencesUntil(int op_id, double t);
  void AddFault(const Fault& fault);
  void ServerLaunched(double t);
  void ServerKilled(double t);
  void AddHolderDeath(const HolderDeath& death);
  void AddScan(Scan scan);
  // What `mcd-ls --watch --json` printed, and whether it still ran at the end.
  void SetWatchOutput(std::string text, bool ran_to_end);
  void SetFinal(FinalState state);
  void SetEnd(double t);

  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<Fault>& faults() const { return faults_; }
  const std::vector<Instance>& instances() const { return instances_; }
  const std::vector<HolderDeath>& holder_deaths() const { return deaths_; }
  const std::vector<Scan>& scans() const { return scans_; }
  const std::string& watch_output() const { return watch_output_; }
  bool watch_ran_to_end() const { return watch_ran_to_end_; }
  const FinalState& final_state() const { return final_; }
  double end() const { return end_; }

 private:
  RunClock clock_;
  std::mutex mutex_;
  std::vector<Op> ops_;
  std::vector<Fault> faults_;
  std::vector<Instance> instances_;
  std::vector<HolderDeath> deaths_;
  std::vector<Scan> scans_;
  std::string watch_output_;
  bool watch_ran_to_end_ = false;
  FinalState final_;
  double end_ = 0;
};

// The documented time within which the server gives back a dead process's references, and the
// slack allowed on a loaded machine on top of it.
inline constexpr double kReaperSeconds = 1.0;
inline constexpr double kReaperSlackSeconds = 5.0;

// Checks the whole history against the model; every violation found, in invariant order.
std::vector<Violation> Check(const History& history);
// One paragraph of figures: operations by kind and outcome, faults by kind, the slowest return
// of a dead holder's references.
std::string Summary(const History& history);
// Every server, fault, holder death and operation, one a line.
std::string Dump(const History& history);

}  // namespace mcd::history
