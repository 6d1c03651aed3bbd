// mcd-bench: measures the lifecycle against a live mcd-serve, or against private ones it starts
// (--self-serve), in one run: the Redis round trip (the floor), create / get / delete per
// allocator and size, the first get in a fresh process, the end-to-end share between two
// processes, throughput with N client processes, and copy bandwidth through a shared mapping
// against a local copy. See mcd-bench(1).
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <thread>

#include "flags.h"
#include "memcuda/polling.h"
#include "memcuda/private_redis.h"
#include "memcuda/server.h"
#include "memcuda/unique_fd.h"

namespace {

using namespace mcd;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Row {
  std::string row, allocator;
  int device = 0;
  uint64_t bytes = 0;
  std::vector<double> us;    // one latency per operation
  double ops_per_s = 0;      // set for throughput rows; otherwise 1e6 / mean
  std::string note;
  double redis_cpu_us = -1;  // throughput rows: Redis's CPU time per operation (< 0: unknown)
  // Throughput rows: the server's CPU time per operation, and the share of the wall time its
  // command thread was on a CPU (< 0: unknown, e.g. no /proc entry for the server's pid).
  double server_cpu_us = -1, server_thread_busy = -1;
  // Throughput rows: the two steps of each pair apart (us holds their sums). Share rows: the
  // create in A, and in B the get + map and the touch (the rest of a share is the two hops
  // between the processes).
  std::vector<double> create_us = {}, delete_us = {}, get_us = {}, touch_us = {};
  // Share rows: B's release of each tensor afterwards (unmap and reference), outside the row's
  // time; the first is the process's first unmap.
  std::vector<double> release_us = {};
  // First-get rows: each fresh process's Client::Connect, outside the row's time.
  std::vector<double> connect_us = {};
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// A figure for a row's note: rounded to a whole number.
std::string Whole(double x) { return std::to_string(static_cast<long>(x + 0.5)); }

// The NVIDIA kernel module's version (580.159.04, say), from /proc/driver/nvidia/version; ""
// where there is none. The CUDA calls give only the CUDA version the driver supports.
std::string NvidiaDriverVersion() {
  std::ifstream file("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(file, line)) return "";
  std::istringstream words(line);
  for (std::string word; words >> word;) {
    if (word.find('.') != std::string::npos && word.find_first_not_of("0123456789.") == std::string::npos) {
      return word;
    }
  }
  return "";
}

struct Options {
  tools::CommonFlags flags;
  std::vector<uint64_t> sizes;
  int iterations = 200;
  double max_seconds = 5;
  std::vector<int> clients = {8};  // one throughput row per count
  int fresh = 20;
  bool self_serve = false;
  bool gpu = true;
  std::string only;  // comma list of allocators to run (cuda_ipc,cuda_mempool,host_shm)
  std::vector<std::string> serve_args;  // --self-serve: more arguments for each mcd-serve
};

// Throughput clients per row at most: each is a process with its own Redis connection.
constexpr int kMaxClients = 256;

// The signal (SIGINT, SIGTERM, SIGHUP) that asked the run to stop, or 0. The run then stops at
// its next operation, gives back what it made and exits 128 + the signal; a second one kills.
volatile sig_atomic_t g_stop_signal = 0;
void OnStopSignal(int sig) { g_stop_signal = sig; }
bool Stopping() { return g_stop_signal != 0; }
void CatchStopSignals() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  action.sa_flags = static_cast<int>(SA_RESTART | SA_RESETHAND);
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &action, nullptr);
}
Status StoppedBySignal() {
  const char* name = g_stop_signal == SIGINT ? "SIGINT" : g_stop_signal == SIGTERM ? "SIGTERM" : "SIGHUP";
  return Status(ErrorCode::kStopped, std::string("stopped by ") + name);
}

// In a forked child: die with the bench, even when it is killed before it can stop its children.
void DieWithParent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);
}

bool Progress() { return isatty(STDERR_FILENO) == 1; }
void Say(const std::string& text) {
  if (Progress()) std::cerr << "\r\033[K" << text << std::flush;
}

// --- child processes ------------------------------------------------------------------------

// Every tensor a run makes, its children's too, is named bench.<the bench's pid>.<row>.<i>, so
// that what a failed or stopped row leaves can be found and given back.
std::string TensorPrefix(pid_t bench) { return "bench." + std::to_string(bench) + "."; }
std::string TensorName(pid_t bench, const std::string& row, int i) {
  return TensorPrefix(bench) + row + "." + std::to_string(i);
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "mcd-bench";
}

struct Child {
  pid_t pid = -1;
  FILE* to = nullptr;    // child's stdin
  FILE* from = nullptr;  // child's stdout
};

// A pipe's two ends, each with its owner.
bool Pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return false;
  read_end.reset(ends[0]);
  write_end.reset(ends[1]);
  return true;
}

Child SpawnChild(const std::vector<std::string>& args) {
  UniqueFd child_in, to_child, from_child, child_out;
  if (!Pipe(child_in, to_child) || !Pipe(from_child, child_out)) return {};
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    DieWithParent(parent);
    // dup2 clears close-on-exec on the copies; the originals close at exec.
    dup2(child_in.get(), STDIN_FILENO);
    dup2(child_out.get(), STDOUT_FILENO);
    std::vector<char*> argv;
    std::string exe = SelfExe();
    argv.push_back(exe.data());
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  // The FILE streams own the parent's ends from here.
  return Child{pid, fdopen(to_child.release(), "w"), fdopen(from_child.release(), "r")};
}

