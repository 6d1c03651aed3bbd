#include "memcuda/server.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "alloc/allocator.h"
#include "command_socket.h"
#include "cuda_check.h"
#include "fd_passing.h"
#include "log.h"
#include "lua_scripts.h"
#include "memcuda/client.h"
#include "memcuda/gpu_worker.h"
#include "memcuda/protocol.h"
#include "process.h"
#include "spin.h"

namespace mcd {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kCodeCount = static_cast<size_t>(ErrorCode::kUnsupported) + 1;

// Redis's own words from a refused commit: "Redis EVALSHA: WRONGTYPE Operation ... script:
// <sha>, on @user_script:15." says more about the script than a client needs.
std::string RedisWords(const Status& status) {
  std::string words = status.message();
  if (words.rfind("Redis EVALSHA: ", 0) == 0) words.erase(0, 15);
  if (size_t script = words.find(" script: "); script != std::string::npos) words.erase(script);
  return words;
}

// A refusal that may pass: Redis busy with another script, loading, failing over, without the
// scripts for a moment, or an ACL being changed.
bool MayPass(const std::string& words) {
  for (const char* passing : {"BUSY", "LOADING", "MASTERDOWN", "TRYAGAIN", "READONLY", "NOSCRIPT", "NOPERM"}) {
    if (words.rfind(passing, 0) == 0) return true;
  }
  return false;
}

// A failure that repeats (Redis refusing the take, the heartbeat not written): said when it
// starts and then once a minute while it lasts, not at every try.
class Recurring {
 public:
  // Counts one more failure in a row; true when this one is to be said.
  bool Again() {
    auto now = Clock::now();
    if (count_++ == 0) since_ = now;
    if (count_ > 1 && now - said_ < std::chrono::minutes(1)) return false;
    said_ = now;
    return true;
  }
  int count() const { return count_; }  // failures in a row, 0 once it is over
  long long Seconds() const {
    return std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - since_).count();
  }
  void Over() { count_ = 0; }

 private:
  int count_ = 0;
  Clock::time_point since_, said_;
};

std::string ErrorReply(const std::string& req, const char* op, const Status& status) {
  json doc = {{"ok", false},
              {"error", {{"code", ErrorName(status.code())}, {"message", status.message()}}}};
  if (!req.empty()) doc["req"] = req;
  if (op != nullptr) doc["op"] = op;
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The start of a success reply, up to the tensor object: {"ok":true,"op":..,"req":..,"tensor":
// (req holds only name characters, so it needs no escaping).
std::string ReplyHead(const std::string& req, Op op) {
  std::string out = std::string(R"({"ok":true,"op":")") + OpName(op) + "\"";
  if (!req.empty()) out += R"(,"req":")" + req + "\"";
  return out + R"(,"tensor":)";
}

// Names of shm objects are unique per prefix, node and instance, and safe as file names.
std::string ShmPrefix(const std::string& prefix, const std::string& node) {
  std::string out = "/mcd-";
  for (char c : prefix + "-" + node) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    out.push_back(ok ? c : '_');
    if (out.size() > 100) break;
  }
  return out + "-";
}

}  // namespace

class Server::Impl {
 public:
  explicit Impl(ServerOptions options) : opt_(std::move(options)) {}
  ~Impl() { Shutdown(); }

  Status Start();
  Status Run();
  void RequestStop();
  void Shutdown();

  std::string instance_;
  ServerOptions opt_;

 private:
  struct Entry {
    TensorRecord record;     // as created; the refcount lives in Redis only
    Allocation allocation;
    std::string json_head;   // RecordJsonHead(record): replies are assembled around it
  };
  struct CommitResult {
    enum Kind { kOk, kDup, kConflict } kind = kOk;
    long long refcount = 0;  // after an "incr"
  };
  // A commit script call waiting to be sent with the rest of its batch, and what to do with its
  // result (run after every result of the batch has been read, in order).
  // Where a command came from and its reply goes: the lifecycle list (conn 0), or a connection
  // of the command socket, whose commands are answered there and leave no reply in Redis.
  struct Route {
    uint64_t conn = 0;
    uint64_t token = 0;  // this command's, among those of the socket waiting for a reply
  };
  struct Pending {
    std::vector<std::string> args;
    std::string name;  // the tensor it changes ("" for none)
    std::function<void(Result<CommitResult>)> done;
    Route route;
    std::string req;  // a socket command's
    // A socket command's success reply, which the commit does not write to Redis: `reply`, and
    // for an "incr" the new refcount then tails[0] (still referenced) or tails[1] (freed).
    std::string reply;
    std::vector<std::string> tails;
  };
  // A reply due on the connection: a commit's, or (take > 0) the answers of a take sent ahead,
  // `take` LMOVEs in a row.
  struct Due {
    int take = 0;
    Pending commit;
  };
  enum class Pre { kNone, kAbsent, kMine };

  Status Connect();
  // The path given (--pool-socket, --command-socket), or one of this instance in the runtime
  // folder: <kind>-<node>-<instance>.sock.
  std::string SocketPath(const std::string& given, const char* kind) const;
  Status StartPoolSocket();             // binds pool_socket_path_
  // "<device>:<value>,..." over the allocators, those whose `value_of` is "" left out.
  std::string DeviceText(const std::function<std::string(const Allocator&)>& value_of) const;
  // The heartbeat's ipc_primer (`kind` cuda_ipc) or pool_primer (cuda_mempool):
  // "<device>:<hex of the primer>,..." for the devices whose allocator is of that kind.
  std::string PrimerText(const std::string& kind) const;
  // The heartbeat's pool_fd: "<device>:<this process's descriptor of the pool>,...", which a
  // client of the same user copies with pidfd_getfd (PinnedProcess::CopyFd) instead of asking the
  // pool socket, once pid_ino or pid_start shows that the pid is still this process.
  std::string PoolFdText() const;
  // Who may use the server's sockets: its user, and the members of --pool-group.
  Result<PeerPolicy> Peers() const;
  uint64_t PoolUsedBytes();
  uint64_t ReadyBytes() const;
  // An allocator's byte count (ReadyBytes, SlabBytes, ...) summed over the devices.
  uint64_t SumOver(uint64_t (Allocator::*bytes)() const noexcept) const;
  // Gives back the ready stock of sizes not created for a while (kReadyIdleMs).
  void TrimReadyStock();
  // Writes the first heartbeat: refused while another live instance holds the node.
  Status ClaimNode();
  void WarnIfRedisEvicts();
  Status Reconcile();
  Status LoadScript();
  void HeartbeatLoop();
  // Another instance that holds the node's heartbeat.
  struct Holder {
    std::string instance;
    int64_t pid = 0;
  };
  // Writes this instance's heartbeat, unless an instance other than `replace` holds the node:
  // then nothing is written, and that instance is returned.
  Result<std::optional<Holder>> WriteHeartbeat(RedisConnection& conn, const std::string& replace = "");

