// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "history_model.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace mcd::history {

const char* KindName(OpKind kind) {
  switch (kind) {
    case OpKind::kCreate:
      return "create";
    case OpKind::kRead:
      return "read";
    case OpKind::kWaitRead:
      return "wait-read";
    case OpKind::kRemove:
      return "remove";
    case OpKind::kHold:
      return "hold";
    case OpKind::kOrphanGet:
      return "orphan-get";
    case OpKind::kList:
      return "list";
  }
  return "?";
}

const char* ApiName(Api api) {
  switch (api) {
    case Api::kTool:
      return "tool";
    case Api::kLibrary:
      return "library";
    case Api::kCAbi:
      return "C ABI";
  }
  return "?";
}

const char* FaultName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kServerKill:
      return "mcd-serve SIGKILLed";
    case FaultKind::kRedisEmpty:
      return "Redis restarted empty";
    case FaultKind::kRedisAof:
      return "Redis restarted from its AOF";
    case FaultKind::kRedisSlowAof:
      return "Redis restarted from an AOF loading slowly";
    case FaultKind::kFailover:
      return "Sentinel failover";
    case FaultKind::kToolKill:
      return "client SIGKILLed mid-command";
  }
  return "?";
}

int History::Add(Op op) {
  std::lock_guard<std::mutex> lock(mutex_);
  op.id = static_cast<int>(ops_.size());
  ops_.push_back(std::move(op));
  return ops_.back().id;
}

void History::SetReferencesUntil(int op_id, double t) {
  std::lock_guard<std::mutex> lock(mutex_);
  ops_[op_id].references_until = t;
}

void History::AddFault(const Fault& fault) {
  std::lock_guard<std::mutex> lock(mutex_);
  faults_.push_back(fault);
}

void History::ServerLaunched(double t) {
  std::lock_guard<std::mutex> lock(mutex_);
  instances_.push_back(Instance{t, kNever});
}

void History::ServerKilled(double t) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!instances_.empty()) instances_.back().killed = t;
}

void History::AddHolderDeath(const HolderDeath& death) {
  std::lock_guard<std::mutex> lock(mutex_);
  deaths_.push_back(death);
}

void History::AddScan(Scan scan) {
  std::lock_guard<std::mutex> lock(mutex_);
  scans_.push_back(std::move(scan));
}

void History::SetWatchOutput(std::string text, bool ran_to_end) {
  std::lock_guard<std::mutex> lock(mutex_);
  watch_output_ = std::move(text);
  watch_ran_to_end_ = ran_to_end;
}

void History::SetFinal(FinalState state) {
  std::lock_guard<std::mutex> lock(mutex_);
  final_ = std::move(state);
}

void History::SetEnd(double t) {
  std::lock_guard<std::mutex> lock(mutex_);
  end_ = t;
}

namespace {

std::string Seconds(double t) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f s", t);
  return text;
}

// "op 12 (read, C ABI) of x.3, 10.21 s-10.40 s, exit 1: <output>"
std::string Describe(const Op& op) {
  std::string text = "op " + std::to_string(op.id) + " (" + KindName(op.kind) + ", " +
                     ApiName(op.api) + ") of " + op.name + ", " + Seconds(op.invoked) + "-" +
                     Seconds(op.completed) + ", exit " + std::to_string(op.exit_code);
  if (!op.output.empty()) text += ": " + op.output;
  return text;
}

// What the history says of one tensor name (names are unique per create).
struct NameFacts {
  const Op* create = nullptr;
  std::vector<const Op*> removes;
  std::vector<const Op*> referencing;  // ops whose process held a reference of it
};

std::map<std::string, NameFacts> FactsByName(const History& h) {
  std::map<std::string, NameFacts> facts;
  for (const Op& op : h.ops()) {
    NameFacts& f = facts[op.name];
    if (op.kind == OpKind::kCreate) f.create = &op;
    if (op.kind == OpKind::kRemove) f.removes.push_back(&op);
    if (op.takes_reference) f.referencing.push_back(&op);
  }
  return facts;
}

bool Acknowledged(const NameFacts& f) { return f.create != nullptr && f.create->Succeeded(); }

// The instances that may have made an acknowledged create: those alive at some time while it ran.
std::vector<const Instance*> PossibleOwners(const History& h, const Op& create) {
  std::vector<const Instance*> owners;
  for (const Instance& i : h.instances()) {
    if (i.launched <= create.completed && i.killed >= create.invoked) owners.push_back(&i);
  }
  return owners;
}

