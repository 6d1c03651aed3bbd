// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "history_workload.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/process.h"
#include "memcuda/redis.h"
#include "npy.h"

namespace mcd::history {

namespace {

constexpr const char* kTimeoutMs = "5000";  // every client's --timeout-ms
constexpr const char* kWaitSeconds = "10";  // mcd-get --wait
constexpr int kRunTimeoutS = 60;            // a client still running then is a hang
constexpr int kHolders = 3;                 // holder processes alive at once

double Uniform(std::mt19937& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

void Sleep(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }

// Random bytes, never all zero: a reader handed a zeroed tensor must differ.
std::string RandomBytes(std::mt19937& rng) {
  std::string bytes(std::uniform_int_distribution<size_t>(16, 65536)(rng), '\0');
  for (char& b : bytes) b = static_cast<char>(rng());
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] | 0x80);
  return bytes;
}

// "" when `got` is `want`, else how it differs.
std::string Difference(const std::string& got, const std::string& want) {
  if (got == want) return "";
  if (got.size() != want.size()) {
    return std::to_string(got.size()) + " bytes instead of " + std::to_string(want.size());
  }
  size_t first = 0;
  while (got[first] == want[first]) ++first;
  char text[128];
  std::snprintf(text, sizeof(text),
                "byte %zu is 0x%02x instead of 0x%02x; %zd of %zu bytes are zero", first,
                static_cast<unsigned char>(got[first]), static_cast<unsigned char>(want[first]),
                std::count(got.begin(), got.end(), '\0'), got.size());
  return text;
}

std::string NpyDifference(const std::string& path, const std::string& want) {
  auto array = tools::ReadNpy(path);
  if (!array.ok()) return "the output file: " + array.status().ToString();
  if (array->dtype != DType::kU8 ||
      array->shape != std::vector<int64_t>{static_cast<int64_t>(want.size())}) {
    return "dtype or shape not the create's";
  }
  return Difference(std::string(array->data), want);
}

std::string Shorten(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  if (text.size() > 400) text = text.substr(0, 400) + "...";
  return text;
}

std::string Comm(pid_t pid) {
  std::string comm = test::ReadFile("/proc/" + std::to_string(pid) + "/comm");
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

std::string HolderId(pid_t pid) {
  return std::to_string(pid) + ":" + std::to_string(ProcessStartTime(pid));
}

bool HolderAlive(const std::string& holder) {
  size_t colon = holder.find(':');
  if (colon == std::string::npos) return false;
  return ProcessAlive(std::atoll(holder.c_str()),
                      std::strtoull(holder.c_str() + colon + 1, nullptr, 10));
}

// An error line's "(code_name)" as the tools' exit code; -1 when there is none.
int ExitCodeOfMessage(const std::string& err) {
  size_t close = err.rfind(')'), open = err.rfind('(');
  if (close == std::string::npos || open == std::string::npos || open > close) return -1;
  auto code = ErrorCodeFromName(err.substr(open + 1, close - open - 1));
  return code ? ExitCodeFor(*code) : -1;
}

}  // namespace

// A process that takes references and holds them until the test SIGKILLs it.
struct Workload::Holder {
  std::unique_ptr<test::Background> process;
  pid_t pid = 0;
  std::string id;  // "PID:START"
  Api api = Api::kTool;
  std::vector<std::string> names;
  std::string log;
  double spawned = 0;
  double kill_at = kNever;  // set once it said "held"
  std::vector<int> ops;
};

Workload::Workload(Target target, History& history)
    : target_(std::move(target)), history_(history) {}

Workload::~Workload() {
  StopClients();
  stop_scans_ = true;
  if (scan_thread_.joinable()) scan_thread_.join();
}

void Workload::Start(int workers, uint32_t seed) {
  watch_ = std::make_unique<test::Background>(
      ToolArgv("mcd-ls", {"--watch", "--json", "--since", "all"}),
      std::map<std::string, std::string>{{"MCD_REDIS_URL", target_.url}},
      target_.dir + "/watch.log");
  burst_rng_.seed(seed + 2000);
  scan_thread_ = std::thread([this] { ScanLoop(); });
  holder_thread_ = std::thread([this, seed] { HolderLoop(seed + 1000); });
  for (int i = 0; i < workers; ++i)
    threads_.emplace_back([this, i, seed] { WorkerLoop(i, seed + i); });
}

void Workload::StopClients() {
  stop_clients_ = true;
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  std::vector<std::thread> bursts;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bursts.swap(burst_threads_);
  }
  for (auto& t : bursts) t.join();
  if (holder_thread_.joinable()) holder_thread_.join();
}