// One whole line, however long: a throughput client sends every latency it measured on one
// line (8 bytes or so each, so tens of kilobytes).
std::string ReadLine(FILE* f) {
  char* buf = nullptr;
  size_t capacity = 0;
  ssize_t n = getline(&buf, &capacity, f);
  std::string line = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  std::free(buf);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

int WaitChild(Child& c) {
  if (c.to) std::fclose(c.to);
  if (c.from) std::fclose(c.from);
  int status = 0;
  waitpid(c.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 70;
}

// Reads one element through the mapping: proves the memory is reachable from this process.
Status Touch(const TensorView& view) {
  if (view.record.device == kHostDevice) {
    volatile const char* p = static_cast<const char*>(view.data);
    (void)p[0];
    return Status::Ok();
  }
  char byte = 0;
  cudaError_t err = cudaMemcpy(&byte, view.data, 1, cudaMemcpyDeviceToHost);
  return err == cudaSuccess ? Status::Ok() : Status(ErrorCode::kCudaError, cudaGetErrorString(err));
}

Result<std::unique_ptr<Client>> Connect(const tools::CommonFlags& flags) {
  MCD_ASSIGN_OR_RETURN(ClientOptions options, tools::MakeClientOptions(flags, true));
  return Client::Connect(options);
}

// User + system CPU seconds in a /proc/<pid>[/task/<tid>]/stat file; negative when unreadable.
double ProcCpuSeconds(const std::string& stat_path) {
  std::ifstream in(stat_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t comm_end = text.rfind(')');  // the command name may hold spaces and parentheses
  if (comm_end == std::string::npos) return -1;
  std::istringstream fields(text.substr(comm_end + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  // After the name: fields 3 (state) to 13, then utime (14) and stime (15).
  for (int i = 3; i <= 13; ++i) fields >> field;
  if (!(fields >> utime >> stime)) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// For the child processes, which have nothing to clean up.
std::unique_ptr<Client> ConnectOrDie(const tools::CommonFlags& flags) {
  auto client = Connect(flags);
  if (!client.ok()) std::exit(tools::Fail("mcd-bench", client.status()));
  return std::move(client).value();
}

// Consumer of the share row: for each name on stdin, get + map + touch, answer "ok GET_US
// TOUCH_US"; on "release NAME" unmap it and give the reference back, and answer "done US".
int ChildShare(const tools::CommonFlags& flags, int device) {
  auto client = ConnectOrDie(flags);
  if (!client->Warmup(device).ok()) return 69;
  if (device != kHostDevice) cudaSetDevice(device);
  std::printf("ready\n");
  std::fflush(stdout);
  for (std::string line = ReadLine(stdin); !line.empty(); line = ReadLine(stdin)) {
    if (line.rfind("release ", 0) == 0) {
      auto t0 = Clock::now();
      auto released = client->Release(line.substr(8));
      double us = Us(t0, Clock::now());
      if (released.ok()) {
        std::printf("done %.3f\n", us);
      } else {
        std::printf("%s\n", released.status().ToString().c_str());
      }
    } else {
      auto t0 = Clock::now();
      auto view = client->Get(line);
      auto t1 = Clock::now();
      Status touched = view.ok() ? Touch(view.value()) : view.status();
      auto t2 = Clock::now();
      if (touched.ok()) {
        std::printf("ok %.3f %.3f\n", Us(t0, t1), Us(t1, t2));
      } else {
        std::printf("%s\n", touched.ToString().c_str());
      }
    }
    std::fflush(stdout);
  }
  return 0;
}

// A fresh process: connect and warm the CUDA context, then time the first Get + touch. Prints
// the get's time and the connect's.
int ChildFirstGet(const tools::CommonFlags& flags, int device, const std::string& name) {
  auto connecting = Clock::now();
  auto client = ConnectOrDie(flags);
  double connect_us = Us(connecting, Clock::now());
  if (!client->Warmup(device).ok()) return 69;
  if (device != kHostDevice) {
    cudaSetDevice(device);
    cudaFree(nullptr);
  }
  auto t0 = Clock::now();
  auto view = client->Get(name);  // get + map
  auto t1 = Clock::now();
  Status touched = view.ok() ? Touch(view.value()) : view.status();
  if (!touched.ok()) return tools::Fail("mcd-bench", touched);
  std::printf("%.3f %.3f\n", Us(t0, t1), connect_us);
  return client->Release(name).ok() ? 0 : 70;
}

// Throughput client: create + delete pairs for `seconds`; prints how many, then each pair's
// create and delete latencies, on one line.
int ChildChurn(const tools::CommonFlags& flags, int device, uint64_t bytes, double seconds, int id) {
  auto client = ConnectOrDie(flags);
  CreateSpec spec;
  spec.dtype = DType::kU8;
  spec.shape = {static_cast<int64_t>(bytes)};
  spec.device = device;
  std::string line;
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::ostringstream out;
  int n = 0;
  while (Clock::now() < end) {
    spec.name = TensorName(getppid(), "churn" + std::to_string(id), n++);
    auto t0 = Clock::now();
    auto created = client->Create(spec);
    auto t1 = Clock::now();
    auto released = created.ok() ? client->Release(spec.name) : Result<TensorRecord>(created.status());
    if (!released.ok()) return tools::Fail("mcd-bench", released.status());
    out << " " << Us(t0, t1) << " " << Us(t1, Clock::now());
  }
  std::printf("%d%s\n", n, out.str().c_str());
  return 0;
}

// --- the benchmark --------------------------------------------------------------------------

class Bench {
 public:
  Bench(Options opt, tools::CommonFlags flags) : opt_(std::move(opt)), flags_(std::move(flags)) {}

  // Also opens the connection that RedisCpuSeconds reads on.
  Status RedisFloor() {
    auto url = ResolveRedisUrl(flags_.redis_url);
    if (!url.ok()) return url.status();
    auto conn = RedisConnection::Connect(url.value());
    if (!conn.ok()) return conn.status();
    redis_ = std::move(conn.value());
    if (auto server = redis_->Command({"INFO", "server"}); server.ok()) {
      redis_version_ = InfoField(server->str, "redis_version");
    }
    Row row{"redis_rtt", "-", kHostDevice, 0, {}, 0, "PING, one client: the floor"};
    for (int i = 0; i < 50; ++i) (void)redis_->Command({"PING"});
    Timed(row, [&](int) { return redis_->Command({"PING"}).status(); });
    floor_us_ = Percentile(row.us, 0.5);
    rows_.push_back(std::move(row));
    return Status::Ok();
  }

  // Redis's CPU time so far (INFO cpu: user + system of the whole redis-server process), in
  // seconds; negative when it cannot be read (an INFO that is not allowed, say).
  double RedisCpuSeconds() {
    if (!redis_) return -1;  // RedisFloor has not run
    auto info = redis_->Command({"INFO", "cpu"});
    if (!info.ok() || info->type == RedisValue::Type::kError) return -1;
    double total = 0;
    for (const char* field : {"used_cpu_sys", "used_cpu_user"}) {
      std::string value = InfoField(info->str, field);
      if (value.empty()) return -1;
      total += std::strtod(value.c_str(), nullptr);
    }
    return total;
  }

  // CPU time so far (user + system, seconds) of the server process and of its command thread
  // (the main thread, whose tid is the pid), from /proc; negative when unknown.
  std::pair<double, double> ServerCpuSeconds() {
    if (!client_) return {-1, -1};
    auto info = client_->ServerInfo();
    if (!info.ok() || info->count("pid") == 0) return {-1, -1};
    const std::string pid = info->at("pid");
    return {ProcCpuSeconds("/proc/" + pid + "/stat"), ProcCpuSeconds("/proc/" + pid + "/task/" + pid + "/stat")};
  }

  // Every row of one allocator on one device; then whatever of the run's tensors is still there
  // (a failed or stopped row's) is given back.
  Status Allocator(const std::string& kind, int device) {
    Status ran = Rows(kind, device);
    client_.reset();
    auto removed = RemoveLeftovers();
    if (!removed.ok()) {
      std::cerr << "mcd-bench: warning: cannot give back the run's tensors: " << removed.status().ToString() << "\n";
    } else if (removed.value() > 0 && ran.ok() && !Stopping()) {
      std::cerr << "mcd-bench: warning: the run left " << removed.value() << " tensor(s); given back now\n";
    }
    return ran;
  }

  // The rows in order; a stop signal ends the run before the next one.
  Status Rows(const std::string& kind, int device) {
    MCD_ASSIGN_OR_RETURN(client_, Connect(flags_));
    if (!client_->Warmup(device).ok()) return Status(ErrorCode::kNoDevice, "cannot use device " + DeviceName(device));
    if (device != kHostDevice) cudaSetDevice(device);
    std::vector<std::function<Status()>> rows;
    for (uint64_t bytes : opt_.sizes) {
      rows.push_back([=] { return Lifecycle(kind, device, bytes); });
      rows.push_back([=] { return FirstGet(kind, device, bytes); });
      rows.push_back([=] { return Share(kind, device, bytes); });
    }
    const uint64_t churn_bytes = 1 << 20;
    for (int clients : opt_.clients) rows.push_back([=] { return Throughput(kind, device, churn_bytes, clients); });
    rows.push_back([=] { return Bandwidth(kind, device, std::min<uint64_t>(opt_.sizes.back(), 1ull << 30)); });
    for (const auto& row : rows) {
      if (Stopping()) return StoppedBySignal();
      MCD_RETURN_IF_ERROR(row());
    }
    return Status::Ok();
  }

  // Gives back every reference still held on a tensor of this run, on a connection of its own
  // (a row that failed may have left its own mid-request). Returns how many tensors it found:
  // none after rows that all went through.
  Result<size_t> RemoveLeftovers() {
    MCD_ASSIGN_OR_RETURN(auto client, Connect(flags_));
    MCD_ASSIGN_OR_RETURN(auto left, client->List(TensorPrefix(getpid()) + "*"));
    for (const TensorRecord& tensor : left) {
      for (int64_t held = std::max<int64_t>(tensor.refcount, 1); held > 0; --held) {
        auto released = client->ReleaseReference(tensor.name);
        if (released.status().code() == ErrorCode::kNotFound) break;
        MCD_RETURN_IF_ERROR(released.status());
        if (released->refcount <= 0) break;
      }
    }
    return left.size();
  }

  json Record(const json& config) const {
    json rows = json::array();
    for (const Row& r : rows_) {
      double median = Percentile(r.us, 0.5);
      double mean = r.us.empty() ? 0 : std::accumulate(r.us.begin(), r.us.end(), 0.0) / static_cast<double>(r.us.size());
      json row = {{"row", r.row}, {"allocator", r.allocator}, {"device", DeviceName(r.device)},
                  {"bytes", r.bytes}, {"n", r.us.size()}, {"median_us", median},
                  {"p90_us", Percentile(r.us, 0.9)}, {"p99_us", Percentile(r.us, 0.99)},
                  {"max_us", r.us.empty() ? 0.0 : *std::max_element(r.us.begin(), r.us.end())},
                  {"ops_per_s", r.ops_per_s > 0 ? r.ops_per_s : (mean > 0 ? 1e6 / mean : 0)},
                  {"x_floor", floor_us_ > 0 ? median / floor_us_ : 0}};
      if (r.redis_cpu_us >= 0) row["redis_cpu_us_per_op"] = r.redis_cpu_us;
      if (r.server_cpu_us >= 0) {
        row["server_cpu_us_per_op"] = r.server_cpu_us;
        row["server_thread_busy"] = r.server_thread_busy;
      }
      auto step = [&row](const std::string& name, const std::vector<double>& us) {
        if (us.empty()) return;
        row[name + "_median_us"] = Percentile(us, 0.5);
        row[name + "_p90_us"] = Percentile(us, 0.9);
        row[name + "_p99_us"] = Percentile(us, 0.99);
      };
      step("create", r.create_us);
      step("delete", r.delete_us);
      step("get", r.get_us);
      step("touch", r.touch_us);
      step("release", r.release_us);
      step("connect", r.connect_us);
      if (!r.release_us.empty()) row["release_first_us"] = r.release_us.front();
      if (!r.note.empty()) row["note"] = r.note;
      rows.push_back(row);
    }
    json with_redis = config;
    if (!redis_version_.empty()) with_redis["redis_version"] = redis_version_;
    return {{"tool", "mcd-bench"}, {"version", MCD_VERSION}, {"config", with_redis}, {"rows", rows},
            {"floor_us", floor_us_}};
  }

 private:
  // Rows that keep their tensors alive until the end stay under kLiveBudget bytes.
  static constexpr uint64_t kLiveBudget = 8ull << 30;
  int Iterations(uint64_t bytes) const {
    uint64_t fit = std::max<uint64_t>(3, kLiveBudget / std::max<uint64_t>(bytes, 1));
    return static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(opt_.iterations), fit));
  }

  template <typename Fn>
  void Timed(Row& row, Fn&& op) {
    auto deadline = Clock::now() + std::chrono::duration<double>(opt_.max_seconds);
    int iterations = row.bytes != 0 ? Iterations(row.bytes) : opt_.iterations;
    for (int i = 0; i < iterations && Clock::now() < deadline && !Stopping(); ++i) {
      auto t0 = Clock::now();
      Status s = op(i);
      auto t1 = Clock::now();
      if (!s.ok()) {
        row.note = s.ToString();
        return;
      }
      row.us.push_back(Us(t0, t1));
    }
  }

  std::string Name(const std::string& row, int i) const { return TensorName(getpid(), row, i); }

  CreateSpec Spec(const std::string& name, int device, uint64_t bytes) const {
    CreateSpec spec;
    spec.name = name;
    spec.dtype = DType::kU8;
    spec.shape = {static_cast<int64_t>(bytes)};
    spec.device = device;
    return spec;
  }

  Status Lifecycle(const std::string& kind, int device, uint64_t bytes) {
    Say("create/get/delete " + kind + " " + tools::HumanBytes(bytes));
    Row create{"create", kind, device, bytes, {}, 0, ""}, get{"get_warm", kind, device, bytes, {}, 0, "get + map, mapping cached in this process"},
        del{"delete", kind, device, bytes, {}, 0, ""};
    std::vector<std::string> names;
    Timed(create, [&](int i) {
      names.push_back(Name("life", i));
      return client_->Create(Spec(names.back(), device, bytes)).status();
    });
    // Warm: the mapping is already open in this process (held by an Open), so a get is the
    // command plus a cache hit.
    for (const auto& n : names) MCD_RETURN_IF_ERROR(client_->Open(n).status());
    for (size_t i = 0; i < names.size(); ++i) {
      auto t0 = Clock::now();
      auto view = client_->Get(names[i]);  // get + map, as the target defines it
      get.us.push_back(Us(t0, Clock::now()));
      MCD_RETURN_IF_ERROR(view.status());
      MCD_RETURN_IF_ERROR(Touch(view.value()));
    }
    for (const auto& n : names) {
      MCD_RETURN_IF_ERROR(client_->Release(n).status());  // the get's reference
      MCD_RETURN_IF_ERROR(client_->Close(n));            // the Open: unmapped now
    }
    for (const auto& n : names) {
      auto t0 = Clock::now();
      auto released = client_->Release(n);  // the last reference: freed
      del.us.push_back(Us(t0, Clock::now()));
      MCD_RETURN_IF_ERROR(released.status());
    }
    rows_.push_back(std::move(create));
    rows_.push_back(std::move(get));
    rows_.push_back(std::move(del));
    return Status::Ok();
  }

  Status FirstGet(const std::string& kind, int device, uint64_t bytes) {
    Row row{"get_first", kind, device, bytes, {}, 0, "get + map in a fresh process, right after its Client::Warmup"};
    for (int i = 0; i < opt_.fresh; ++i) {
      if (Stopping()) return StoppedBySignal();
      Say("first get in a fresh process " + kind + " " + tools::HumanBytes(bytes) + " " + std::to_string(i));
      std::string name = Name("first", i);
      MCD_RETURN_IF_ERROR(client_->Create(Spec(name, device, bytes)).status());
      Child child = SpawnChild(ChildArgs({"--child", "first-get", "--child-device", DeviceName(device), "--child-name", name}));
      std::string line = ReadLine(child.from);
      int rc = WaitChild(child);
      MCD_RETURN_IF_ERROR(client_->Release(name).status());
      std::istringstream parts(line);
      double get_us = 0, connect_us = 0;
      if (rc != 0 || !(parts >> get_us >> connect_us)) {
        return Status(ErrorCode::kInternal, "first-get child failed (exit " + std::to_string(rc) + ")");
      }
      row.us.push_back(get_us);
      row.connect_us.push_back(connect_us);
    }
    row.note += "; its Client::Connect before, median " + Whole(Percentile(row.connect_us, 0.5)) + " us";
    rows_.push_back(std::move(row));
    return Status::Ok();
  }

  Status Share(const std::string& kind, int device, uint64_t bytes) {
    Say("share end to end " + kind + " " + tools::HumanBytes(bytes));
    Row row{"share", kind, device, bytes, {}, 0, "create in A, get+map+touch in B, ack to A"};
    Child consumer = SpawnChild(ChildArgs({"--child", "share", "--child-device", DeviceName(device)}));
    if (ReadLine(consumer.from) != "ready") return Status(ErrorCode::kInternal, "share consumer did not start");
    Status failed;
    Timed(row, [&](int i) -> Status {
      std::string name = Name("share", i);
      auto t0 = Clock::now();
      MCD_RETURN_IF_ERROR(client_->Create(Spec(name, device, bytes)).status());
      double create_us = Us(t0, Clock::now());
      std::fprintf(consumer.to, "%s\n", name.c_str());
      std::fflush(consumer.to);
      std::string ack = ReadLine(consumer.from);
      std::istringstream parts(ack);
      std::string ok;
      double get_us = 0, touch_us = 0;
      if (!(parts >> ok >> get_us >> touch_us) || ok != "ok") return Status(ErrorCode::kInternal, "consumer: " + ack);
      row.create_us.push_back(create_us);
      row.get_us.push_back(get_us);
      row.touch_us.push_back(touch_us);
      return Status::Ok();
    });
    auto median = [](const std::vector<double>& us) { return Whole(Percentile(us, 0.5)); };
    row.note += "; medians: create " + median(row.create_us) + " us, get+map " + median(row.get_us) + " us, touch " +
                median(row.touch_us) + " us";
    // Cleanup of every shared tensor, outside the row's time: the consumer's reference (its
    // release timed apart, for the note: the process's first unmap may cost more), then the
    // creator's.
    for (size_t i = 0; i < row.us.size(); ++i) {
      std::string name = Name("share", static_cast<int>(i));
      std::fprintf(consumer.to, "release %s\n", name.c_str());
      std::fflush(consumer.to);
      std::istringstream done(ReadLine(consumer.from));
      std::string word;
      double us = 0;
      if (!(done >> word >> us) || word != "done") return Status(ErrorCode::kInternal, "consumer: " + done.str());
      row.release_us.push_back(us);
      MCD_RETURN_IF_ERROR(client_->Release(name).status());
    }
    if (!row.release_us.empty()) {
      row.note += "; B's release (unmap + reference): first " + Whole(row.release_us.front()) + " us, median " +
                  Whole(Percentile(row.release_us, 0.5)) + " us";
    }
    WaitChild(consumer);
    rows_.push_back(std::move(row));
    return Status::Ok();
  }

  Status Throughput(const std::string& kind, int device, uint64_t bytes, int clients) {
    Say("throughput with " + std::to_string(clients) + " clients " + kind);
    double seconds = std::min(opt_.max_seconds, 3.0);
    std::vector<Child> children;
    double cpu0 = RedisCpuSeconds();
    auto [server0, thread0] = ServerCpuSeconds();
    auto t0 = Clock::now();
    for (int c = 0; c < clients; ++c) {
      children.push_back(SpawnChild(ChildArgs({"--child", "churn", "--child-device", DeviceName(device),
                                               "--child-bytes", std::to_string(bytes),
                                               "--child-seconds", std::to_string(seconds),
                                               "--child-id", std::to_string(c)})));
    }
    Row row{"create+delete_x" + std::to_string(clients), kind, device, bytes, {}, 0,
            std::to_string(clients) + (clients == 1 ? " client process" : " client processes") +
                ", create+delete pairs"};
    for (Child& child : children) {
      std::istringstream in(ReadLine(child.from));
      size_t pairs = 0, read = 0;
      in >> pairs;
      for (double create_us, delete_us; in >> create_us >> delete_us; ++read) {
        row.create_us.push_back(create_us);
        row.delete_us.push_back(delete_us);
        row.us.push_back(create_us + delete_us);
      }
      if (WaitChild(child) != 0) return Status(ErrorCode::kInternal, "a throughput client failed");
      if (read != pairs || pairs == 0) {
        return Status(ErrorCode::kInternal, "a throughput client reported " + std::to_string(pairs) +
                                                " pairs but " + std::to_string(read) + " latencies");
      }
    }
    double wall = Us(t0, Clock::now()) / 1e6;
    double cpu1 = RedisCpuSeconds();
    auto [server1, thread1] = ServerCpuSeconds();
    row.ops_per_s = static_cast<double>(row.us.size()) / std::max(wall, seconds);
    if (cpu0 >= 0 && cpu1 >= cpu0 && !row.us.empty()) {
      // Which of Redis and the server bounds the rate: Redis's CPU per pair, and how busy it was.
      row.redis_cpu_us = (cpu1 - cpu0) * 1e6 / static_cast<double>(row.us.size());
      row.note += "; Redis CPU " + Whole(row.redis_cpu_us) + " us per pair, " + Whole((cpu1 - cpu0) * 100 / wall) +
                  "% busy";
    }
    if (server0 >= 0 && server1 >= server0 && thread0 >= 0 && thread1 >= thread0 && !row.us.empty()) {
      row.server_cpu_us = (server1 - server0) * 1e6 / static_cast<double>(row.us.size());
      row.server_thread_busy = (thread1 - thread0) / wall;
      row.note += "; server CPU " + Whole(row.server_cpu_us) +
                  " us per pair, its command thread " +
                  Whole(row.server_thread_busy * 100) + "% busy";
    }
    row.note += "; p99 of the create " + Whole(Percentile(row.create_us, 0.99)) + " us, of the delete " +
                Whole(Percentile(row.delete_us, 0.99)) + " us";
    rows_.push_back(std::move(row));
    return Status::Ok();
  }

  Status Bandwidth(const std::string& kind, int device, uint64_t bytes) {
    Say("bandwidth " + kind + " " + tools::HumanBytes(bytes));
    std::string name = Name("bw", 0);
    MCD_RETURN_IF_ERROR(client_->Create(Spec(name, device, bytes)).status());
    auto view = client_->Get(name);
    MCD_RETURN_IF_ERROR(view.status());
    Row shared{"copy_from_mapping", kind, device, bytes, {}, 0, ""};
    Row local{"copy_local", kind, device, bytes, {}, 0, ""};
    int reps = 20;
    if (device == kHostDevice) {
      std::vector<char> a(bytes, 1), b(bytes);
      std::memset(view->data, 3, bytes);  // never time on untouched pages
      for (int i = 0; i < reps + 2; ++i) {
        auto t0 = Clock::now();
        std::memcpy(b.data(), view->data, bytes);
        auto t1 = Clock::now();
        std::memcpy(b.data(), a.data(), bytes);
        auto t2 = Clock::now();
        if (i >= 2) {
          shared.us.push_back(Us(t0, t1));
          local.us.push_back(Us(t1, t2));
        }
      }
    } else {
      void* src = nullptr;
      void* dst = nullptr;
      cudaEvent_t e0, e1;
      if (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&dst, bytes) != cudaSuccess) {
        cudaFree(src);
        return Status(ErrorCode::kOutOfMemory, "bandwidth buffers");
      }
      cudaMemset(src, 7, bytes);
      cudaMemset(view->data, 5, bytes);
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      auto time_copy = [&](void* to, const void* from) {
        cudaEventRecord(e0);
        cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        return static_cast<double>(ms) * 1000.0;
      };
      for (int i = 0; i < reps + 2; ++i) {
        double s = time_copy(dst, view->data);
        double l = time_copy(dst, src);
        if (i >= 2) {
          shared.us.push_back(s);
          local.us.push_back(l);
        }
      }
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      cudaFree(src);
      cudaFree(dst);
    }
    auto rate = [&](const Row& r) {
      return 2.0 * static_cast<double>(bytes) / (Percentile(r.us, 0.5) * 1e-6) / 1e9;
    };
    shared.note = "GB/s (read+write) " + std::to_string(rate(shared)) + "; " +
                  std::to_string(100.0 * rate(shared) / rate(local)) + "% of local";
    local.note = "GB/s (read+write) " + std::to_string(rate(local));
    rows_.push_back(std::move(shared));
    rows_.push_back(std::move(local));
    MCD_RETURN_IF_ERROR(client_->Release(name).status());  // the get's reference
    return client_->Release(name).status();                // the create's: freed
  }

  std::vector<std::string> ChildArgs(std::vector<std::string> extra) const {
    std::vector<std::string> args = extra;
    if (!flags_.redis_url.empty()) args.insert(args.end(), {"--redis-url", flags_.redis_url});
    if (!flags_.node.empty()) args.insert(args.end(), {"--node", flags_.node});
    args.insert(args.end(), {"--prefix", flags_.prefix, "--queue", flags_.queue,
                             "--timeout-ms", std::to_string(flags_.timeout_ms)});
    return args;
  }

  Options opt_;
  tools::CommonFlags flags_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<RedisConnection> redis_;  // the floor's PINGs, then Redis's CPU time
  std::string redis_version_;               // from INFO server, for the record
  std::vector<Row> rows_;
  double floor_us_ = 0;
};

// Removes a folder and what is in it, without following links.
void RemoveTree(const std::string& path) {
  nftw(
      path.c_str(),
      [](const char* entry, const struct stat*, int, struct FTW*) {
        std::remove(entry);  // a file, or a folder emptied before (FTW_DEPTH)
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

// A private redis-server and mcd-serve per allocator, for --self-serve. Their folder is
// <TMPDIR>/mcd-bench-<pid>-XXXXXX; a run removes it at its end, and a later run removes those of
// runs that were killed outright (their pid gone; their Redis and server went with them).
struct SelfServe {
  std::string dir;
  std::unique_ptr<PrivateRedis> redis;
  pid_t server = -1;

  ~SelfServe() {
    StopServer();
    redis.reset();
    if (!dir.empty()) RemoveTree(dir);
  }
  static std::string TempRoot() {
    const char* tmp = std::getenv("TMPDIR");
    return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  static void RemoveFoldersOfKilledRuns(const std::string& root) {
    DIR* folder = opendir(root.c_str());
    if (folder == nullptr) return;
    std::vector<std::string> stale;
    while (dirent* e = readdir(folder)) {
      long pid = 0;
      char tail[16] = {};
      if (std::sscanf(e->d_name, "mcd-bench-%ld-%15s", &pid, tail) != 2 || pid <= 0) continue;
      std::string path = root + "/" + e->d_name;
      struct stat st {};
      if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) continue;
      if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(path);
    }
    closedir(folder);
    for (const std::string& path : stale) RemoveTree(path);
  }
  Status StartRedis() {
    std::string root = TempRoot();
    RemoveFoldersOfKilledRuns(root);
    std::string tmpl = root + "/mcd-bench-" + std::to_string(getpid()) + "-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      return Status(ErrorCode::kIoError, "cannot make a folder " + tmpl + ": " + std::strerror(errno));
    }
    dir = tmpl;
    MCD_ASSIGN_OR_RETURN(redis, PrivateRedis::Start("redis-server", dir, /*stop_with_caller=*/true));
    return Status::Ok();
  }
  std::string Url() const { return redis->url().Redacted(); }
  Status StartServer(const std::string& allocator, const std::string& devices, const std::string& node,
                     const std::vector<std::string>& extra) {
    std::string serve = SelfExe();
    serve = serve.substr(0, serve.rfind('/') + 1) + "mcd-serve";
    pid_t parent = getpid();
    server = fork();
    if (server == 0) {
      DieWithParent(parent);
      setpgid(0, 0);  // a Ctrl-C reaches the bench, which stops its server after its last row
      int log = open((dir + "/serve-" + allocator + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(log, STDERR_FILENO);
      std::vector<std::string> args = {serve,    "--redis-url", Url(),     "--devices", devices,
                                       "--node", node,          "--allocator", allocator, "-q"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(serve.c_str(), argv.data());
      _exit(127);
    }
    auto conn = RedisConnection::Connect(RedisUrl::Parse(Url()).value());
    if (!conn.ok()) return conn.status();
    std::string log = dir + "/serve-" + allocator + ".log";
    for (int i = 0; i < 400; ++i) {
      auto hb = conn.value()->Command({"EXISTS", "mcd:server:" + node});
      if (hb.ok() && hb->integer == 1) return Status::Ok();
      if (waitpid(server, nullptr, WNOHANG) == server) {  // it gave up: say why
        server = -1;
        std::ifstream in(log);
        std::string line, said;
        while (std::getline(in, line) && said.size() < 300) {
          if (!line.empty()) said += (said.empty() ? "" : " ") + line;
        }
        return Status(ErrorCode::kUnavailable, "mcd-serve did not start: " + said);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return Status(ErrorCode::kUnavailable, "mcd-serve did not start; see " + log);
  }
  void StopServer() {
    if (server > 0) {
      kill(server, SIGTERM);
      waitpid(server, nullptr, 0);
      server = -1;
    }
  }
};

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

void PrintTable(const json& record) {
  std::vector<std::vector<std::string>> rows = {
      {"ROW", "ALLOCATOR", "SIZE", "N", "MEDIAN_US", "P90_US", "P99_US", "OPS/S", "X_FLOOR", "NOTE"}};
  for (const json& r : record["rows"]) {
    rows.push_back({r["row"], r["allocator"], r["bytes"].get<uint64_t>() ? tools::HumanBytes(r["bytes"]) : "-",
                    std::to_string(r["n"].get<size_t>()), Fixed(r["median_us"], 1), Fixed(r["p90_us"], 1),
                    Fixed(r["p99_us"], 1), Fixed(r["ops_per_s"], 0), Fixed(r["x_floor"], 1),
                    r.value("note", "")});
  }
  std::cout << tools::FormatTable(rows, 0, 0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mcd-bench: measure memcuda's lifecycle latencies, throughput and bandwidth"};
  tools::SetupApp(app);
  app.footer(std::string("Examples:\n"
                         "  mcd-bench --self-serve                      # private Redis + servers, every allocator\n"
                         "  mcd-bench --sizes 4KiB,1MiB --json > run.json  # against the live mcd-serve\n\n") +
             tools::kEnvironmentFooter);
  Options opt;
  tools::CommonFlags& flags = opt.flags;
  tools::AddConnectionFlags(app, flags);
  app.add_option("--timeout-ms", flags.timeout_ms, "Per request")->capture_default_str();
  std::string sizes = "4KiB,1MiB,64MiB,1GiB", clients = "8";
  bool json_out = false, cpu_only = false;
  app.add_option("--sizes", sizes, "Tensor sizes")->capture_default_str();
  app.add_option("--iterations", opt.iterations, "Operations per row (at most)")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--max-seconds", opt.max_seconds, "Time bound per row")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--clients", clients,
                 "Client processes for the throughput row; a list (1,2,4,8) gives a row per count")
      ->capture_default_str();
  app.add_option("--fresh", opt.fresh, "Fresh processes for the first-get row")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_flag("--self-serve", opt.self_serve, "Start a private Redis and an mcd-serve per allocator");
  std::string serve_args;
  app.add_option("--serve-args", serve_args,
                 "With --self-serve: more arguments for each mcd-serve it starts, split at spaces "
                 "(\"--slab-max 0\", say)");
  app.add_flag("--cpu", cpu_only, "Host memory only, even on a GPU machine");
  app.add_option("--only", opt.only, "Allocators to run: cuda_ipc,cuda_mempool,host_shm");
  app.add_flag("--json", json_out, "Print the JSON record instead of the table");
  std::string child, child_name, child_device = "0";
  uint64_t child_bytes = 0;
  double child_seconds = 0;
  int child_id = 0;
  app.add_option("--child", child)->group("");
  app.add_option("--child-name", child_name)->group("");
  app.add_option("--child-device", child_device)->group("");
  app.add_option("--child-bytes", child_bytes)->group("");
  app.add_option("--child-seconds", child_seconds)->group("");
  app.add_option("--child-id", child_id)->group("");
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;

  if (!child.empty()) {
    int device = ParseDevice(child_device).value();
    if (child == "share") return ChildShare(flags, device);
    if (child == "first-get") return ChildFirstGet(flags, device, child_name);
    if (child == "churn") return ChildChurn(flags, device, child_bytes, child_seconds, child_id);
    return 64;
  }
  std::string rest = sizes;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    auto size = tools::ParseSize(rest.substr(0, comma));
    if (!size.ok() || size.value() == 0) return tools::Fail("mcd-bench", Status(ErrorCode::kInvalidArgument, "bad --sizes"));
    opt.sizes.push_back(size.value());
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  std::sort(opt.sizes.begin(), opt.sizes.end());
  opt.clients.clear();
  for (const std::string& item : tools::SplitList(clients)) {
    char* end = nullptr;
    long n = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n < 1 || n > kMaxClients) {
      return tools::Fail("mcd-bench", Status(ErrorCode::kInvalidArgument,
                                             "--clients '" + clients + "': give counts from 1 to " +
                                                 std::to_string(kMaxClients) + ", separated by commas (e.g. 1,2,4,8)"));
    }
    opt.clients.push_back(static_cast<int>(n));
  }
  {
    std::istringstream words(serve_args);
    for (std::string word; words >> word;) opt.serve_args.push_back(word);
    if (!opt.serve_args.empty() && !opt.self_serve) {
      return tools::Fail("mcd-bench", Status(ErrorCode::kInvalidArgument, "--serve-args needs --self-serve"));
    }
  }
  int gpus = 0;
  if (!cpu_only && cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  auto wanted = [&](const std::string& kind) {
    return opt.only.empty() || opt.only.find(kind) != std::string::npos;
  };

  json config = {{"sizes", opt.sizes}, {"iterations", opt.iterations}, {"max_seconds", opt.max_seconds},
                 {"clients", opt.clients}, {"fresh", opt.fresh}, {"self_serve", opt.self_serve},
                 {"host", [] { char h[256] = {}; gethostname(h, 255); return std::string(h); }()}};
  if (gpus > 0) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    config["gpu"] = prop.name;
    config["cuda_driver"] = driver;
    config["cuda_runtime"] = runtime;
    if (std::string version = NvidiaDriverVersion(); !version.empty()) config["nvidia_driver"] = version;
  }
  config["spin_us"] = SpinMicros();
  if (!opt.serve_args.empty()) config["serve_args"] = opt.serve_args;
  // How creates and a creator's releases reach the server (memcuda(7)): its command socket, or
  // the queue when MCD_VIA_QUEUE is set.
  config["commands_via"] = CommandsViaQueue() ? "queue" : "socket";
  CatchStopSignals();
  SelfServe self;
  std::vector<std::pair<std::string, int>> plan;  // allocator kind, device
  if (opt.self_serve) {
    Status started = self.StartRedis();
    if (!started.ok()) return tools::Fail("mcd-bench", started);
    flags.redis_url = self.Url();
    if (gpus > 0 && wanted("cuda_ipc")) plan.emplace_back("cuda_ipc", 0);
    if (gpus > 0 && wanted("cuda_mempool")) plan.emplace_back("cuda_mempool", 0);
    if (wanted("host_shm")) plan.emplace_back("host_shm", kHostDevice);
  } else {
    auto client = ConnectOrDie(flags);
    auto info = client->ServerInfo();
    std::string allocators = info.ok() ? info.value()["allocator"] : "";
    if (gpus > 0 && allocators.find("0:cuda_mempool") != std::string::npos && wanted("cuda_mempool")) plan.emplace_back("cuda_mempool", 0);
    if (gpus > 0 && allocators.find("0:cuda_ipc") != std::string::npos && wanted("cuda_ipc")) plan.emplace_back("cuda_ipc", 0);
    if (wanted("host_shm")) plan.emplace_back("host_shm", kHostDevice);
  }
  if (plan.empty()) return tools::Fail("mcd-bench", Status(ErrorCode::kInvalidArgument, "nothing to measure"));
  json merged;
  for (const auto& [kind, device] : plan) {
    tools::CommonFlags run_flags = flags;
    if (opt.self_serve) {
      run_flags.node = "bench-" + kind + "-" + std::to_string(getpid());
      self.StopServer();
      Status started = self.StartServer(kind == "cuda_mempool" ? "pool" : "cuda",
                                        device == kHostDevice ? "cpu" : "0", run_flags.node, opt.serve_args);
      if (!started.ok()) return tools::Fail("mcd-bench", started);
    }
    Bench one(opt, run_flags);
    Status floor = one.RedisFloor();
    if (!floor.ok()) return tools::Fail("mcd-bench", floor);
    Status ran = one.Allocator(kind, device);
    if (Stopping()) {
      std::cerr << (Progress() ? "\r\033[K" : "") << "mcd-bench: " << StoppedBySignal().message()
                << "; the run's tensors are given back, nothing is reported\n";
      return 128 + g_stop_signal;
    }
    if (!ran.ok()) return tools::Fail("mcd-bench", ran);
    json part = one.Record(config);
    if (merged.is_null()) {
      merged = part;
    } else {
      for (auto& r : part["rows"]) merged["rows"].push_back(r);
    }
  }
  Say("");
  if (json_out) {
    std::cout << merged.dump(1) << "\n";
  } else {
    PrintTable(merged);
  }
  return 0;
}