// From when the tensor may be gone with its server: the first death among its possible owners.
double MaybeLostFrom(const History& h, const NameFacts& f) {
  if (!Acknowledged(f)) return 0;
  double from = kNever;
  for (const Instance* i : PossibleOwners(h, *f.create)) from = std::min(from, i->killed);
  return from;
}

// When its server certainly died: its one possible owner's SIGKILL (kNever when unsure).
double CertainlyDeadFrom(const History& h, const NameFacts& f) {
  if (!Acknowledged(f)) return kNever;
  auto owners = PossibleOwners(h, *f.create);
  return owners.size() == 1 ? owners[0]->killed : kNever;
}

double FirstRemoveInvoked(const NameFacts& f, const Op* except = nullptr) {
  double first = kNever;
  for (const Op* rm : f.removes) {
    if (rm != except) first = std::min(first, rm->invoked);
  }
  return first;
}

// By when the references of a process that died (or was killed) at `from` must be back: the
// documented second and the slack after `from`, pushed past every fault that kept the server
// from serving meanwhile.
double ReaperDeadline(const History& h, double from) {
  double start = from;
  for (bool moved = true; moved;) {
    moved = false;
    for (const Fault& fault : h.faults()) {
      double limit = start + kReaperSeconds + kReaperSlackSeconds;
      if (fault.StopsServing() && fault.begun <= limit && fault.recovered > start) {
        start = fault.recovered;
        moved = true;
      }
    }
  }
  return start + kReaperSeconds + kReaperSlackSeconds;
}

bool ResetBetween(const History& h, double from, double to) {
  for (const Fault& fault : h.faults()) {
    if (fault.ResetsRedis() && fault.recovered >= from && fault.begun <= to) return true;
  }
  return false;
}

void CheckExitCodes(const History& h, std::vector<Violation>& out) {
  for (const Op& op : h.ops()) {
    int rc = op.exit_code;
    if (rc == -1000) {
      out.push_back({'x', "hang", "still running at its deadline: " + Describe(op)});
    } else if (op.kind == OpKind::kCreate && rc == 1) {
      out.push_back(
          {'x', "created twice", "'already exists' for a name created once: " + Describe(op)});
    } else if (!(rc == 0 || rc == 1 || rc == 69 || rc == 75 || rc == -9 ||
                 (rc == 64 && op.kind == OpKind::kOrphanGet))) {
      out.push_back({'x', "exit code", "an exit code this workload cannot cause: " + Describe(op)});
    }
  }
}

// (a) A successful read returns exactly what the create wrote, whenever it was started.
void CheckBytes(const History& h, std::vector<Violation>& out) {
  for (const Op& op : h.ops()) {
    if (op.Succeeded() && !op.bytes_wrong.empty()) {
      out.push_back({'a', "wrong bytes",
                     "a read returned other bytes than its create wrote (" + op.bytes_wrong +
                         "): " + Describe(op)});
    }
  }
}

// (c) "Not found" only where the tensor may be gone: not yet acknowledged, removed, or its server
// dead. A Redis restart or failover excuses nothing: the server puts the hashes back.
void CheckNotFound(const History& h, const std::map<std::string, NameFacts>& facts,
                   std::vector<Violation>& out) {
  for (const Op& op : h.ops()) {
    if (op.exit_code != 1 || op.kind == OpKind::kCreate || op.kind == OpKind::kList) continue;
    const NameFacts& f = facts.at(op.name);
    if (!Acknowledged(f) || f.create->completed > op.invoked) continue;
    if (FirstRemoveInvoked(f, &op) < op.completed) continue;
    if (MaybeLostFrom(h, f) < op.completed) continue;
    out.push_back(
        {'c', "not found",
         "'not found' for an acknowledged tensor that nobody removed and whose server lives: " +
             Describe(op) + " (created by op " + std::to_string(f.create->id) + ")"});
  }
}

// (b) A SIGKILLed server's tensors are gone: no get, hold or release of one succeeds once the
// server is dead. (A read without a reference needs no server and is left out.)
void CheckDeadInstance(const History& h, const std::map<std::string, NameFacts>& facts,
                       std::vector<Violation>& out) {
  for (const Op& op : h.ops()) {
    if (!op.Succeeded()) continue;
    if (!op.takes_reference && op.kind != OpKind::kRemove) continue;
    double dead = CertainlyDeadFrom(h, facts.at(op.name));
    if (dead < op.invoked) {
      out.push_back({'b', "dead server served",
                     "a tensor of a server SIGKILLed at " + Seconds(dead) +
                         " was still served: " + Describe(op)});
    }
  }
}