  using Incoming = CommandSocket::Incoming;  // conn 0: from the lifecycle list
  // Idle: waits for the next command, on the list (a BLMOVE, whose answer is returned) or on
  // the command socket (the lines go to socket_in_; the BLMOVE is then called off and what it
  // answered, nil or a command moved meanwhile, returned all the same).
  Result<RedisValue> WaitForCommand();
  // Wakes this server's BLMOVE on the main connection (CLIENT UNBLOCK from another one) and
  // returns its answer.
  Result<RedisValue> CallOffTake();
  void ProcessBatch(std::vector<Incoming> commands);
  // Sends a reply to the socket command of `route`, once: false when it was answered already or
  // its client is gone.
  bool AnswerSocket(const Route& route, const std::string& reply);
  // Redis answered the take with an error on a live connection (out of memory under maxmemory,
  // a replica that became read-only, a queue key of the wrong type): says so (take_refused_),
  // and waits before the next try, 0.1 s at first, then up to a second, so that commands flow
  // again soon after Redis recovers.
  void PauseAfterRefusedTake(const Status& status);
  void TakeAcceptedAgain();
  Status ResumeUnfinished();
  Status SettleAfterReconnect();
  // Sends the batch's commits without waiting for them; their results are read by Drain.
  void Flush();
  // A busy server sends the next take before it handles the current batch, so that Redis answers
  // it meanwhile: the server then waits for Redis only when Redis is slower than the handling.
  void SendTake();
  // Reads the answers of a take of `moves` LMOVEs: the commands moved, oldest first.
  Result<RedisValue> ReadTake(int moves);
  // Reads the first `count` replies due (all by default), in order: runs their commits' `done`
  // (in order, once they are read) and keeps a take's answer in take_reply_. A full Drain must
  // precede any other use of the connection and any decision that depends on a commit sent. A
  // `done` that uses the connection drains the rest first; those commits name other tensors
  // (ProcessBatch drains before handling a command that names one that is due).
  void Drain(size_t count = SIZE_MAX);
  Result<CommitResult> CommitNow(Pending pending);
  // Runs one commit now on a connection with nothing due; after each NOSCRIPT loads the scripts
  // and runs it again (a few times at most).
  Result<CommitResult> RunCommit(Pending& pending);
  // True while a commit naming tensor `name` is sent and its result not yet read.
  bool IsDue(const std::string& name) const;
  void Handle(const std::string& raw, const Result<Command>& parsed, const std::string& req);
  void HandleCreate(const std::string& raw, const Command& cmd);
  void Fail(const std::string& raw, const std::string& req, const char* op, const Status& status);
  // After a commit that Redis answered with an error (a key of the wrong type, Redis out of
  // memory under maxmemory): nothing of it was applied. The client gets an error reply; if Redis
  // refuses that too, the command still leaves the processing list (Drop), so that it is neither
  // run again after a reconnect nor waited for. An error that may pass (Redis busy with a
  // script, loading, a missing ACL permission) leaves the command in the list instead, to be
  // resumed (ResumeLater). Only on a live connection: after a lost one, the commands left in the
  // list are resumed after reconnecting.
  void Refused(const std::string& raw, const std::string& req, const char* op, const Status& status);
  // Writes the error reply of a command and removes it from the processing list, now.
  void AnswerNow(const std::string& raw, const std::string& req, const char* op, const Status& status);
  // An error reply that could not be written: logged; on a live connection the command is
  // dropped all the same, or resumed later when the refusal may pass.
  void Unanswered(const std::string& raw, const Status& status);
  // Removes a command from the processing list without a reply (LREM needs no memory, so it
  // works when Redis refuses writes for lack of it).
  void Drop(const std::string& raw, const Status& why);
  // The processing list is handled again from the list once nothing is in flight, a second from
  // now, then after 2, 4, 8 and 10 s while commands keep being refused.
  void ResumeLater();
  Status MissingStatus(const std::string& name);
  void HandleRefcount(const std::string& raw, const Command& cmd, int delta);
  // Queues a commit for the current batch (or returns it to run now with CommitNow).
  Pending Commit(const std::string& raw, const std::string& req, const std::string& name,
                 const std::string& reply, Pre pre, const char* action,
                 const std::vector<std::string>& extra,
                 std::function<void(Result<CommitResult>)> done = nullptr);
  static Result<CommitResult> ParseCommit(Result<RedisValue> reply);
  // The success reply of a socket command whose commit went through, as the script would have
  // written it.
  static std::string SocketReply(const Pending& pending, const CommitResult& result);
  // Frees the entry's memory on its device's worker and waits for it; with `then`, posts the free
  // instead and `then` runs on the worker with the outcome (so it may only touch what is safe
  // from another thread: Outcome, the log).
  Status FreeEntry(const Entry& entry, std::function<void(const Status&)> then = nullptr);
  // Once a second at most, from the serving loop: ReapStackTensors and TrimReadyStock.
  void Housekeeping();
  void ReapStackTensors();
  void Outcome(const char* op, const std::string& name, const Status& status, Clock::time_point t0,
               const std::string& extra = "");

  std::unique_ptr<RedisConnection> redis_;
  std::unique_ptr<RedisConnection> unblock_conn_;  // calls off the main connection's BLMOVE
  std::unique_ptr<CommandSocket> command_socket_;
  std::string command_socket_path_;  // named in the heartbeat ("" without one)
  std::vector<Incoming> socket_in_;  // socket commands collected, not yet handled
  std::unordered_set<uint64_t> socket_waiting_;  // tokens of socket commands not yet answered
  uint64_t next_token_ = 1;
  // The route of the command being handled, or whose commit's result is being acted on: where
  // Fail, AnswerNow and Refused answer, and how Commit writes. Conn 0 (the list) otherwise.
  Route route_;
  bool last_from_socket_ = false;  // the last batch had socket commands: WaitForCommand looks a while
  std::string commit_sha_;
  std::vector<Pending> batch_;  // commits planned, not yet sent
  std::deque<Due> due_;         // replies due on the connection, in the order sent
  Status send_failed_;          // not ok: a send failed, so no reply will come
  std::optional<Result<RedisValue>> take_reply_;  // a take's answer, read by Drain
  // How many commands the next take asks for: twice what the last one got (2 to 64).
  int take_size_ = 4;
  // Commands left in the processing list by a commit that may pass: resumed from the list when
  // nothing is in flight, from resume_at_ on.
  bool resume_due_ = false;
  Clock::time_point resume_at_{};
  int resume_rounds_ = 0;  // resumes in a row that left commands behind again
  Recurring take_refused_;  // takes Redis refused in a row
  std::atomic<long long> client_id_{0};  // read by the heartbeat thread to unblock Run()
  std::string processing_key_;
  std::string shm_prefix_;
  std::map<int, std::unique_ptr<GpuWorker>> workers_;
  std::map<int, std::unique_ptr<Allocator>> allocators_;
  std::unordered_map<std::string, Entry> tensors_;
  std::set<std::string> stack_names_;  // the stack tensors among them, for the reaper; see Keep
  // Every tensor enters tensors_ by Keep and leaves by Forget, which keep stack_names_ and
  // tensor_count_ with it.
  void Keep(Entry entry);
  Entry Forget(std::unordered_map<std::string, Entry>::iterator it);
  std::vector<Entry> orphans_;  // allocations whose hash vanished underneath: freed at shutdown
  std::vector<Entry> unsettled_;  // creates whose commit got no answer (connection lost)
  std::string devices_text_;
  std::string allocator_text_;
  std::unique_ptr<FdServer> pool_server_;
  std::string pool_socket_path_;  // named in the heartbeat ("" without pools)
  std::atomic<uint64_t> pool_used_{0};
  int64_t started_ms_ = 0;
  uint64_t pid_start_ = 0;  // ProcessStartTime(getpid()): the heartbeat's pid_start
  uint64_t pid_ino_ = 0;    // PidfdInode(getpid()), 0 without pidfs: the heartbeat's pid_ino
  Clock::time_point last_housekeeping_{};

  std::atomic<bool> stop_{false};
  bool shut_down_ = false;
  std::mutex hb_mutex_;
  std::condition_variable hb_wake_;
  std::thread heartbeat_;
  std::atomic<uint64_t> ok_count_{0};
  std::atomic<size_t> tensor_count_{0};
  bool owns_heartbeat_ = false;
  std::string node_lost_;  // why the node was lost to another instance (under hb_mutex_)
  std::array<std::atomic<uint64_t>, kCodeCount> error_counts_{};
};

Status Server::Impl::Connect() {
  RedisOptions ropt;
  ropt.command_timeout_ms = 10000;
  MCD_ASSIGN_OR_RETURN(redis_, RedisConnection::Connect(opt_.redis_url, ropt));
  MCD_ASSIGN_OR_RETURN(RedisValue id, redis_->Command({"CLIENT", "ID"}));
  MCD_ASSIGN_OR_RETURN(long long client_id, AsInteger(id, "CLIENT ID"));
  client_id_ = client_id;
  return LoadScript();
}

Status Server::Impl::LoadScript() {
  MCD_ASSIGN_OR_RETURN(RedisValue sha, redis_->Command({"SCRIPT", "LOAD", kCommitScript}));
  MCD_ASSIGN_OR_RETURN(commit_sha_, AsString(sha, "SCRIPT LOAD"));
  return Status::Ok();
}