void Workload::WorkerLoop(int worker, uint32_t seed) {
  std::mt19937 rng(seed);
  while (!stop_clients_) {
    double r = Uniform(rng, 0, 1);
    size_t live = 0;
    bool unresolved = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live = live_.size();
      unresolved = !unknown_.empty() && history_.Now() - unknown_.front().second > 3;
    }
    if (unresolved && r < 0.2) {
      ResolveUnknown();
    } else if (live < 8 || (live < 60 && r < 0.45)) {
      double api = Uniform(rng, 0, 1);
      ProduceWithWaiter(rng, NewName(worker),
                        api < 0.6   ? Api::kTool
                        : api < 0.8 ? Api::kLibrary
                                    : Api::kCAbi);
    } else if (r < 0.75) {
      Read(rng);
    } else if (r < 0.97) {
      Remove(rng);
    } else {
      OrphanGet(rng);
    }
  }
}

std::string Workload::NewName(int worker) {
  std::lock_guard<std::mutex> lock(mutex_);
  return "h" + std::to_string(worker) + "." + std::to_string(sequence_[worker]++);
}

std::vector<std::string> Workload::ToolArgv(const std::string& tool,
                                            std::vector<std::string> args) const {
  args.insert(args.begin(), test::ToolPath(tool));
  args.insert(args.end(), {"--node", target_.node});
  if (tool != "mcd-ls") args.insert(args.end(), {"--timeout-ms", kTimeoutMs});
  return args;
}

