// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The server's lifecycle: Start (devices, Redis, the node's claim, sockets, startup clean-up),
// the serving loop, the reconnect after a lost Redis, and Shutdown. The parts it drives:
//   intake.h          requests from the node's queue and the command socket; the Waker
//   queue_relay.h     the shared queue's commands moved into the node's queue
//   applier.h         each command applied through the allocators
//   reaper.h          what dead processes held: stack tensors, references
//   resettle.h        what a lost Redis connection left open, settled after the reconnect
//   responder.h       replies on the request's route, and Redis's refusals
//   commit_pipeline.h the serving connection's one owner: every change committed to Redis by
//                     one script call, pipelined; plain commands after the replies due
//   tensor_table.h    the tensors held, by name
//   device_set.h      workers, allocators and the pool socket of each device
//   heartbeat.h       the node's claim and heartbeat
//   stop_signal.h     the server's stop, seen by the serving loop and the heartbeat thread
//   node_copy.h       copies between nodes (over copy_service.h, UCX)
//   startup.h         the clean-up after dead instances
//   server_options.h  each module's options, filled from ServerOptions
#include "memcuda/server.h"

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/log.h"
#include "common/process.h"
#include "common/runtime_dir.h"
#include "redis/lua_scripts.h"
#include "server/applier.h"
#include "server/commit_pipeline.h"
#include "server/device_set.h"
#include "server/heartbeat.h"
#include "server/intake.h"
#include "server/node_copy.h"
#include "server/outcome_log.h"
#include "server/queue_relay.h"
#include "server/reaper.h"
#include "server/replies.h"
#include "server/resettle.h"
#include "server/server_options.h"
#include "server/startup.h"
#include "server/stop_signal.h"
#include "server/tensor_table.h"

namespace mcd {

using Clock = std::chrono::steady_clock;

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
  // After connecting (and reconnecting): the commit script.
  Status Prepare();
  bool stopping() const { return stop_.requested(); }
  // The path given (--pool-socket, --command-socket), or one of this instance in the runtime
  // folder: <kind>-<node>-<instance>.sock.
  Result<std::string> SocketPath(const std::string& given, const char* kind) const;
  // Who may use the server's sockets: its user, and the members of --pool-group.
  Result<PeerPolicy> Peers() const;
  Status OpenSockets();
  // The take failed: Redis refused it (pause) or the connection is gone (reconnect with backoff).
  void TakeFailed(const Status& status, int& backoff_ms);
  // After a reconnect, before serving again: the script loaded (Prepare) and what the lost
  // connection left open settled (resettle.h). False while Redis refuses (loading).
  bool Resettled();
  // Once a second at most, from the serving loop: the reaper and the ready stock's trim.
  void Housekeeping();
  // Starts the copy service (or says why copies are off) and the copier over it.
  void StartNodeCopies();
  // Deletes the hashes still this instance's own (pipelined), then frees every allocation.
  size_t DeleteAndFreeAll();

  std::string shm_prefix_;
  std::unique_ptr<DeviceSet> devices_;
  TensorTable table_;
  OutcomeLog outcomes_;
  StopSignal stop_;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::unique_ptr<Waker> waker_;  // any thread: the copy service's, the heartbeat's, the main one
  std::unique_ptr<Intake> intake_;
  std::unique_ptr<QueueRelay> relay_;
  std::unique_ptr<CopyService> copies_;
  std::unique_ptr<NodeCopier> copier_;
  std::unique_ptr<CommitPipeline> pipeline_;  // the serving connection's owner
  std::unique_ptr<CommandApplier> applier_;
  std::unique_ptr<Reaper> reaper_;
  std::unique_ptr<Resettle> resettler_;
  Clock::time_point last_housekeeping_{};
  bool shut_down_ = false;
  bool resettle_ = false;  // reconnected: Resettled() is due
  int resettle_waits_ = 0;
};