Status Server::Impl::Start() {
  if (opt_.node.empty()) opt_.node = HostName();
  SetLogLevel(static_cast<LogLevel>(std::clamp(opt_.log_level, 0, 3)));
  SetLogTag("mcd-serve");
  instance_ = RandomHex(8);
  started_ms_ = NowMs();
  pid_start_ = ProcessStartTime(getpid());
  pid_ino_ = PidfdInode(getpid());
  processing_key_ = opt_.keys.Processing(opt_.node);
  // Two Redis servers on one host may each have a node of the same name: keep their objects apart.
  char url_tag[16];
  std::snprintf(url_tag, sizeof(url_tag), "%08zx",
                std::hash<std::string>{}(opt_.redis_url.Redacted()) & 0xffffffffu);
  shm_prefix_ = ShmPrefix(opt_.keys.prefix, opt_.node + "-" + url_tag);

  // Host memory is always served; GPUs as asked (all by default).
  workers_[kHostDevice] = std::make_unique<GpuWorker>(kHostDevice);
  allocators_[kHostDevice] = MakeHostShmAllocator(shm_prefix_ + instance_ + "-");
  std::vector<int> gpus = opt_.devices;
  if (opt_.all_devices) {
    gpus.clear();
    // No driver or no GPU simply means that only host memory is served.
    for (int d = 0; d < CudaDeviceCount(); ++d) gpus.push_back(d);
  }
  devices_text_ = "cpu";
  for (int d : gpus) {
    auto worker = std::make_unique<GpuWorker>(d);
    Status bound = worker->Call([](DeviceContext& ctx) { return ctx.EnsureGpu(); });
    if (!bound.ok()) {
      return Status(bound.code(), "cannot serve device " + std::to_string(d) + ": " + bound.message());
    }
    std::unique_ptr<Allocator> allocator;
    if (opt_.allocator == "pool") {
      PoolConfig pool;
      pool.max_bytes = opt_.pool_max_bytes;
      pool.max_fraction = opt_.pool_max_fraction;
      pool.release_threshold = opt_.pool_release_threshold;
      allocator = MakeCudaMempoolAllocator(pool);
    } else {
      allocator = MakeCudaIpcAllocator(opt_.ipc_slab_max_bytes);
    }
    allocator = WithReadyStock(std::move(allocator), opt_.ready_max_bytes);
    Status ready = worker->Call([&](DeviceContext& ctx) { return allocator->Init(ctx); });
    if (!ready.ok()) {
      return Status(ready.code(), "cannot set up the " + std::string(allocator->kind()) +
                                      " allocator of device " + std::to_string(d) + ": " + ready.message());
    }
    allocator_text_ += std::string(allocator_text_.empty() ? "" : ",") + std::to_string(d) + ":" + allocator->kind();
    workers_[d] = std::move(worker);
    allocators_[d] = std::move(allocator);
    devices_text_ += "," + std::to_string(d);
  }
  allocator_text_ += std::string(allocator_text_.empty() ? "" : ",") + "cpu:host_shm";

  MCD_RETURN_IF_ERROR(Connect());
  // Claimed before the reconciliation, which removes what other instances of the node left, and
  // before binding the pool socket, whose path (--pool-socket) a live server may be using. The
  // heartbeat names the socket from the claim on; nobody needs it before this server runs.
  bool pools = opt_.allocator == "pool" && allocators_.size() > 1;
  if (pools) pool_socket_path_ = SocketPath(opt_.pool_socket, "pool");
  MCD_RETURN_IF_ERROR(ClaimNode());
  if (pools) MCD_RETURN_IF_ERROR(StartPoolSocket());
  if (opt_.command_socket != "none") {
    MCD_ASSIGN_OR_RETURN(PeerPolicy policy, Peers());
    MCD_ASSIGN_OR_RETURN(command_socket_, CommandSocket::Listen(SocketPath(opt_.command_socket, "cmd"), policy));
    command_socket_path_ = command_socket_->path();
    // The claim's heartbeat could not name the socket yet, and a client that reads a heartbeat
    // without one sends through the queue for as long as it runs: name it now, before the
    // server says it serves, not when the heartbeat thread first gets to it.
    MCD_RETURN_IF_ERROR(ClaimNode());
  }
  WarnIfRedisEvicts();
  MCD_RETURN_IF_ERROR(Reconcile());
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  Log(LogLevel::kInfo, "serving node '" + opt_.node + "' instance " + instance_ + " on " +
                           opt_.redis_url.Redacted() + ", queue '" + opt_.keys.queue +
                           "', devices " + devices_text_);
  return Status::Ok();
}

std::string Server::Impl::SocketPath(const std::string& given, const char* kind) const {
  if (!given.empty()) return given;
  std::string dir = RuntimeDir();
  mkdir(dir.c_str(), 0700);
  std::string node;
  for (char c : opt_.node) node.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return dir + "/" + kind + "-" + node.substr(0, 40) + "-" + instance_ + ".sock";
}

Result<PeerPolicy> Server::Impl::Peers() const {
  PeerPolicy policy;
  policy.uid = geteuid();
  if (!opt_.pool_group.empty()) {
    group* g = getgrnam(opt_.pool_group.c_str());
    if (g == nullptr) return Status(ErrorCode::kInvalidArgument, "no group named '" + opt_.pool_group + "'");
    policy.group = g->gr_gid;
  }
  return policy;
}

Status Server::Impl::StartPoolSocket() {
  MCD_ASSIGN_OR_RETURN(PeerPolicy policy, Peers());
  // The descriptors stay owned by the allocators; the socket hands out duplicates.
  MCD_ASSIGN_OR_RETURN(pool_server_, FdServer::Start(pool_socket_path_, policy, [this](int device) {
    auto it = allocators_.find(device);
    return it == allocators_.end() ? -1 : it->second->pool_fd();
  }));
  return Status::Ok();
}

std::string Server::Impl::DeviceText(const std::function<std::string(const Allocator&)>& value_of) const {
  std::string text;
  for (const auto& [device, allocator] : allocators_) {
    std::string value = value_of(*allocator);
    if (value.empty()) continue;
    text += std::string(text.empty() ? "" : ",") + std::to_string(device) + ":" + value;
  }
  return text;
}

std::string Server::Impl::PrimerText(const std::string& kind) const {
  return DeviceText([&](const Allocator& a) { return a.kind() == kind ? HexEncode(a.primer()) : std::string(); });
}

std::string Server::Impl::PoolFdText() const {
  return DeviceText([](const Allocator& a) {
    int fd = a.pool_fd();  // read once: a reset may clear it meanwhile
    return fd >= 0 ? std::to_string(fd) : std::string();
  });
}

uint64_t Server::Impl::SumOver(uint64_t (Allocator::*bytes)() const noexcept) const {
  uint64_t total = 0;
  for (const auto& [device, allocator] : allocators_) total += (allocator.get()->*bytes)();
  return total;
}

uint64_t Server::Impl::ReadyBytes() const { return SumOver(&Allocator::ReadyBytes); }

void Server::Impl::TrimReadyStock() {
  for (auto& [device, allocator] : allocators_) {
    if (allocator->ReadyBytes() == 0) continue;  // an idle server with no stock wakes nobody
    Allocator* a = allocator.get();
    (void)workers_.at(device)->Post([a](DeviceContext& ctx) {
      a->Trim(ctx, false);
      return Status::Ok();
    });
  }
}

uint64_t Server::Impl::PoolUsedBytes() {
  uint64_t total = 0;
  for (auto& [device, allocator] : allocators_) {
    if (allocator->pool_fd() < 0) continue;
    Allocator* a = allocator.get();
    (void)workers_.at(device)->Call([&](DeviceContext& ctx) {
      total += a->PoolUsedBytes(ctx);
      return Status::Ok();
    });
  }
  return total;
}

Status Server::Impl::ClaimNode() {
  std::string replace;
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto written = WriteHeartbeat(*redis_, replace);
    if (!written.ok()) {
      return Status(written.status().code(), "cannot write the heartbeat: " + written.status().message());
    }
    if (!written->has_value()) {
      owns_heartbeat_ = true;
      return Status::Ok();
    }
    const Holder& holder = **written;
    if (holder.pid != getpid() && ProcessAlive(holder.pid, 0)) {
      return Status(ErrorCode::kAlreadyExists,
                    "another mcd-serve (pid " + std::to_string(holder.pid) + ", instance " +
                        holder.instance + ") already serves node '" + opt_.node + "' on " +
                        opt_.redis_url.Redacted() + "; stop it or pick another --node");
    }
    replace = holder.instance;  // its process is gone: take over, unless another did meanwhile
  }
  return Status(ErrorCode::kUnavailable, "the heartbeat of node '" + opt_.node +
                                             "' keeps changing hands: are other mcd-serve starting?");
}

// A Redis that evicts keys at its maxmemory (a cache's setting) may drop a tensor's hash while
// its memory stays held, or the heartbeat of a live server. Said at start; a Redis that hides
// CONFIG (some managed ones) is taken as it is.
void Server::Impl::WarnIfRedisEvicts() {
  auto policy = redis_->Command({"CONFIG", "GET", "maxmemory-policy"});
  if (!policy.ok() || policy->elements.size() != 2 || policy->elements[1].str == "noeviction") return;
  auto limit = redis_->Command({"CONFIG", "GET", "maxmemory"});
  std::string bytes = limit.ok() && limit->elements.size() == 2 ? limit->elements[1].str : "?";
  Log(LogLevel::kWarn, "Redis's maxmemory-policy is '" + policy->elements[1].str +
                           "': at its maxmemory (" + (bytes == "0" ? "none set now" : bytes + " bytes") +
                           ") it evicts keys, and a tensor whose hash it evicts is lost to every "
                           "client while its memory stays held; set maxmemory-policy noeviction");
}