std::vector<std::string> Workload::ClientArgv(Api api, const std::string& op,
                                              std::vector<std::string> args) const {
  std::vector<std::string> argv = {
      test::ToolPath("history_client"), target_.url, target_.node, kTimeoutMs,
      api == Api::kCAbi ? "c" : "lib",  op};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

Op Workload::RunOp(OpKind kind, Api api, const std::string& name,
                   const std::vector<std::string>& argv) {
  Op op;
  op.kind = kind;
  op.api = api;
  op.name = name;
  for (const std::string& a : argv)
    op.command += (op.command.empty() ? a.substr(a.rfind('/') + 1) : " " + a);
  op.invoked = history_.Now();
  auto result = test::Run(argv, {{"MCD_REDIS_URL", target_.url}}, kRunTimeoutS);
  op.completed = history_.Now();
  op.exit_code = result.exit_code;
  op.output = Shorten(result.out + result.err);
  op.references_until = op.completed;
  return op;
}

void Workload::RecordCreate(Op create, std::string bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  bytes_[create.name] = std::move(bytes);
  if (create.Succeeded()) {
    live_.push_back(create.name);
  } else if (create.exit_code != 1) {
    unknown_.emplace_back(create.name, create.completed);
  }
  history_.Add(std::move(create));
}

// A consumer started before its producer, as in the README's pipeline: mcd-get --wait -o, then
// a create filled with random bytes: mcd-create --from a .npy, or the library's or the C ABI's
// create with contents.
void Workload::ProduceWithWaiter(std::mt19937& rng, const std::string& name, Api api) {
  std::string bytes = RandomBytes(rng);
  std::string in = target_.dir + "/" + name + (api == Api::kTool ? ".npy" : ".bin");
  std::string out = target_.dir + "/" + name + ".wait.npy";
  if (api == Api::kTool) {
    if (!tools::WriteNpy(in, DType::kU8, {static_cast<int64_t>(bytes.size())}, bytes.data(),
                         bytes.size())
             .ok())
      return;
  } else {
    std::ofstream(in, std::ios::binary) << bytes;
  }
  auto waiter = std::async(std::launch::async, [&] {
    return RunOp(OpKind::kWaitRead, Api::kTool, name,
                 ToolArgv("mcd-get", {name, "--wait", kWaitSeconds, "--no-ref", "-q", "-o", out}));
  });
  Sleep(Uniform(rng, 0, 0.2));
  std::vector<std::string> create =
      api == Api::kTool ? ToolArgv("mcd-create", {name, "--from", in, "--device", Device(), "-q"})
                        : ClientArgv(api, "create", {name, in});
  RecordCreate(RunOp(OpKind::kCreate, api, name, create), bytes);
  Op wait = waiter.get();
  if (wait.Succeeded()) wait.bytes_wrong = NpyDifference(out, bytes);
  history_.Add(std::move(wait));
  std::remove(in.c_str());
  std::remove(out.c_str());
}

// A name to use: acknowledged and not being removed; now and then (`dead_only`: always), for a
// while after its server died, one of the dead instance's. With `take`, nobody else gets it any
// more.
bool Workload::PickLive(std::mt19937& rng, std::string* name, bool take, bool dead_only) {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!dead_.empty() && history_.Now() - dead_.front().second > 3) dead_.erase(dead_.begin());
  if (!take && !dead_.empty() && (dead_only || rng() % 4 == 0)) {
    *name = dead_[rng() % dead_.size()].first;
    return true;
  }
  if (live_.empty() || dead_only) return false;
  size_t at = rng() % live_.size();
  *name = live_[at];
  if (take) live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(at));
  return true;
}

std::string Workload::BytesOf(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_[name];
}

// Reads back an acknowledged tensor: mcd-get -o (no reference), or a get, copy and release
// through the library or the C ABI.
void Workload::Read(std::mt19937& rng, bool dead_only) {
  std::string name;
  if (!PickLive(rng, &name, false, dead_only)) return;
  // A dead server's tensors through a get, which must not succeed.
  Api api = dead_only ? static_cast<Api>(1 + rng() % 2) : static_cast<Api>(rng() % 3);
  std::string out = target_.dir + "/" + name + ".read" + std::to_string(rng() % 1000000);
  Op op;
  if (api == Api::kTool) {
    out += ".npy";
    op = RunOp(OpKind::kRead, api, name, ToolArgv("mcd-get", {name, "--no-ref", "-q", "-o", out}));
    if (op.Succeeded()) op.bytes_wrong = NpyDifference(out, BytesOf(name));
  } else {
    out += ".bin";
    op = RunOp(OpKind::kRead, api, name, ClientArgv(api, "read", {name, out}));
    op.takes_reference = true;
    if (op.Succeeded()) op.bytes_wrong = Difference(test::ReadFile(out), BytesOf(name));
  }
  std::remove(out.c_str());
  history_.Add(std::move(op));
}

// Gives back the creator's reference (the test process holds none of its own).
void Workload::Remove(std::mt19937& rng) {
  std::string name;
  if (!PickLive(rng, &name, true)) return;
  Op op = RunOp(OpKind::kRemove, Api::kTool, name, ToolArgv("mcd-rm", {name, "--json"}));
  if (op.Succeeded()) {
    auto reply = nlohmann::json::parse(op.output, nullptr, false);
    op.freed = reply.is_array() && !reply.empty() && reply[0].value("freed", false);
  }
  history_.Add(std::move(op));
}