Status Server::Impl::Start() {
  if (opt_.node.empty()) {
    const char* env = std::getenv("MCD_NODE");
    opt_.node = env != nullptr && env[0] != '\0' ? env : HostName();
  }
  if (opt_.heartbeat_ttl_s < 1 || opt_.heartbeat_ttl_s > kMaxHeartbeatTtlS) {
    return Status(ErrorCode::kInvalidArgument,
                  "the heartbeat TTL must be 1 to " + std::to_string(kMaxHeartbeatTtlS) + " s");
  }
  SetLogLevel(static_cast<LogLevel>(std::clamp(opt_.log_level, 0, 3)));
  SetLogTag("mcd-serve");
  MCD_ASSIGN_OR_RETURN(instance_, RandomHex(8));
  // Two Redis servers on one host may each have a node of the same name: keep their objects apart.
  char url_tag[16];
  std::snprintf(url_tag, sizeof(url_tag), "%08zx",
                std::hash<std::string>{}(opt_.redis_url.Redacted()) & 0xffffffffu);
  shm_prefix_ = ShmPrefix(opt_.keys.prefix, opt_.node + "-" + url_tag);

  // Host memory is always served, to the same peers as the sockets; GPUs as asked (all by
  // default).
  DeviceSetOptions device_opt = DeviceSetOptionsOf(opt_);
  MCD_ASSIGN_OR_RETURN(PeerPolicy peers, Peers());
  device_opt.shm_group = peers.group;
  MCD_ASSIGN_OR_RETURN(devices_, DeviceSet::Open(device_opt, shm_prefix_ + instance_ + "-"));
  heartbeat_ = std::make_unique<Heartbeat>(HeartbeatOptionsOf(opt_), instance_, stop_, *devices_,
                                           table_, outcomes_);
  RedisOptions ropt;
  ropt.command_timeout_ms = 10000;
  MCD_ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> redis,
                       RedisConnection::Connect(opt_.redis_url, ropt));
  MCD_RETURN_IF_ERROR(CheckRedisVersion(*redis, opt_.redis_url.Redacted()));
  pipeline_ = std::make_unique<CommitPipeline>(std::move(redis), CommitOptionsOf(opt_), instance_);
  waker_ = std::make_unique<Waker>(opt_.redis_url, opt_.keys.NodeQueue(opt_.node));
  intake_ = std::make_unique<Intake>(opt_.keys.NodeQueue(opt_.node),
                                     opt_.keys.Processing(opt_.node), *waker_);
  StartNodeCopies();
  applier_ =
      std::make_unique<CommandApplier>(ApplierOptions{opt_.keys, opt_.node, instance_}, *pipeline_,
                                       *intake_, table_, *devices_, outcomes_, *copier_);
  reaper_ = std::make_unique<Reaper>(ReaperOptionsOf(opt_), instance_, *pipeline_, table_,
                                     *devices_, outcomes_);
  resettler_ =
      std::make_unique<Resettle>(ResettleOptionsOf(opt_), instance_, *pipeline_, table_, *devices_,
                                 *heartbeat_, *applier_, [this] { RequestStop(); });
  MCD_RETURN_IF_ERROR(Prepare());
  MCD_RETURN_IF_ERROR(OpenSockets());
  WarnIfRedisEvicts(*pipeline_->Drained());
  // The runtime folder, where the default sockets are, when it is this user's alone.
  std::string socket_dir = CheckOwnFolder(RuntimeDir()).ok() ? RuntimeDir() : "";
  MCD_RETURN_IF_ERROR(ReconcileNode(*pipeline_->Drained(),
                                    ReconcileOptions{opt_.keys, opt_.node, opt_.event_history},
                                    instance_, shm_prefix_, socket_dir));
  MCD_RETURN_IF_ERROR(heartbeat_->MarkSettled(*pipeline_->Drained()));
  relay_ =
      std::make_unique<QueueRelay>(opt_.redis_url, opt_.keys.queue, opt_.keys.NodeQueue(opt_.node));
  relay_->Start();
  // Wakes the serving connection out of its BLMOVE so that Run() returns at once.
  heartbeat_->Start([this] { (void)waker_->Wake(); });
  Log(LogLevel::kInfo, "serving node '" + opt_.node + "' instance " + instance_ + " on " +
                           opt_.redis_url.Redacted() + ", queue '" +
                           opt_.keys.NodeQueue(opt_.node) + "' (and '" + opt_.keys.queue +
                           "', relayed), devices " + devices_->devices_text());
  return Status::Ok();
}