Status Server::Impl::Reconcile() {
  // Hashes of this node owned by an instance that is gone: their memory died with it (GPU) or is
  // unlinked here (host shm). Then any shm object of this node no hash refers to.
  int removed = 0;
  Status scanned = redis_->Scan(opt_.keys.TensorPattern("*"), 1000, [&](const std::vector<RedisValue>& keys) -> Status {
    for (const RedisValue& key : keys) {
      MCD_RETURN_IF_ERROR(redis_->Append({"HMGET", key.str, "node", "owner", "ipc_kind", "ipc_handle"}));
    }
    std::vector<std::pair<std::string, RedisValue>> stale;
    for (const RedisValue& key : keys) {
      MCD_ASSIGN_OR_RETURN(RedisValue f, redis_->ReadReply());
      if (f.elements.size() != 4 || f.elements[0].str != opt_.node) continue;
      if (f.elements[1].str == instance_) continue;
      stale.emplace_back(key.str, std::move(f));
    }
    for (const auto& [key, f] : stale) {
      if (f.elements[2].str == "host_shm") UnlinkHostShm(f.elements[3].str);
      MCD_RETURN_IF_ERROR(redis_->Command({"DEL", key}).status());
      Log(LogLevel::kInfo, "removed stale tensor '" + opt_.keys.NameFromTensorKey(key) +
                               "' of dead instance " + f.elements[1].str);
      ++removed;
    }
    return Status::Ok();
  });
  MCD_RETURN_IF_ERROR(scanned);
  int shm_removed = RemoveHostShmObjects(shm_prefix_);
  MCD_ASSIGN_OR_RETURN(RedisValue pending, redis_->Command({"LLEN", processing_key_}));
  Log(LogLevel::kInfo, "startup: removed " + std::to_string(removed) +
                           " stale tensor(s) of dead instances, " + std::to_string(shm_removed) +
                           " orphaned shm object(s); " + std::to_string(pending.integer) +
                           " unfinished command(s) to resume");
  return Status::Ok();
}

Result<std::optional<Server::Impl::Holder>> Server::Impl::WriteHeartbeat(RedisConnection& conn,
                                                                        const std::string& replace) {
  std::vector<std::string> args = {"EVAL", kHeartbeatScript, "1", opt_.keys.Server(opt_.node),
                                   instance_, replace, std::to_string(opt_.heartbeat_ttl_s),
                                   "instance", instance_,
                                   "pid", std::to_string(getpid()),
                                   "pid_start", std::to_string(pid_start_),
                                   "pid_ino", pid_ino_ != 0 ? std::to_string(pid_ino_) : "",
                                   "node", opt_.node,
                                   "devices", devices_text_,
                                   "allocator", allocator_text_,
                                   "pool_socket", pool_socket_path_,
                                   "pool_fd", PoolFdText(),
                                   "ipc_primer", PrimerText("cuda_ipc"),
                                   "pool_primer", PrimerText("cuda_mempool"),
                                   "command_socket", command_socket_path_,
                                   "pool_used", std::to_string(pool_used_.load()),
                                   "ready_bytes", std::to_string(ReadyBytes()),
                                   "slab_bytes", std::to_string(SumOver(&Allocator::SlabBytes)),
                                   "slab_free_bytes", std::to_string(SumOver(&Allocator::SlabFreeBytes)),
                                   "started", std::to_string(started_ms_),
                                   "queue", opt_.keys.queue,
                                   "version", "1",
                                   "tensors", std::to_string(tensor_count_.load()),
                                   "commands_ok", std::to_string(ok_count_.load())};
  uint64_t failed = 0;
  for (size_t c = 1; c < kCodeCount; ++c) {
    uint64_t n = error_counts_[c].load();
    failed += n;
    if (n != 0) {
      args.push_back(std::string("errors_") + ErrorName(static_cast<int32_t>(c)));
      args.push_back(std::to_string(n));
    }
  }
  args.push_back("commands_failed");
  args.push_back(std::to_string(failed));
  std::vector<std::string_view> argv(args.begin(), args.end());
  // An error reply (OOM under maxmemory, say) is a failure too, not only a lost connection.
  MCD_ASSIGN_OR_RETURN(RedisValue reply, conn.CommandRaw(argv));
  if (reply.type == RedisValue::Type::kError) return Status(ErrorCode::kRedisError, "Redis: " + reply.str);
  if (reply.elements.empty()) return Status(ErrorCode::kUnexpectedReply, "heartbeat script reply");
  if (reply.elements[0].str == "ok") return std::optional<Holder>();
  if (reply.elements[0].str != "held" || reply.elements.size() != 3) {
    return Status(ErrorCode::kUnexpectedReply, "heartbeat script answered '" + reply.elements[0].str + "'");
  }
  Holder holder;
  holder.instance = reply.elements[1].str;
  holder.pid = std::atoll(reply.elements[2].str.c_str());
  return std::optional<Holder>(std::move(holder));
}

void Server::Impl::HeartbeatLoop() {
  RedisOptions ropt;
  ropt.command_timeout_ms = 2000;
  std::unique_ptr<RedisConnection> conn;
  auto interval = std::chrono::milliseconds(std::max(200, opt_.heartbeat_ttl_s * 1000 / 4));
  Recurring failed;
  std::unique_lock<std::mutex> lock(hb_mutex_);
  while (!stop_) {
    lock.unlock();
    if (!conn || !conn->connected()) {
      auto c = RedisConnection::Connect(opt_.redis_url, ropt);
      if (c.ok()) conn = std::move(c).value();
    }
    if (pool_server_) pool_used_ = PoolUsedBytes();
    if (conn && conn->connected()) {
      auto written = WriteHeartbeat(*conn);
      if (written.ok() && written->has_value()) {
        // This server was not heard from for longer than the TTL (stopped, or its machine
        // paused), and another one took the node over and removed this one's hashes as
        // stale: stop serving, and leave the keys alone, which are the other one's now.
        const Holder& holder = **written;
        lock.lock();
        node_lost_ = "another mcd-serve (pid " + std::to_string(holder.pid) + ", instance " + holder.instance +
                     ") took node '" + opt_.node + "' over while this one was not heard from for " +
                     "longer than its heartbeat TTL; this one stops and leaves that one's keys alone";
        Log(LogLevel::kError, node_lost_);
        stop_ = true;
        break;
      }
      Status s = written.ok() ? Status::Ok() : written.status();
      if (!s.ok() && failed.Again()) {
        int n = failed.count();
        Log(LogLevel::kWarn, "heartbeat: " + s.ToString() + (n > 1 ? " (" + std::to_string(n) + " failures in a row)" : ""));
      } else if (s.ok() && failed.count() > 0) {
        Log(LogLevel::kInfo, "heartbeat written again after " + std::to_string(failed.count()) + " failure(s)");
        failed.Over();
      }
    }
    lock.lock();
    hb_wake_.wait_for(lock, interval, [this] { return stop_.load(); });
  }
  lock.unlock();
  // Wake the main connection out of its BLMOVE so that Run() returns at once.
  if (!conn || !conn->connected()) {
    auto c = RedisConnection::Connect(opt_.redis_url, ropt);
    if (c.ok()) conn = std::move(c).value();
  }
  if (conn && conn->connected()) {
    std::string id = std::to_string(client_id_.load());
    (void)conn->Command({"CLIENT", "UNBLOCK", id});
  }
}

void Server::Impl::RequestStop() {
  {
    std::lock_guard<std::mutex> lock(hb_mutex_);
    stop_ = true;
  }
  hb_wake_.notify_all();
}

Status Server::Impl::ResumeUnfinished() {
  // Commands taken from the queue but not committed (by a previous instance of this node, or
  // before a lost connection), oldest first. A committed command is no longer in the list.
  MCD_ASSIGN_OR_RETURN(RedisValue left, redis_->Command({"LRANGE", processing_key_, "0", "-1"}));
  std::vector<Incoming> commands;
  for (auto it = left.elements.rbegin(); it != left.elements.rend(); ++it) {
    commands.push_back(Incoming{0, std::move(it->str), false});
  }
  if (!commands.empty()) Log(LogLevel::kInfo, "resuming " + std::to_string(commands.size()) + " unfinished command(s)");
  ProcessBatch(std::move(commands));
  return Status::Ok();
}

Status Server::Impl::SettleAfterReconnect() {
  // Creates whose commit got no answer: the hash tells whether it ran.
  std::vector<Entry> unsettled = std::move(unsettled_);
  unsettled_.clear();
  for (Entry& entry : unsettled) {
    // Its allocation is its handle and offset: tensors carved from one slab share the handle.
    MCD_ASSIGN_OR_RETURN(RedisValue f, redis_->Command({"HMGET", opt_.keys.Tensor(entry.record.name), "owner",
                                                        "ipc_handle", "offset"}));
    bool ran = f.elements.size() == 3 && f.elements[0].str == instance_ &&
               f.elements[1].str == entry.record.ipc_handle && f.elements[2].str == std::to_string(entry.record.offset);
    if (ran) {
      Keep(std::move(entry));
    } else {
      (void)FreeEntry(entry);  // never published: nobody can have opened it
    }
  }
  // Tensors whose hash is gone (a Redis restart without persistence, or a delete whose reply was
  // lost): processes may still map them, so their memory is kept until shutdown.
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    MCD_ASSIGN_OR_RETURN(RedisValue owner, redis_->Command({"HGET", opt_.keys.Tensor(it->first), "owner"}));
    if (owner.str == instance_) {
      ++it;
      continue;
    }
    Log(LogLevel::kWarn, "tensor '" + it->first + "' lost its hash while Redis was away; its memory is kept until shutdown");
    auto lost = it++;
    orphans_.push_back(Forget(lost));
  }
  return ResumeUnfinished();
}