// The first look after a holder's death that found none of its references.
const Scan* FirstScanWithout(const History& h, const HolderDeath& death) {
  for (const Scan& scan : h.scans()) {
    if (scan.at > death.killed && scan.holders.count(death.holder) == 0) return &scan;
  }
  return nullptr;
}

// (d) Every reference of a dead process goes back within the documented second.
void CheckReferencesGoHome(const History& h, std::vector<Violation>& out) {
  for (const HolderDeath& death : h.holder_deaths()) {
    double deadline = ReaperDeadline(h, death.killed);
    const Scan* gone = FirstScanWithout(h, death);
    if (gone == nullptr || gone->at > deadline) {
      out.push_back({'d', "references late",
                     "references of holder " + death.holder + ", SIGKILLed at " +
                         Seconds(death.killed) + ", still held " +
                         (gone ? "until " + Seconds(gone->at) : "at the end") + " (deadline " +
                         Seconds(deadline) + ")"});
    }
  }
  // Any other holder: seen dead with references, and again past the deadline.
  std::map<std::string, double> first_dead;
  std::set<std::string> reported;
  for (const Scan& scan : h.scans()) {
    for (const auto& [holder, alive] : scan.holders) {
      if (holder.rfind("1:", 0) == 0 && reported.insert(holder).second) {
        out.push_back({'d', "bound to pid 1",
                       "references bound to pid 1 (holder " + holder +
                           "), which never dies, seen at " + Seconds(scan.at)});
      }
      if (alive) continue;
      double first = first_dead.emplace(holder, scan.at).first->second;
      if (scan.at > ReaperDeadline(h, first) && reported.insert(holder).second) {
        out.push_back({'d', "dead holder's references",
                       "references of dead holder " + holder + " seen at " + Seconds(first) +
                           " and still at " + Seconds(scan.at)});
      }
    }
  }
}

enum class Fate { kPresent, kAbsent, kEither };

// What the model says must be left of a name at the end, and why.
Fate FinalFate(const History& h, const NameFacts& f, std::string* why) {
  if (!Acknowledged(f)) return *why = "its create's outcome is unknown", Fate::kEither;
  if (MaybeLostFrom(h, f) < kNever) {
    if (CertainlyDeadFrom(h, f) < kNever) return *why = "its server was SIGKILLed", Fate::kAbsent;
    return *why = "a server was SIGKILLed while it was created", Fate::kEither;
  }
  if (f.removes.empty()) return *why = "acknowledged and never removed", Fate::kPresent;
  const Op& rm = *f.removes.front();
  if (!rm.Succeeded()) return *why = "its removal's outcome is unknown", Fate::kEither;
  if (rm.freed) return *why = "removed and freed", Fate::kAbsent;
  // Others held it when its creator's reference went: Redis losing their references (a restart
  // without persistence, a failover) before they gave them back leaves it at refcount 1.
  double last = rm.completed;
  for (const Op* op : f.referencing) last = std::max(last, op->references_until);
  if (ResetBetween(h, rm.invoked, ReaperDeadline(h, last))) {
    return *why = "Redis lost references of it while others held it", Fate::kEither;
  }
  return *why = "removed, and every other holder is gone", Fate::kAbsent;
}

// (e) A hash left at the end holds only its creator's reference (every holder is dead), ready,
// of the live instance.
void CheckLeftHash(const std::string& name, const std::map<std::string, std::string>& fields,
                   const FinalState& s, std::vector<Violation>& out) {
  auto field = [&](const char* key) {
    auto it = fields.find(key);
    return it == fields.end() ? std::string() : it->second;
  };
  std::string holders;
  for (const auto& [key, value] : fields) {
    if (key.rfind("holder:", 0) == 0) holders += " " + key + "=" + value;
  }
  if (field("state") != "ready" || field("owner") != s.instance || field("refcount") != "1" ||
      !holders.empty() || !(field("bound").empty() || field("bound") == "0")) {
    out.push_back(
        {'e', "hash not the model's",
         "tensor " + name + " left as state " + field("state") + ", refcount " + field("refcount") +
             ", bound '" + field("bound") + "', owner " +
             (field("owner") == s.instance ? "the live instance" : "'" + field("owner") + "'") +
             (holders.empty() ? "" : ", holders" + holders) +
             "; the model: ready, refcount 1, no holder"});
  }
}