void Server::Impl::StartNodeCopies() {
  std::string off = "copies between nodes are off on this server (--no-node-copies)";
  if (opt_.node_copies) {
    // A read asked by another server wakes the serving loop out of its blocking take.
    auto started = CopyService::Start([this] { (void)waker_->Wake(); });
    if (started.ok()) {
      copies_ = std::move(started).value();
    } else {
      off = started.status().message();
    }
  }
  copier_ = std::make_unique<NodeCopier>(NodeCopierOptionsOf(opt_), *pipeline_, table_, *devices_,
                                         copies_.get(), off);
  if (!copies_) {
    Log(LogLevel::kInfo, "copies between nodes: off (" + off + ")");
    heartbeat_->set_node_copies("", "", "off");
    return;
  }
  // Host tensors always go in place; GPU tensors as the UCX and --stage-gpu-copies decide.
  bool gpus = devices_->gpu_count() > 0;
  std::string how = " (host memory only)";
  if (gpus && !copies_->reads_gpu_memory()) {
    how = ", which cannot read GPU memory: GPU tensors staged in pinned host memory";
  } else if (gpus) {
    how = ", which reads and writes GPU memory itself";
    if (!copier_->gpu_direct())
      how += "; GPU tensors staged in pinned host memory (--stage-gpu-copies)";
  }
  auto asked = CopyPieceFromEnvironment();
  if (!asked.ok()) Log(LogLevel::kWarn, asked.status().message() + ": ignored");
  uint64_t piece = CopyPieceBytes();
  std::string pieces = piece % (1u << 20) == 0 ? std::to_string(piece >> 20) + " MiB"
                                               : std::to_string(piece) + " bytes";
  Log(LogLevel::kInfo, "copies between nodes: over UCX " + copies_->version() + how +
                           "; fetched in pieces of " + pieces);
  heartbeat_->set_node_copies(copies_->address_hex(), copies_->version(),
                              !gpus || copier_->gpu_direct() ? "in_place" : "staged");
}

Status Server::Impl::Prepare() { return pipeline_->LoadScript(); }

Status Server::Impl::OpenSockets() {
  // Claimed before the reconciliation, which removes what other instances of the node left, and
  // before binding the pool socket, whose path (--pool-socket) a live server may be using.
  bool pools = opt_.allocator == "pool" && devices_->gpu_count() > 0;
  std::string pool_socket;
  if (pools) {
    MCD_ASSIGN_OR_RETURN(pool_socket, SocketPath(opt_.pool_socket, "pool"));
  }
  heartbeat_->set_pool_socket(pool_socket);
  MCD_RETURN_IF_ERROR(heartbeat_->Claim(*pipeline_->Drained()));
  if (pools) {
    MCD_ASSIGN_OR_RETURN(PeerPolicy policy, Peers());
    MCD_RETURN_IF_ERROR(devices_->StartPoolSocket(pool_socket, policy));
  }
  if (opt_.command_socket == "none") return Status::Ok();
  MCD_ASSIGN_OR_RETURN(PeerPolicy policy, Peers());
  MCD_ASSIGN_OR_RETURN(std::string command_socket, SocketPath(opt_.command_socket, "cmd"));
  MCD_RETURN_IF_ERROR(intake_->ListenOnSocket(command_socket, policy));
  // The claim's heartbeat could not name the socket yet, and a client that reads a heartbeat
  // without one sends through the queue for as long as it runs: name it now, before the server
  // says it serves, not when the heartbeat thread first gets to it.
  heartbeat_->set_command_socket(intake_->socket_path());
  return heartbeat_->Claim(*pipeline_->Drained());
}

Result<std::string> Server::Impl::SocketPath(const std::string& given, const char* kind) const {
  if (!given.empty()) return given;
  MCD_ASSIGN_OR_RETURN(std::string dir, OwnRuntimeDir());
  return dir + "/" + SocketFileName(kind, opt_.node, instance_);
}