Status Server::Impl::Run() {
  MCD_RETURN_IF_ERROR(ResumeUnfinished());
  int backoff_ms = 100;
  bool busy = false;
  while (!stop_) {
    Housekeeping();
    // Busy (commands were waiting): the take sent ahead of the last batch has the next ones.
    // Otherwise a blocking wait for the next command (an idle server sleeps in BLMOVE: no
    // polling), which costs a lone command no extra round trip.
    Result<RedisValue> taken = RedisValue{};
    if (busy) {
      if (!take_reply_) Drain();  // the take sent ahead is due
      taken = std::move(*take_reply_);
      take_reply_.reset();
      busy = taken.ok() && !taken->elements.empty();
    }
    if (command_socket_) command_socket_->Collect(socket_in_, kMaxCommandBytes);
    if (!busy && taken.ok() && socket_in_.empty()) {
      Drain();  // before sleeping: the commits' results, and what the last batch freed is freed
      if (resume_due_ && Clock::now() >= resume_at_) {
        // Nothing is due and no take is out: the processing list holds only the left commands.
        resume_due_ = false;
        Status resumed = ResumeUnfinished();
        if (!resumed.ok()) Log(LogLevel::kWarn, "resuming commands: " + resumed.ToString());
        Drain();
        // Still refused: the next round waits longer, up to 10 s.
        resume_rounds_ = resume_due_ ? resume_rounds_ + 1 : 0;
        resume_at_ = Clock::now() + std::chrono::seconds(std::min(10, 1 << std::min(resume_rounds_, 4)));
        continue;
      }
      auto t0 = Clock::now();
      taken = WaitForCommand();
      if (taken.ok() && !taken->is_nil()) {
        // An answer faster than a context switch means the command was already waiting.
        busy = Clock::now() - t0 < std::chrono::microseconds(60);
        RedisValue one = std::move(taken.value());
        taken = RedisValue{RedisValue::Type::kArray, 0, "", {std::move(one)}};
      }
    }
    if (!taken.ok()) {
      Drain();  // on this connection, before any reconnect: a lost one fails them all
      busy = false;
      ErrorCode code = taken.status().code();
      // Redis answered, with an error (OOM under maxmemory, a missing permission): the same
      // error a commit it refused gives, whichever of the two commands met it first.
      bool refused = (code == ErrorCode::kUnexpectedReply || code == ErrorCode::kRedisError) && redis_->connected();
      Status why = refused ? Status(code, "Redis refused the server's take of commands (" + taken.status().message() +
                                              "); nothing changed")
                           : Status(ErrorCode::kUnavailable,
                                    "the server cannot reach Redis (" + taken.status().message() + "); nothing changed");
      // Commands on the socket are not kept waiting for Redis: their clients hear why now.
      for (const Incoming& in : socket_in_) {
        Route route{in.conn, next_token_++};
        socket_waiting_.insert(route.token);
        AnswerSocket(route, ErrorReply("", nullptr, why));
      }
      socket_in_.clear();
      if (stop_) break;
      if (refused) {
        PauseAfterRefusedTake(taken.status());  // Redis answered: reconnecting would not help
        continue;
      }
      Log(LogLevel::kWarn, "Redis: " + taken.status().ToString() + "; reconnecting");
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, 5000);
      if (redis_->Reconnect().ok() && Connect().ok()) {
        Log(LogLevel::kInfo, "Redis connection restored");
        backoff_ms = 100;
        Status settled = SettleAfterReconnect();
        if (!settled.ok()) Log(LogLevel::kWarn, "after reconnecting: " + settled.ToString());
      }
      continue;
    }
    backoff_ms = 100;
    if (take_refused_.count() > 0) TakeAcceptedAgain();
    std::vector<Incoming> commands;
    if (!taken->is_nil()) {  // nil: BLMOVE timeout, or CLIENT UNBLOCK
      for (RedisValue& v : taken->elements) commands.push_back(Incoming{0, std::move(v.str), false});
    }
    bool from_socket = !socket_in_.empty();
    for (Incoming& in : socket_in_) commands.push_back(std::move(in));
    socket_in_.clear();
    if (commands.empty()) continue;
    // While commands come on the socket, the list is looked at with each batch, without blocking.
    busy = busy || from_socket;
    if (busy) SendTake();
    ProcessBatch(std::move(commands));
  }
  Drain();
  std::lock_guard<std::mutex> lock(hb_mutex_);
  if (!node_lost_.empty()) return Status(ErrorCode::kAlreadyExists, node_lost_);
  return Status::Ok();
}


Result<RedisValue> Server::Impl::WaitForCommand() {
  std::vector<std::string_view> take = {"BLMOVE", opt_.keys.queue, processing_key_, "RIGHT", "LEFT", "1"};
  if (!command_socket_) return redis_->Command(take);
  // A socket client that just had its reply often sends its next command at once: look for it
  // a little while before blocking, as a client polls for its reply.
  if (last_from_socket_ && SpinUntil([this] {
        command_socket_->Collect(socket_in_, kMaxCommandBytes);
        return !socket_in_.empty();
      })) {
    return RedisValue{};
  }
  MCD_RETURN_IF_ERROR(redis_->Append(take));
  MCD_RETURN_IF_ERROR(redis_->FlushOutput());
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back(pollfd{redis_->fd(), POLLIN, 0});
    command_socket_->AddPollFds(fds);
    int n = poll(fds.data(), fds.size(), redis_->timeout_ms());
    if (n < 0 && errno == EINTR) continue;
    // The take's answer, or no answer in time: ReadCommandReply reads it or says what is wrong.
    if (n <= 0 || fds[0].revents != 0) break;
    command_socket_->Collect(socket_in_, kMaxCommandBytes);
    if (!socket_in_.empty()) return CallOffTake();
  }
  return redis_->ReadCommandReply("BLMOVE");
}

Result<RedisValue> Server::Impl::CallOffTake() {
  std::string id = std::to_string(client_id_.load());
  // The UNBLOCK travels on another connection, so it may reach Redis before the BLMOVE does
  // (then it answers 0): it is sent again until the take has answered, at most for a second,
  // after which the BLMOVE answers by its own timeout.
  for (int tries = 0; tries < 500; ++tries) {
    if (!unblock_conn_ || !unblock_conn_->connected()) {
      RedisOptions ropt;
      ropt.command_timeout_ms = 2000;
      auto conn = RedisConnection::Connect(opt_.redis_url, ropt);
      if (!conn.ok()) break;
      unblock_conn_ = std::move(conn).value();
    }
    auto unblocked = unblock_conn_->Command({"CLIENT", "UNBLOCK", id});
    if (!unblocked.ok() || unblocked->integer == 1) break;
    pollfd p{redis_->fd(), POLLIN, 0};
    if (redis_->ReplyBuffered() || poll(&p, 1, 2) != 0) break;
  }
  return redis_->ReadCommandReply("BLMOVE");
}

bool Server::Impl::AnswerSocket(const Route& route, const std::string& reply) {
  if (socket_waiting_.erase(route.token) == 0 || !command_socket_) return false;
  return command_socket_->Send(route.conn, reply);
}