// mcd-get run by a shell that exits at once: the tool's parent is gone when it binds its
// reference. Its exit code is read from what it printed (its parent cannot wait for it).
void Workload::OrphanGet(std::mt19937& rng) {
  std::string name;
  if (!PickLive(rng, &name)) return;
  std::string out = target_.dir + "/" + name + ".orphan" + std::to_string(rng() % 1000000);
  std::vector<std::string> get = ToolArgv("mcd-get", {name, "--json"});
  std::string script = "\"$@\" > " + out + ".out 2> " + out + ".err & echo $!";
  std::vector<std::string> argv = {"/bin/sh", "-c", script, "sh"};
  argv.insert(argv.end(), get.begin(), get.end());
  Op op = RunOp(OpKind::kOrphanGet, Api::kTool, name, argv);
  pid_t pid = static_cast<pid_t>(std::atoi(op.output.c_str()));
  if (pid > 0) test::WaitFor([&] { return !test::Running(pid); }, kRunTimeoutS * 1000);
  op.completed = op.references_until = history_.Now();
  std::string printed = test::ReadFile(out + ".out"), err = test::ReadFile(out + ".err");
  op.exit_code = pid <= 0 || test::Running(pid) ? -1000
                 : printed.rfind('{', 0) == 0   ? 0
                                                : ExitCodeOfMessage(err);
  op.output = Shorten(printed + err);
  op.takes_reference = true;
  history_.Add(std::move(op));
}

// A create whose outcome was unknown: mcd-ls says whether it happened; a tensor that did is read
// (it must hold the create's bytes: ready means filled) and removed.
void Workload::ResolveUnknown() {
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (unknown_.empty()) return;
    name = unknown_.front().first;
    unknown_.pop_front();
  }
  Op ls = RunOp(OpKind::kList, Api::kTool, name, ToolArgv("mcd-ls", {name, "--json"}));
  auto listed = nlohmann::json::parse(ls.output, nullptr, false);
  bool exists = ls.Succeeded() && listed.is_array() && !listed.empty();
  history_.Add(std::move(ls));
  if (!exists) return;
  std::string out = target_.dir + "/" + name + ".resolved.npy";
  Op read = RunOp(OpKind::kRead, Api::kTool, name,
                  ToolArgv("mcd-get", {name, "--no-ref", "-q", "-o", out}));
  if (read.Succeeded()) read.bytes_wrong = NpyDifference(out, BytesOf(name));
  history_.Add(std::move(read));
  std::remove(out.c_str());
  history_.Add(RunOp(OpKind::kRemove, Api::kTool, name, ToolArgv("mcd-rm", {name, "--json"})));
}

void Workload::Burst(int count, bool dead) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int i = 0; i < count; ++i) {
    burst_threads_.emplace_back([this, i, dead, seed = burst_rng_()] {
      std::mt19937 rng(seed);
      Sleep(0.025 * i);
      Read(rng, dead);
    });
  }
}

void Workload::ServerKilled(double t) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& name : live_) dead_.emplace_back(name, t);
  live_.clear();
}

int Workload::KillTools(int count, std::mt19937& rng) {
  static const std::set<std::string> kClients = {"mcd-create", "mcd-get", "mcd-rm",
                                                 "history_client"};
  int killed = 0;
  for (int tries = 0; tries < 40 && killed < count; ++tries) {
    std::vector<pid_t> candidates;
    for (pid_t pid : test::ChildrenOf(getpid())) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (kClients.count(Comm(pid)) != 0 && holder_pids_.count(pid) == 0) candidates.push_back(pid);
    }
    if (!candidates.empty() && kill(candidates[rng() % candidates.size()], SIGKILL) == 0) {
      ++killed;
      double t = history_.Now();
      history_.AddFault(Fault{FaultKind::kToolKill, t, t});
    }
    Sleep(0.01);
  }
  return killed;
}