Result<PeerPolicy> Server::Impl::Peers() const {
  PeerPolicy policy;
  policy.uid = geteuid();
  if (!opt_.pool_group.empty()) {
    group* g = getgrnam(opt_.pool_group.c_str());
    if (g == nullptr)
      return Status(ErrorCode::kInvalidArgument, "no group named '" + opt_.pool_group + "'");
    policy.group = g->gr_gid;
  }
  return policy;
}

// The serving loop. Busy (commands were waiting): the take sent ahead of the last batch has the
// next ones. Otherwise a blocking wait for the next command (an idle server sleeps in BLMOVE: no
// polling), which costs a lone command no extra round trip.
Status Server::Impl::Run() {
  MCD_RETURN_IF_ERROR(applier_->ResumeUnfinished());
  int backoff_ms = 100;
  bool busy = false;
  while (!stopping()) {
    if (!busy && !resettle_ && heartbeat_->settled_lost()) resettle_ = true;
    if (!Resettled()) continue;
    Housekeeping();
    copier_->ServeReads();
    applier_->FinishCopies();
    Result<RedisValue> taken = RedisValue{};
    if (busy) {
      taken = pipeline_->TakeReply();
      if (taken.ok()) intake_->TakeAccepted();
      busy = taken.ok() && !taken->elements.empty();
    }
    intake_->CollectSocket();
    if (!busy && taken.ok() && !intake_->has_socket_lines()) {
      // Before sleeping: the commits' results are read and the memory of the tensors the last
      // batch deleted is freed; what their continuations queued (the list of a set whose last
      // member went) is sent too.
      pipeline_->Drain();
      applier_->DropEmptiedSets();
      if (pipeline_->has_queued()) {
        pipeline_->Flush();
        pipeline_->Drain();
      }
      if (applier_->ResumeDue()) {
        applier_->ResumeNow();
        continue;
      }
      auto t0 = Clock::now();
      taken = intake_->WaitForCommand(*pipeline_->Drained());
      // An answer faster than a context switch means the command was already waiting.
      if (taken.ok() && !taken->is_nil()) busy = Clock::now() - t0 < std::chrono::microseconds(60);
    }
    if (!taken.ok()) {
      pipeline_->Drain();  // on this connection, before any reconnect: a lost one fails them all
      busy = false;
      TakeFailed(taken.status(), backoff_ms);
      continue;
    }
    backoff_ms = 100;
    bool from_socket = intake_->has_socket_lines();
    std::vector<Request> requests = intake_->Requests(std::move(taken).value());
    if (requests.empty()) {
      busy = false;  // a take sent ahead that brought a wake marker alone: no take is out now
      // Nothing came (a take's timeout, a wake marker): the next wait blocks at once rather
      // than spin for a socket client that has gone quiet.
      intake_->set_last_from_socket(false);
      continue;
    }
    // While commands come on the socket, the list is looked at with each batch, without blocking.
    busy = busy || from_socket;
    if (busy) pipeline_->SendTake();
    applier_->ProcessBatch(std::move(requests));
  }
  applier_->StopCopies();
  pipeline_->Drain();
  std::string lost = heartbeat_->node_lost();
  if (!lost.empty()) return Status(ErrorCode::kAlreadyExists, lost);
  return Status::Ok();
}

void Server::Impl::TakeFailed(const Status& status, int& backoff_ms) {
  ErrorCode code = status.code();
  // Redis answered, with an error (OOM under maxmemory, a missing permission): the same error a
  // commit it refused gives, whichever of the two commands met it first.
  bool refused =
      (code == ErrorCode::kUnexpectedReply || RefusedByRedis(status)) && pipeline_->connected();
  Status why = refused
                   ? Status(code, "Redis refused the server's take of commands (" +
                                      status.message() + "); nothing changed")
                   : Status(ErrorCode::kUnavailable, "the server cannot reach Redis (" +
                                                         status.message() + "); nothing changed");
  // Commands on the socket are not kept waiting for Redis: their clients hear why now.
  intake_->RefuseSocketLines(why);
  if (stopping()) return;
  if (refused) {
    intake_->PauseAfterRefusedTake(status,
                                   [this] { return stopping(); });  // reconnecting would not help
    return;
  }
  Log(LogLevel::kWarn, "Redis: " + status.ToString() + "; reconnecting");
  std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
  backoff_ms = std::min(backoff_ms * 2, 5000);
  if (pipeline_->Reconnect().ok()) {
    Log(LogLevel::kInfo, "Redis connection restored");
    backoff_ms = 100;
    resettle_ = true;
  }
}