// (b) and (e) at the end: each name's hash is there or not as the model says, and what is
// there is consistent.
void CheckFinal(const History& h, const std::map<std::string, NameFacts>& facts,
                std::vector<Violation>& out) {
  const FinalState& s = h.final_state();
  for (const auto& [name, f] : facts) {
    std::string why;
    Fate fate = FinalFate(h, f, &why);
    bool present = s.hashes.count(name) > 0;
    if (fate == Fate::kPresent && !present) {
      out.push_back({'b', "create lost",
                     "acknowledged tensor " + name + " lost (" + why + "; created by " +
                         Describe(*f.create) + ")"});
    } else if (fate == Fate::kAbsent && present) {
      out.push_back(
          {'e', "left although gone", "tensor " + name + " left in Redis although " + why});
    }
  }
  std::set<std::string> handles;
  for (const auto& [name, fields] : s.hashes) {
    if (facts.count(name) == 0)
      out.push_back({'e', "hash never created", "a hash the history never created: " + name});
    CheckLeftHash(name, fields, s, out);
    // Host tensors name their shm object; GPU memory is checked by the device's count instead.
    auto handle = fields.find("ipc_handle");
    auto kind = fields.find("ipc_kind");
    bool host = kind == fields.end() || kind->second == "host_shm";
    if (handle != fields.end() && host) handles.insert(handle->second);
  }
  for (const std::string& object : s.shm_objects) {
    if (handles.count(object) == 0)
      out.push_back({'e', "stray shm object", "shm object " + object + " that no hash names"});
  }
  for (const std::string& handle : handles) {
    if (s.shm_objects.count(handle) == 0)
      out.push_back(
          {'e', "shm object gone", "a hash names shm object " + handle + ", which is gone"});
  }
  if (s.heartbeat_tensors != std::to_string(s.hashes.size())) {
    out.push_back({'e', "heartbeat count",
                   "the heartbeat counts " + s.heartbeat_tensors + " tensors; Redis holds " +
                       std::to_string(s.hashes.size())});
  }
  if (s.queue + s.node_queue + s.processing + s.holders + s.held_keys != 0) {
    out.push_back({'e', "lists left",
                   "left at the end: queue " + std::to_string(s.queue) + ", node queue " +
                       std::to_string(s.node_queue) + ", processing " +
                       std::to_string(s.processing) + ", holders " + std::to_string(s.holders) +
                       ", held sets " + std::to_string(s.held_keys)});
  }
}

// Whether Redis may have lost the events around `t` before the watch read them.
bool NearReset(const History& h, double t) {
  for (const Fault& fault : h.faults()) {
    if (fault.ResetsRedis() && fault.begun - 10 <= t && t <= fault.recovered) return true;
  }
  return false;
}

struct WatchedName {
  std::vector<std::string> events;  // in stream order
  bool freed = false;
};

// Parses `mcd-ls --watch --json`'s output: JSON lines, and diagnostics "mcd-ls: ...".
std::map<std::string, WatchedName> ParseWatch(const std::string& text, bool* gap,
                                              std::vector<Violation>& out) {
  std::map<std::string, WatchedName> names;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("mcd-ls: ", 0) == 0) continue;
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.is_object()) {
      out.push_back({'w', "watch line",
                     "a line of the watch that is neither an event nor a diagnostic: " + line});
      continue;
    }
    std::string event = e.value("event", ""), name = e.value("name", "");
    if (name.empty()) {
      // Not a tensor's nor a server's: the watch reporting events it missed.
      if (event != "server_start" && event != "server_stop") *gap = true;
      continue;
    }
    WatchedName& w = names[name];
    if (w.freed && event != "reclaim") {
      out.push_back(
          {'w', "event after freed", "event '" + event + "' of " + name + " after it was freed"});
    }
    w.events.push_back(event);
    if (e.value("refcount", 1) <= 0) w.freed = true;
  }
  return names;
}