void Server::Impl::PauseAfterRefusedTake(const Status& status) {
  if (take_refused_.Again()) {
    std::string why = status.message();
    while (!why.empty() && (why.back() == '.' || why.back() == ' ')) why.pop_back();
    if (status.code() == ErrorCode::kUnexpectedReply) why += " (is '" + opt_.keys.queue + "' a list?)";
    int tries = take_refused_.count();
    Log(LogLevel::kError, "Redis refuses to hand out commands: " + why +
                              (tries == 1 ? "; trying again" : "; still so after " + std::to_string(tries) + " tries"));
  }
  // 0.1 s, then twice as long each time, up to a second.
  int pause_ms = 100 << std::min(take_refused_.count() - 1, 4);
  for (int waited = 0; waited < std::min(pause_ms, 1000) && !stop_; waited += 100) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Server::Impl::TakeAcceptedAgain() {
  Log(LogLevel::kInfo, "Redis hands out commands again (refused " + std::to_string(take_refused_.count()) +
                           " time(s) over " + std::to_string(take_refused_.Seconds()) + " s)");
  take_refused_.Over();
}

void Server::Impl::ProcessBatch(std::vector<Incoming> commands) {
  // Commands of one batch are planned in order and their commits pipelined. A command naming a
  // tensor that an earlier one of the batch touched, or whose commit is still on its way, waits
  // until those are committed, so each sees the effects of the ones before it.
  std::vector<std::string> touched;
  last_from_socket_ = false;
  for (Incoming& in : commands) {
    route_ = Route{};
    if (in.conn != 0) {
      last_from_socket_ = true;
      route_ = Route{in.conn, next_token_++};
      socket_waiting_.insert(route_.token);
      if (in.overlong) {
        Status status(ErrorCode::kTooLarge, "command line is over the limit of " + std::to_string(kMaxCommandBytes) +
                                                " bytes; the connection is closed");
        AnswerSocket(route_, ErrorReply("", nullptr, status));
        Outcome("invalid", "", status, Clock::now(), "via=socket");
        command_socket_->Close(in.conn);
        continue;
      }
    }
    const std::string& raw = in.line;
    std::string req;
    auto parsed = ParseCommand(raw, &req);
    if (parsed.ok()) {
      if (std::find(touched.begin(), touched.end(), parsed->name) != touched.end()) {
        Flush();
        Drain();
        touched.clear();
      } else if (IsDue(parsed->name)) {
        Drain();
      }
      touched.push_back(parsed->name);
    }
    Handle(raw, parsed, req);
  }
  route_ = Route{};
  Flush();
}

void Server::Impl::SendTake() {
  // Plain LMOVEs in one write rather than a script: each moves one command atomically into the
  // processing list, and one that finds the queue empty costs Redis about a microsecond, where a
  // script call costs it ~15 (most of it the script machinery).
  Status sent;
  for (int i = 0; i < take_size_ && sent.ok(); ++i) {
    sent = redis_->Append({"LMOVE", opt_.keys.queue, processing_key_, "RIGHT", "LEFT"});
  }
  if (sent.ok()) sent = redis_->FlushOutput();
  if (!sent.ok() && send_failed_.ok()) send_failed_ = sent;
  due_.push_back(Due{take_size_, {}});
}

void Server::Impl::Flush() {
  size_t earlier = due_.size();  // the last batch's commits, a take sent ahead
  std::vector<Pending> sent = std::move(batch_);
  batch_.clear();
  for (Pending& p : sent) {
    if (send_failed_.ok()) {
      std::vector<std::string_view> argv(p.args.begin(), p.args.end());
      send_failed_ = redis_->Append(argv);
    }
    due_.push_back(Due{0, std::move(p)});
  }
  // Sent now, not with the next read, so that Redis runs them while the server goes on.
  if (!sent.empty() && send_failed_.ok()) send_failed_ = redis_->FlushOutput();
  // Then what was due before them, which has mostly arrived by now.
  Drain(earlier);
}

bool Server::Impl::IsDue(const std::string& name) const {
  return std::any_of(due_.begin(), due_.end(), [&](const Due& d) { return d.take == 0 && d.commit.name == name; });
}

Result<RedisValue> Server::Impl::ReadTake(int moves) {
  if (!send_failed_.ok()) return send_failed_;
  RedisValue taken{RedisValue::Type::kArray, 0, "", {}};
  Status failed;
  for (int i = 0; i < moves; ++i) {
    Result<RedisValue> moved = redis_->ReadReply();
    if (!moved.ok()) return moved.status();  // the connection is gone: nothing more to read
    if (moved->type == RedisValue::Type::kError) {
      // An error answer (the queue is not a list, say): the answers after it are still read.
      if (failed.ok()) failed = Status(ErrorCode::kRedisError, "Redis LMOVE (take): " + moved->str);
    } else if (!moved->is_nil()) {
      taken.elements.push_back(std::move(moved.value()));
    }
  }
  // On failure, whatever was moved waits in the processing list for the resume after reconnecting.
  if (!failed.ok()) return failed;
  take_size_ = std::clamp(2 * static_cast<int>(taken.elements.size()), 2, 64);
  return taken;
}

void Server::Impl::Drain(size_t count) {
  std::vector<Pending> sent;
  std::vector<Result<CommitResult>> results;
  bool reload = false;
  auto read = [&](size_t n) {
    for (; n > 0 && !due_.empty(); --n) {
      Due d = std::move(due_.front());
      due_.pop_front();
      if (d.take > 0) {
        take_reply_ = ReadTake(d.take);
        continue;
      }
      Result<RedisValue> reply = send_failed_.ok() ? redis_->ReadReply() : Result<RedisValue>(send_failed_);
      results.push_back(ParseCommit(std::move(reply)));
      if (!results.back().ok() && IsNoScript(results.back().status().message())) reload = true;
      sent.push_back(std::move(d.commit));
    }
  };
  read(count);
  if (reload) read(due_.size());  // commits are run again on a connection with nothing due
  if (due_.empty()) send_failed_ = Status::Ok();
  if (reload) {
    // Redis restarted or SCRIPT FLUSH: the scripts ran nowhere, so load them and run them again.
    Status loaded = LoadScript();
    Log(loaded.ok() ? LogLevel::kInfo : LogLevel::kWarn,
        loaded.ok() ? "Redis had lost the server's scripts (SCRIPT FLUSH?): loaded them again"
                    : "Redis had lost the server's scripts and loading them failed: " + loaded.ToString());
    for (size_t i = 0; i < sent.size(); ++i) {
      if (!results[i].ok() && IsNoScript(results[i].status().message())) results[i] = RunCommit(sent[i]);
    }
  }
  for (size_t i = 0; i < sent.size(); ++i) {
    Route previous = route_;
    route_ = sent[i].route;  // where the result's handling answers
    bool socket = route_.conn != 0;
    if (socket && results[i].ok() && results[i]->kind == CommitResult::kOk) {
      AnswerSocket(route_, SocketReply(sent[i], *results[i]));
    }
    Status failed = results[i].ok() ? Status::Ok() : results[i].status();
    if (sent[i].done) sent[i].done(std::move(results[i]));
    if (socket && socket_waiting_.count(route_.token) != 0) {
      // Not answered by the handling: the commit got no answer from Redis (the connection broke).
      Status unknown(failed.ok() ? ErrorCode::kInternal : failed.code(),
                     "the server lost Redis before the change was confirmed, so it may or may not have "
                     "taken effect: check with mcd-ls before repeating it (" + failed.message() + ")");
      AnswerSocket(route_, ErrorReply(sent[i].req, nullptr, unknown));
    }
    route_ = previous;
  }
}

std::string Server::Impl::SocketReply(const Pending& pending, const CommitResult& result) {
  if (pending.tails.empty()) return pending.reply;
  // As the commit script assembles an "incr" reply: the count, then how the tensor stands.
  if (result.refcount <= 0) return pending.reply + "0" + pending.tails[1];
  return pending.reply + std::to_string(result.refcount) + pending.tails[0];
}

Result<Server::Impl::CommitResult> Server::Impl::CommitNow(Pending pending) {
  Drain();
  return RunCommit(pending);
}

Result<Server::Impl::CommitResult> Server::Impl::RunCommit(Pending& pending) {
  // Each NOSCRIPT means Redis lost the scripts (again) before this commit ran: load them and
  // run it again. Bounded, so that a Redis that keeps flushing cannot hold the server here.
  for (int attempt = 1;; ++attempt) {
    std::vector<std::string_view> argv(pending.args.begin(), pending.args.end());
    Result<CommitResult> result = ParseCommit(redis_->CommandRaw(argv));  // errors read as pipelined ones
    if (result.ok() || !IsNoScript(result.status().message()) || attempt == 8) return result;
    MCD_RETURN_IF_ERROR(LoadScript());
    pending.args[1] = commit_sha_;
  }
}

void Server::Impl::Outcome(const char* op, const std::string& name, const Status& status,
                           Clock::time_point t0, const std::string& extra) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
  if (status.ok()) {
    ok_count_++;
  } else {
    error_counts_[static_cast<size_t>(status.code()) % kCodeCount]++;
  }
  LogLevel level = status.ok() ? LogLevel::kInfo : LogLevel::kWarn;
  if (!LogEnabled(level)) return;
  std::string line = std::string(op) + " name=" + (name.empty() ? "-" : name) + " outcome=" +
                     (status.ok() ? "ok" : ErrorName(status.code())) + " us=" + std::to_string(us);
  if (!extra.empty()) line += " " + extra;
  if (!status.ok()) line += " reason=\"" + status.message() + "\"";
  Log(level, line);
}

Server::Impl::Pending Server::Impl::Commit(const std::string& raw, const std::string& req,
                                           const std::string& name, const std::string& reply,
                                           Pre pre, const char* action,
                                           const std::vector<std::string>& extra,
                                           std::function<void(Result<CommitResult>)> done) {
  Pending p;
  p.route = route_;
  p.name = name;
  p.done = std::move(done);
  // From the socket, the reply goes there: the commit writes none (and no first result: the
  // client never sends the command again) and has nothing to take off the processing list.
  bool socket = route_.conn != 0;
  bool incr = std::string_view(action) == "incr";
  p.args = {"EVALSHA", commit_sha_, "4", opt_.keys.Tensor(name.empty() ? "-" : name), processing_key_,
            socket || req.empty() ? "-" : opt_.keys.Reply(req), socket || req.empty() ? "-" : opt_.keys.Done(req),
            socket ? "" : raw, socket ? "" : reply, std::to_string(opt_.reply_ttl_s),
            std::to_string(opt_.done_ttl_s), socket || req.empty() ? "0" : "1",
            pre == Pre::kNone ? "none" : pre == Pre::kAbsent ? "absent" : "mine", instance_, action};
  p.args.insert(p.args.end(), extra.begin(), extra.end());
  if (socket) {
    p.req = req;
    p.reply = reply;
    if (incr) {
      // The script assembles no reply, so the tails stay here (SocketReply) and travel empty.
      p.tails = {extra.at(1), extra.at(2)};
      p.args[p.args.size() - 2].clear();
      p.args[p.args.size() - 1].clear();
    }
  }
  return p;
}