// Holders: up to kHolders processes at once, each taking references to 1-3 tensors through the
// library, the C ABI or mcd-get in a shell, and SIGKILLed 0.3-2.5 s after it held them.
void Workload::HolderLoop(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::unique_ptr<Holder>> holders;
  while (!stop_clients_ || !holders.empty()) {
    for (auto it = holders.begin(); it != holders.end();) {
      Holder& h = **it;
      if (h.kill_at == kNever && CollectHolder(h))
        h.kill_at = history_.Now() + Uniform(rng, 0.3, 2.5);
      double now = history_.Now();
      if (stop_clients_ || now >= h.kill_at || now - h.spawned > kRunTimeoutS) {
        KillHolder(h);
        it = holders.erase(it);
      } else {
        ++it;
      }
    }
    if (!stop_clients_ && holders.size() < kHolders && rng() % 3 == 0) {
      if (auto h = SpawnHolder(rng)) holders.push_back(std::move(h));
    }
    Sleep(0.1);
  }
}

std::unique_ptr<Workload::Holder> Workload::SpawnHolder(std::mt19937& rng) {
  auto h = std::make_unique<Holder>();
  h->api = static_cast<Api>(rng() % 3);
  std::string name;
  for (int i = 0, n = 1 + static_cast<int>(rng() % 3); i < n && PickLive(rng, &name); ++i) {
    if (std::find(h->names.begin(), h->names.end(), name) == h->names.end())
      h->names.push_back(name);
  }
  if (h->names.empty()) return nullptr;
  std::vector<std::string> argv;
  if (h->api == Api::kTool) {
    // mcd-get binds each reference to the shell, which then becomes sleep (the same process).
    std::string get = test::ToolPath("mcd-get") + " \"$n\" -q --node " + target_.node +
                      " --timeout-ms " + kTimeoutMs;
    argv = {"/bin/sh", "-c",
            "for n in \"$@\"; do " + get + "; echo \"$n $?\"; done; echo held; exec sleep 1000",
            "sh"};
    argv.insert(argv.end(), h->names.begin(), h->names.end());
  } else {
    argv = ClientArgv(h->api, "hold", h->names);
  }
  h->log = target_.dir + "/holder." + std::to_string(rng()) + ".log";
  h->spawned = history_.Now();
  h->process = std::make_unique<test::Background>(
      argv, std::map<std::string, std::string>{{"MCD_REDIS_URL", target_.url}}, h->log);
  h->pid = h->process->pid();
  h->id = HolderId(h->pid);
  std::lock_guard<std::mutex> lock(mutex_);
  holder_pids_.insert(h->pid);
  return h;
}

bool Workload::CollectHolder(Holder& h, std::optional<int> killed) {
  std::string log = test::ReadFile(h.log);
  std::map<std::string, int> codes;
  bool held = false;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    held = held || line == "held";
    size_t space = line.rfind(' ');
    if (space != std::string::npos &&
        std::find(h.names.begin(), h.names.end(), line.substr(0, space)) != h.names.end()) {
      codes[line.substr(0, space)] = std::atoi(line.c_str() + space + 1);
    }
  }
  bool ended = !held && !killed && !test::Running(h.pid);
  if (!held && !ended && !killed) return false;
  int otherwise = killed  ? *killed
                  : ended ? h.process->Wait(5)
                          : 0;  // a name it printed nothing for
  for (const std::string& name : h.names) {
    Op op;
    op.kind = OpKind::kHold;
    op.api = h.api;
    op.name = name;
    op.command = "holder " + h.id;
    op.invoked = h.spawned;
    op.completed = op.references_until = history_.Now();
    op.exit_code = codes.count(name) ? codes[name] : otherwise;
    op.output = Shorten(log);
    op.takes_reference = true;
    h.ops.push_back(history_.Add(std::move(op)));
  }
  return true;
}

void Workload::KillHolder(Holder& h) {
  bool late = history_.Now() - h.spawned > kRunTimeoutS;
  h.process->Stop(SIGKILL);
  double t = history_.Now();
  if (h.ops.empty()) CollectHolder(h, late ? -1000 : -9);  // a hang, or the run's end
  history_.AddHolderDeath(HolderDeath{h.id, t});
  for (int op : h.ops) history_.SetReferencesUntil(op, t);
  std::lock_guard<std::mutex> lock(mutex_);
  holder_pids_.erase(h.pid);
}