// The watch saw every acknowledged create and every freeing removal, unless Redis lost the
// stream around it, and nothing of a name the history did not create.
void CheckWatch(const History& h, const std::map<std::string, NameFacts>& facts,
                std::vector<Violation>& out) {
  if (!h.watch_ran_to_end())
    out.push_back({'w', "watch ended", "mcd-ls --watch ended before the run did"});
  bool gap = false;
  auto watched = ParseWatch(h.watch_output(), &gap, out);
  for (const auto& [name, w] : watched) {
    if (facts.count(name) == 0)
      out.push_back(
          {'w', "event of unknown name", "an event of a name the history never created: " + name});
  }
  if (gap) return;  // the watch said it missed events: what it printed is not the whole stream
  for (const auto& [name, f] : facts) {
    auto it = watched.find(name);
    const WatchedName* w = it == watched.end() ? nullptr : &it->second;
    if (Acknowledged(f) && !NearReset(h, f.create->completed) &&
        (w == nullptr ||
         std::find(w->events.begin(), w->events.end(), "create") == w->events.end())) {
      out.push_back({'w', "create unseen",
                     "the watch did not see " + name + " created: " + Describe(*f.create)});
    }
    for (const Op* rm : f.removes) {
      if (rm->Succeeded() && rm->freed && !NearReset(h, rm->completed) &&
          (w == nullptr || !w->freed)) {
        out.push_back(
            {'w', "free unseen", "the watch did not see " + name + " freed: " + Describe(*rm)});
      }
    }
  }
}

}  // namespace

std::vector<Violation> Check(const History& h) {
  std::vector<Violation> out;
  auto facts = FactsByName(h);
  CheckExitCodes(h, out);
  CheckBytes(h, out);
  CheckDeadInstance(h, facts, out);
  CheckNotFound(h, facts, out);
  CheckReferencesGoHome(h, out);
  CheckFinal(h, facts, out);
  CheckWatch(h, facts, out);
  std::stable_sort(out.begin(), out.end(), [](const Violation& a, const Violation& b) {
    return a.invariant < b.invariant;
  });
  return out;
}

namespace {

// Seconds from each killed holder's SIGKILL to the first look that found its references back.
std::vector<double> ReturnLatencies(const History& h) {
  std::vector<double> latencies;
  for (const HolderDeath& death : h.holder_deaths()) {
    if (const Scan* gone = FirstScanWithout(h, death)) latencies.push_back(gone->at - death.killed);
  }
  std::sort(latencies.begin(), latencies.end());
  return latencies;
}

}  // namespace

std::string Dump(const History& h) {
  std::ostringstream text;
  for (const Instance& i : h.instances())
    text << "server " << Seconds(i.launched) << "-" << Seconds(i.killed) << "\n";
  for (const Fault& f : h.faults())
    text << "fault " << FaultName(f.kind) << " " << Seconds(f.begun) << "-" << Seconds(f.recovered)
         << "\n";
  for (const HolderDeath& d : h.holder_deaths()) {
    const Scan* gone = FirstScanWithout(h, d);
    text << "holder " << d.holder << " killed " << Seconds(d.killed) << ", references back by "
         << (gone ? Seconds(gone->at) : "never") << " (deadline "
         << Seconds(ReaperDeadline(h, d.killed)) << ")\n";
  }
  for (const Op& op : h.ops()) {
    text << Describe(op) << (op.bytes_wrong.empty() ? "" : " [" + op.bytes_wrong + "]") << " | "
         << op.command << "\n";
  }
  return text.str();
}

std::string Summary(const History& h) {
  std::map<std::string, std::map<int, int>> codes;  // "kind/api" -> exit code -> count
  for (const Op& op : h.ops())
    ++codes[std::string(KindName(op.kind)) + "/" + ApiName(op.api)][op.exit_code];
  std::ostringstream text;
  text << "history: " << h.ops().size() << " operations in " << Seconds(h.end()) << ";";
  for (const auto& [what, by_code] : codes) {
    text << " " << what << ":";
    for (const auto& [rc, n] : by_code) text << " " << rc << "=" << n;
    text << ";";
  }
  std::map<std::string, int> faults;
  for (const Fault& fault : h.faults()) ++faults[FaultName(fault.kind)];
  text << " faults:";
  for (const auto& [what, n] : faults) text << " " << n << " x " << what << ";";
  auto latencies = ReturnLatencies(h);
  text << " " << h.holder_deaths().size() << " holders SIGKILLed";
  if (!latencies.empty()) {
    text << ", references back within " << Seconds(latencies[latencies.size() / 2]) << " (median), "
         << Seconds(latencies.back()) << " (slowest)";
  }
  text << "; " << h.scans().size() << " looks at the holders; " << h.final_state().hashes.size()
       << " tensors left at the end";
  return text.str();
}

}  // namespace mcd::history