Result<Server::Impl::CommitResult> Server::Impl::ParseCommit(Result<RedisValue> result) {
  if (!result.ok()) return result.status();
  // A pipelined reply comes as a value even when it is an error (NOSCRIPT after SCRIPT FLUSH):
  // keep its text, which decides whether the script is loaded again.
  if (result->type == RedisValue::Type::kError) return Status(ErrorCode::kRedisError, "Redis EVALSHA: " + result->str);
  if (result->elements.empty()) return Status(ErrorCode::kUnexpectedReply, "commit script reply");
  const std::string& kind = result->elements[0].str;
  CommitResult out;
  out.kind = kind == "ok" ? CommitResult::kOk : kind == "dup" ? CommitResult::kDup : CommitResult::kConflict;
  if (result->elements.size() > 1 && result->elements[1].type == RedisValue::Type::kInteger) {
    out.refcount = result->elements[1].integer;
  }
  return out;
}

void Server::Impl::Fail(const std::string& raw, const std::string& req, const char* op,
                        const Status& status) {
  if (route_.conn != 0) {
    AnswerSocket(route_, ErrorReply(req, op, status));
    return;
  }
  batch_.push_back(Commit(raw, req, "", ErrorReply(req, op, status), Pre::kNone, "none", {},
                          [this, raw](Result<CommitResult> r) {
                            if (!r.ok()) Unanswered(raw, r.status());
                          }));
}

void Server::Impl::AnswerNow(const std::string& raw, const std::string& req, const char* op,
                             const Status& status) {
  if (route_.conn != 0) {
    AnswerSocket(route_, ErrorReply(req, op, status));
    return;
  }
  auto answered = CommitNow(Commit(raw, req, "", ErrorReply(req, op, status), Pre::kNone, "none", {}));
  if (!answered.ok()) Unanswered(raw, answered.status());
}

void Server::Impl::Unanswered(const std::string& raw, const Status& status) {
  if (status.code() == ErrorCode::kRedisError && redis_->connected()) {
    return MayPass(RedisWords(status)) ? ResumeLater() : Drop(raw, status);
  }
  Log(LogLevel::kError, "cannot write error reply: " + status.ToString());
}

void Server::Impl::Refused(const std::string& raw, const std::string& req, const char* op,
                           const Status& status) {
  if (status.code() != ErrorCode::kRedisError || !redis_->connected() || raw.empty()) return;
  std::string words = RedisWords(status);
  // A socket command is not kept to be tried again: its client hears Redis's words and decides
  // (AnswerNow answers it on the socket).
  if (route_.conn == 0 && MayPass(words)) return ResumeLater();
  AnswerNow(raw, req, op, Status(ErrorCode::kRedisError, "Redis refused the change: " + words));
}

void Server::Impl::ResumeLater() {
  if (!resume_due_) resume_at_ = Clock::now() + std::chrono::seconds(1);
  resume_due_ = true;
}

void Server::Impl::Drop(const std::string& raw, const Status& why) {
  Drain();
  auto removed = redis_->Command({"LREM", processing_key_, "-1", raw});
  std::string what = "command " + raw.substr(0, 200) + " got no reply (" + why.message() + ")";
  if (removed.ok()) return Log(LogLevel::kWarn, what + "; dropped");
  Log(LogLevel::kError, what + " and cannot be dropped: " + removed.status().ToString());
}

void Server::Impl::Handle(const std::string& raw, const Result<Command>& parsed, const std::string& req) {
  auto t0 = Clock::now();
  if (!parsed.ok()) {
    Fail(raw, req, nullptr, parsed.status());
    Outcome("invalid", "", parsed.status(), t0);
    return;
  }
  const Command& cmd = parsed.value();
  if (cmd.node && *cmd.node != opt_.node) {
    Status status(ErrorCode::kWrongNode, "command is for node '" + *cmd.node + "' but this server serves '" +
                                             opt_.node + "'");
    Fail(raw, req, OpName(cmd.op), status);
    Outcome(OpName(cmd.op), cmd.name, status, t0);
    return;
  }
  switch (cmd.op) {
    case Op::kCreate: HandleCreate(raw, cmd); break;
    case Op::kGet: HandleRefcount(raw, cmd, +1); break;
    case Op::kDelete: HandleRefcount(raw, cmd, -1); break;
  }
}

Status Server::Impl::MissingStatus(const std::string& name) {
  Drain();
  auto fields = redis_->Command({"HMGET", opt_.keys.Tensor(name), "node", "state", "owner"});
  if (!fields.ok()) return fields.status();
  auto entry = tensors_.find(name);
  if (fields->elements.size() == 3 && !fields->elements[0].is_nil()) {
    const std::string& node = fields->elements[0].str;
    const std::string& state = fields->elements[1].str;
    if (node != opt_.node) {
      return Status(ErrorCode::kWrongNode, "tensor '" + name + "' lives on node '" + node +
                                               "', not '" + opt_.node + "'");
    }
    if (state != "ready") {
      return Status(ErrorCode::kNotReady, "tensor '" + name + "' is " + (state.empty() ? "not ready" : state));
    }
    return Status(ErrorCode::kUnavailable, "tensor '" + name + "' belongs to server instance '" +
                                               fields->elements[2].str + "', which is gone");
  }
  if (entry != tensors_.end()) {
    // Our tensor's hash was removed by hand: nobody can reach the memory any more, but a process
    // may still have it mapped, so it is kept until shutdown.
    Log(LogLevel::kWarn, "the hash of tensor '" + name + "' was removed underneath the server");
    orphans_.push_back(Forget(entry));
  }
  return Status(ErrorCode::kNotFound, "no tensor named '" + name + "'");
}

void Server::Impl::HandleCreate(const std::string& raw, const Command& cmd) {
  auto t0 = Clock::now();
  auto fail = [&](const Status& status) {
    Fail(raw, cmd.req, "create", status);
    Outcome("create", cmd.name, status, t0);
  };
  if (auto known = tensors_.find(cmd.name); known != tensors_.end()) {
    // Usually a plain "already exists"; if the hash was removed by hand, the name is free again.
    Status missing = MissingStatus(cmd.name);
    if (missing.code() != ErrorCode::kNotFound) {
      return fail(Status(ErrorCode::kAlreadyExists, "tensor '" + cmd.name + "' already exists"));
    }
  }
  auto worker = workers_.find(cmd.device);
  if (worker == workers_.end()) {
    return fail(Status(ErrorCode::kNoDevice, "device " + DeviceName(cmd.device) +
                                                 " is not served here (devices: " + devices_text_ + ")"));
  }
  TensorRecord record;
  record.name = cmd.name;
  record.dtype = cmd.dtype;
  record.shape = cmd.shape;
  record.device = cmd.device;
  record.bytes = cmd.bytes;
  record.refcount = 1;
  record.state = "ready";
  record.ctime_ms = NowMs();
  record.node = opt_.node;
  record.owner = instance_;
  record.lifetime = cmd.lifetime;
  record.creator_pid = cmd.pid;
  if (cmd.lifetime == Lifetime::kStack) {
    record.owner_pid = cmd.owner_pid != 0 ? cmd.owner_pid : cmd.pid;
    record.owner_start = cmd.owner_start != 0 ? cmd.owner_start : ProcessStartTime(record.owner_pid);
    if (!ProcessAlive(record.owner_pid, record.owner_start)) {
      return fail(Status(ErrorCode::kInvalidArgument,
                         "owner process " + std::to_string(record.owner_pid) +
                             " of stack tensor is not running"));
    }
  }
  Allocator* allocator = allocators_.at(cmd.device).get();
  Allocation allocation;
  Status allocated = worker->second->Call([&](DeviceContext& ctx) -> Status {
    MCD_ASSIGN_OR_RETURN(allocation, allocator->Allocate(ctx, cmd.bytes, cmd.zero_init));
    return Status::Ok();
  });
  if (!allocated.ok()) return fail(allocated);
  if (allocator->RefillDue()) {
    // Replaces the block this create may have taken from the stock while the commit travels.
    (void)worker->second->Post([allocator](DeviceContext& ctx) {
      allocator->Refill(ctx);
      return Status::Ok();
    });
  }
  record.ipc_kind = allocation.ipc_kind;
  record.ipc_handle = allocation.ipc_handle;
  record.offset = allocation.offset;

  Entry entry{record, allocation, RecordJsonHead(record)};
  std::vector<std::string> fields;
  for (auto& [field, value] : HashFields(record)) {
    fields.push_back(field);
    fields.push_back(std::move(value));
  }
  std::string reply = ReplyHead(cmd.req, Op::kCreate) + entry.json_head + R"(,"refcount":1}})";
  batch_.push_back(Commit(
      raw, cmd.req, cmd.name, reply, Pre::kAbsent, "hset", fields,
      [this, raw, req = cmd.req, name = cmd.name, device = cmd.device, bytes = cmd.bytes, t0,
       entry = std::move(entry)](Result<CommitResult> committed) mutable {
        if (committed.ok() && committed->kind == CommitResult::kOk) {
          Keep(std::move(entry));
          Outcome("create", name, Status::Ok(), t0,
                  "device=" + DeviceName(device) + " bytes=" + std::to_string(bytes));
          return;
        }
        if (!committed.ok() && !redis_->connected()) {
          // The connection broke: the script may or may not have run. Decided after reconnecting.
          unsettled_.push_back(std::move(entry));
          return Outcome("create", name, committed.status(), t0, "outcome=unknown");
        }
        Status freed = FreeEntry(entry);
        if (!freed.ok()) Log(LogLevel::kError, "free after failed create: " + freed.ToString());
        if (!committed.ok()) {
          Refused(raw, req, "create", committed.status());
          return Outcome("create", name, committed.status(), t0);
        }
        if (committed->kind == CommitResult::kDup) {
          return Outcome("create", name, Status::Ok(), t0, "repeated_req=" + req);
        }
        Status exists(ErrorCode::kAlreadyExists, "tensor '" + name + "' already exists (made by another server)");
        AnswerNow(raw, req, "create", exists);
        Outcome("create", name, exists, t0);
      }));
}