namespace {

// One look at every tensor hash: the holders with references, alive or not. False when Redis
// could not answer (restarting, loading).
bool ScanOnce(RedisConnection& redis, const KeySpace& keys, Scan& scan) {
  auto names = redis.Command({"KEYS", keys.TensorPattern("*")});  // a test's small keyspace
  if (!names.ok() || names->type != RedisValue::Type::kArray) return false;
  for (const RedisValue& key : names->elements) {
    auto hash = redis.Command({"HGETALL", key.str});
    if (!hash.ok()) return false;
    for (const auto& [field, value] : FieldMap(hash.value())) {
      if (field.rfind("holder:", 0) == 0 && std::atoll(value.c_str()) > 0) {
        std::string holder = field.substr(7);
        scan.holders[holder] = HolderAlive(holder);
      }
    }
  }
  return true;
}

}  // namespace

void Workload::ScanLoop() {
  std::unique_ptr<RedisConnection> redis;
  while (!stop_scans_) {
    if (!redis) {
      auto connected = RedisConnection::Connect(RedisUrl::Parse(target_.url).value());
      if (connected.ok()) redis = std::move(connected).value();
    }
    Scan scan;
    scan.at = history_.Now();
    if (redis && ScanOnce(*redis, target_.keys, scan)) {
      history_.AddScan(std::move(scan));
    } else {
      redis.reset();
    }
    Sleep(0.5);
  }
}

void Workload::Finish() {
  // The reaper has had its second and more for the holders SIGKILLed last.
  auto holders_left = [&] {
    auto redis = RedisConnection::Connect(RedisUrl::Parse(target_.url).value());
    if (!redis.ok()) return true;
    auto n = redis.value()->Command({"SCARD", target_.keys.Holders(target_.node)});
    return !n.ok() || n->integer != 0;
  };
  test::WaitFor([&] { return !holders_left(); }, 20000);
  Sleep(1.5);  // and a last look after that
  stop_scans_ = true;
  if (scan_thread_.joinable()) scan_thread_.join();
  bool watching = test::Running(watch_->pid());
  watch_->Stop(SIGTERM);
  history_.SetWatchOutput(test::ReadFile(target_.dir + "/watch.log"), watching);
  history_.SetFinal(ReadFinalState());
  history_.SetEnd(history_.Now());
}

FinalState Workload::ReadFinalState() {
  FinalState s;
  auto redis = RedisConnection::Connect(RedisUrl::Parse(target_.url).value()).value();
  const KeySpace& k = target_.keys;
  auto keys = redis->Command({"KEYS", k.TensorPattern("*")});
  for (const RedisValue& key : keys->elements) {
    s.hashes[k.NameFromTensorKey(key.str)] = FieldMap(redis->Command({"HGETALL", key.str}).value());
  }
  auto beat = redis->Command({"HMGET", k.Server(target_.node), "instance", "tensors"});
  s.instance = beat->elements[0].str;
  s.heartbeat_tensors = beat->elements[1].str;
  for (const std::string& object : test::ShmObjects("mcd-mcd-" + target_.node + "-"))
    s.shm_objects.insert("/" + object);
  s.queue = redis->Command({"LLEN", k.queue})->integer;
  s.node_queue = redis->Command({"LLEN", k.NodeQueue(target_.node)})->integer;
  s.processing = redis->Command({"LLEN", k.Processing(target_.node)})->integer;
  s.holders = redis->Command({"SCARD", k.Holders(target_.node)})->integer;
  s.held_keys =
      static_cast<long long>(redis->Command({"KEYS", k.Held(target_.node, "*")})->elements.size());
  return s;
}

}  // namespace mcd::history