bool Server::Impl::Resettled() {
  if (!resettle_) return true;
  // A Redis that restarts answers LOADING until its data is back: nothing is served (socket
  // clients hear why) until the server has settled what the lost connection left open.
  // Prepare again on every try: a connection lost meanwhile is a new one, with another id.
  Status settled = pipeline_->connected() ? Status::Ok() : pipeline_->Reconnect();
  if (settled.ok()) settled = Prepare();
  if (settled.ok()) settled = resettler_->Settle();
  if (settled.ok() && pipeline_->connected()) {
    resettle_ = false;
    resettle_waits_ = 0;
    return true;
  }
  if (resettle_waits_++ % 50 == 0) {
    Log(LogLevel::kWarn, "after reconnecting: " + settled.ToString() + "; trying again");
  }
  intake_->CollectSocket();
  intake_->RefuseSocketLines(
      Status(ErrorCode::kTryAgain, "the server is settling after Redis came back (" +
                                       settled.message() + "): try again in a moment"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return false;
}

void Server::Impl::Housekeeping() {
  auto now = Clock::now();
  if (now - last_housekeeping_ < std::chrono::seconds(1)) return;
  last_housekeeping_ = now;
  reaper_->ReapStackTensors();
  reaper_->ReapDeadFillers();
  reaper_->ReapDeadHolders();
  devices_->TrimReadyStock();
}

void Server::Impl::RequestStop() { stop_.Request(); }

void Server::Impl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (relay_) relay_->Stop();
  if (heartbeat_) heartbeat_->Stop();
  if (pipeline_) pipeline_->Drain();
  if (intake_) intake_->CloseSocket();
  if (copier_) copier_->StopServing();  // no staged answer calls the service past here
  copies_.reset();                      // its thread stops: no read is served past here
  if (intake_ && pipeline_) intake_->RemoveMarkersAtStop(*pipeline_->Drained());
  size_t total = table_.held();
  size_t freed = DeleteAndFreeAll();
  if (heartbeat_ && pipeline_) heartbeat_->Remove(*pipeline_->Drained());
  if (devices_) devices_->Stop();
  if (heartbeat_ && heartbeat_->owned()) {
    Log(LogLevel::kInfo,
        "stopped: freed " + std::to_string(freed) + " of " + std::to_string(total) + " tensor(s)");
  }
}

size_t Server::Impl::DeleteAndFreeAll() {
  // Hashes first (pipelined: nobody can get a tensor any more), then the memory, one worker job
  // per device rather than one per tensor.
  if (pipeline_ && pipeline_->connected()) {
    ConnectionLease lease = pipeline_->Drained();
    RedisConnection& redis = *lease;
    size_t pending = 0;
    auto drain = [&] {
      for (; pending > 0; --pending) (void)redis.ReadReply();
    };
    // Only those still this instance's own: another instance that took the node over may have
    // made tensors of the same names since.
    CommitEvent event{"reclaim", getpid(), "server_stopped"};
    for (const auto& [name, entry] : table_.tensors()) {
      auto command = DeleteIfCommand(pipeline_->events(), opt_.keys.Tensor(name), "owner",
                                     instance_, event, name, &opt_.keys, entry.record.set);
      if (!redis.Append(std::vector<std::string_view>(command.begin(), command.end())).ok()) break;
      if (++pending == 1000) drain();
    }
    drain();
  }
  size_t freed = devices_ ? devices_->FreeAll(table_.HeldByDevice()) : 0;
  table_.Clear();
  return freed;
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

bool ServerLogsToJournal() { return StderrIsJournal(); }

void ServerLog(int level, const std::string& message) {
  SetLogTag("mcd-serve");
  Log(static_cast<LogLevel>(std::clamp(level, 0, 3)), message);
}

}  // namespace mcd