void Server::Impl::HandleRefcount(const std::string& raw, const Command& cmd, int delta) {
  // get: refcount+1; delete: refcount-1, and at 0 the hash goes (in the script) before the memory.
  auto t0 = Clock::now();
  const char* op = OpName(cmd.op);
  auto it = tensors_.find(cmd.name);
  Status status = it == tensors_.end() ? MissingStatus(cmd.name) : Status::Ok();
  if (!status.ok()) {
    Fail(raw, cmd.req, op, status);
    return Outcome(op, cmd.name, status, t0);
  }
  std::string head = ReplyHead(cmd.req, cmd.op) + it->second.json_head + R"(,"refcount":)";
  batch_.push_back(Commit(
      raw, cmd.req, cmd.name, head, Pre::kMine, "incr",
      {std::to_string(delta), delta > 0 ? "}}" : R"(},"freed":false})", R"(},"freed":true})"},
      [this, raw, req = cmd.req, name = cmd.name, op, t0](Result<CommitResult> committed) {
        if (!committed.ok()) {
          Refused(raw, req, op, committed.status());
          return Outcome(op, name, committed.status(), t0);
        }
        if (committed->kind == CommitResult::kDup) {
          return Outcome(op, name, Status::Ok(), t0, "repeated_req=" + req);
        }
        if (committed->kind == CommitResult::kOk) {
          if (committed->refcount > 0) {
            return Outcome(op, name, Status::Ok(), t0, "refcount=" + std::to_string(committed->refcount));
          }
          auto found = tensors_.find(name);
          if (found == tensors_.end()) return Outcome(op, name, Status::Ok(), t0, "freed=0");
          Entry entry = Forget(found);
          // The reply is out and the hash gone: the worker frees the memory while this thread
          // goes on with the next commands.
          FreeEntry(entry, [this, op, name, t0, bytes = entry.record.bytes](const Status& freed) {
            Outcome(op, name, freed, t0, "freed=" + std::to_string(bytes));
          });
          return;
        }
        // The hash is gone or not ready (changed by hand): say which.
        Status missing = MissingStatus(name);
        AnswerNow(raw, req, op, missing);
        Outcome(op, name, missing, t0);
      }));
}

Status Server::Impl::FreeEntry(const Entry& entry, std::function<void(const Status&)> then) {
  auto worker = workers_.find(entry.record.device);
  auto allocator = allocators_.find(entry.record.device);
  if (worker == workers_.end() || allocator == allocators_.end()) {
    Status missing(ErrorCode::kInternal, "no worker for device " + DeviceName(entry.record.device));
    if (then) then(missing);
    return missing;
  }
  auto job = [a = allocator->second.get(), allocation = entry.allocation, then](DeviceContext& ctx) {
    Status freed = a->Free(ctx, allocation);
    if (then) then(freed);
    return freed;
  };
  if (!then) return worker->second->Call(job);
  Status posted = worker->second->Post(job);
  if (!posted.ok()) then(posted);
  return posted;
}

void Server::Impl::Keep(Entry entry) {
  std::string name = entry.record.name;
  if (entry.record.lifetime == Lifetime::kStack) {
    stack_names_.insert(name);
  } else {
    stack_names_.erase(name);
  }
  tensors_[name] = std::move(entry);
  tensor_count_ = tensors_.size();
}

Server::Impl::Entry Server::Impl::Forget(std::unordered_map<std::string, Entry>::iterator it) {
  Entry entry = std::move(it->second);
  stack_names_.erase(it->first);
  tensors_.erase(it);
  tensor_count_ = tensors_.size();
  return entry;
}

void Server::Impl::Housekeeping() {
  auto now = Clock::now();
  if (now - last_housekeeping_ < std::chrono::seconds(1)) return;
  last_housekeeping_ = now;
  ReapStackTensors();
  TrimReadyStock();
}

void Server::Impl::ReapStackTensors() {
  Drain();  // a delete on its way may already have removed one
  std::vector<std::string> dead;
  for (const std::string& name : stack_names_) {
    const TensorRecord& r = tensors_.at(name).record;
    if (!ProcessAlive(r.owner_pid, r.owner_start)) dead.push_back(name);
  }
  for (const std::string& name : dead) {
    auto t0 = Clock::now();
    auto committed = CommitNow(Commit("", "", name, "", Pre::kNone, "del", {}));
    if (!committed.ok()) {
      Log(LogLevel::kWarn, "reclaim of '" + name + "': " + committed.status().ToString());
      continue;
    }
    auto found = tensors_.find(name);
    if (found == tensors_.end()) continue;
    Entry entry = Forget(found);
    Status freed = FreeEntry(entry);
    Outcome("reclaim", name, freed, t0,
            "owner_pid=" + std::to_string(entry.record.owner_pid) +
                " refcount=" + std::to_string(entry.record.refcount));
  }
}

void Server::Impl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  RequestStop();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (redis_) Drain();
  // Its clients see the connection close at once, rather than wait out their timeout.
  command_socket_.reset();
  socket_in_.clear();
  // Hashes first (pipelined: nobody can get a tensor any more), then the memory, one worker job
  // per device rather than one per tensor.
  if (redis_ && redis_->connected()) {
    size_t pending = 0;
    auto drain = [&] {
      for (; pending > 0; --pending) (void)redis_->ReadReply();
    };
    // Only those still this instance's own: another instance that took the node over may have
    // made tensors of the same names since.
    for (const auto& [name, entry] : tensors_) {
      if (!redis_->Append({"EVAL", kDeleteIfScript, "1", opt_.keys.Tensor(name), "owner", instance_}).ok()) break;
      if (++pending == 1000) drain();
    }
    drain();
  }
  std::map<int, std::vector<const Entry*>> by_device;
  for (const auto& [name, entry] : tensors_) by_device[entry.record.device].push_back(&entry);
  for (const Entry& entry : orphans_) by_device[entry.record.device].push_back(&entry);
  for (const Entry& entry : unsettled_) by_device[entry.record.device].push_back(&entry);
  size_t freed = 0;
  for (const auto& [device, entries] : by_device) {
    auto worker = workers_.find(device);
    auto allocator = allocators_.find(device);
    if (worker == workers_.end() || allocator == allocators_.end()) continue;
    (void)worker->second->Call([&](DeviceContext& ctx) {
      for (const Entry* entry : entries) {
        Status s = allocator->second->Free(ctx, entry->allocation);
        if (s.ok()) {
          ++freed;
        } else {
          Log(LogLevel::kError, "free of '" + entry->record.name + "': " + s.ToString());
        }
      }
      return Status::Ok();
    });
  }
  size_t total = tensors_.size() + orphans_.size() + unsettled_.size();
  tensors_.clear();
  orphans_.clear();
  unsettled_.clear();
  if (owns_heartbeat_ && redis_ && redis_->connected()) {
    (void)redis_->Command({"EVAL", kDeleteIfScript, "1", opt_.keys.Server(opt_.node), "instance", instance_});
  }
  pool_server_.reset();
  for (auto& [device, worker] : workers_) worker->Stop();
  if (owns_heartbeat_) {
    Log(LogLevel::kInfo, "stopped: freed " + std::to_string(freed) + " of " +
                             std::to_string(total) + " tensor(s)");
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  Status started = impl->Start();
  if (!started.ok()) return started;
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Status Server::Run() { return impl_->Run(); }
void Server::RequestStop() { impl_->RequestStop(); }
void Server::Shutdown() { impl_->Shutdown(); }
const std::string& Server::instance_id() const { return impl_->instance_; }
const std::string& Server::node() const { return impl_->opt_.node; }

}  // namespace mcd
