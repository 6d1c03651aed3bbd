// The client facade: Client's methods over its parts (client.h). The parts:
//   transport.h         commands to the server (command socket or lifecycle list) and replies
//   reference_script.h  get and release in one Redis script call, without the server
//   server_view.h       the node's heartbeat, and what a first Get prepares from it
//   mapping_registry.h  this process's mappings and per-device workers
//   c_api.cpp           the C ABI (memcuda.h)
#include "memcuda/client.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <unordered_map>

#include "client/mapping_registry.h"
#include "client/records.h"
#include "client/reference_script.h"
#include "client/server_view.h"
#include "client/transport.h"
#include "common/process.h"
#include "gpu/cuda_check.h"
#include "redis/lua_scripts.h"

namespace mcd {

bool CommandsViaQueue() {
  const char* via_queue = std::getenv("MCD_VIA_QUEUE");
  return via_queue != nullptr && *via_queue != '\0' && std::strcmp(via_queue, "0") != 0;
}

namespace {

// Pauses between tries within a timeout: 20 ms, doubling up to 200 ms. Wait() sleeps and says
// whether there is time for another try.
class Backoff {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Backoff(int timeout_ms) : deadline_(Clock::now() + std::chrono::milliseconds(timeout_ms)) {}
  bool Wait() {
    if (Clock::now() + std::chrono::milliseconds(pause_ms_) > deadline_) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms_));
    pause_ms_ = std::min(pause_ms_ * 2, 200);
    return true;
  }

 private:
  Clock::time_point deadline_;
  int pause_ms_ = 20;
};

}  // namespace

class Client::Impl {
 public:
  explicit Impl(ClientOptions options) : opt_(std::move(options)) {
    if (CommandsViaQueue()) opt_.command_socket = false;
  }

  // Connects, trying again within the timeout while Redis drops the connection it accepted or
  // says it is loading or failing over: a tool started while Redis loads waits for it. A Redis
  // that is not there (connection refused, no socket file) is unavailable at once: waiting
  // would only turn a wrong address into a "try again" after the whole timeout.
  Status Connect() {
    if (opt_.node.empty()) {
      const char* env = std::getenv("MCD_NODE");
      node_given_ = env != nullptr && env[0] != '\0';
      opt_.node = node_given_ ? env : HostName();
    } else {
      node_given_ = true;
    }
    MCD_ASSIGN_OR_RETURN(holder_, ResolveHolder(opt_.holder_pid));
    Backoff backoff(opt_.timeout_ms);
    for (;;) {
      Status connected = ConnectOnce();
      bool away = connected.code() == ErrorCode::kTryAgain ||
                  (connected.code() == ErrorCode::kUnavailable && redis_ && !redis_->connected());
      // A Redis back from a restart or a load has no live heartbeat until the server writes it
      // again, a moment after Redis answers: "no server" then is waited through too.
      bool heartbeat_due = connected.code() == ErrorCode::kUnavailable && RedisWasAwayLately();
      if (connected.ok() || (!away && !heartbeat_due)) return connected;
      if (away) redis_away_ms_ = SteadyMs();
      if (!backoff.Wait()) {
        if (heartbeat_due) return connected;
        if (connected.code() == ErrorCode::kTryAgain) return connected;
        return Status(ErrorCode::kTryAgain,
                      "Redis did not answer within " + std::to_string(opt_.timeout_ms) +
                          " ms (not running, or restarting): try again once it is up (" +
                          connected.message() + ")");
      }
    }
  }

  Status ConnectOnce() {
    // One socket timeout for everything, with room for a request's BLPOP (which waits
    // timeout_ms itself): no timeout switching on every request.
    RedisOptions ropt;
    ropt.command_timeout_ms = opt_.timeout_ms + 2000;
    script_.reset();  // the parts go before the connection they use
    transport_.reset();
    redis_.reset();
    MCD_ASSIGN_OR_RETURN(redis_, RedisConnection::Connect(opt_.redis_url, ropt));
    server_ = std::make_unique<ServerView>(*redis_, opt_);
    if (!opt_.require_server) {
      MakeParts("");
      return Status::Ok();
    }
    // The heartbeat check and the reference script's loading share one round trip, so that a
    // fresh process's first Get is a single EVALSHA.
    MCD_RETURN_IF_ERROR(redis_->Append({"HGETALL", opt_.keys.Server(opt_.node)}));
    MCD_RETURN_IF_ERROR(redis_->Append({"SCRIPT", "LOAD", kRefScript}));
    auto heartbeat = redis_->ReadReply();
    auto sha = redis_->ReadReply();
    if (!heartbeat.ok()) return heartbeat.status();
    // No heartbeat for a node nobody named: look for the only live server before failing (the
    // failure, if it comes, lists the live ones).
    bool none = heartbeat->type == RedisValue::Type::kArray && heartbeat->elements.empty();
    if (none && !node_given_) MCD_RETURN_IF_ERROR(DiscoverNode());
    auto info = node_discovered_ ? server_->Read() : server_->Parse(heartbeat.value());
    if (!info.ok()) return info.status();
    server_->Adopt(std::move(info).value());
    MakeParts(sha.ok() && sha->type == RedisValue::Type::kString ? sha->str : "");
    return server_->Alive();  // a dead server's heartbeat: "no server" at once, not a timeout
  }

  // The parts that build keys from the node, made once it is known (DiscoverNode may change
  // it): a reference filed under a node no server watches would never be given back. `sha`:
  // the reference script's, "" when it is not loaded yet.
  void MakeParts(const std::string& sha) {
    transport_ = std::make_unique<Transport>(*redis_, opt_, *server_);
    script_ = std::make_unique<ReferenceScript>(*redis_, opt_, *transport_, holder_, *server_);
    if (!sha.empty()) script_->set_sha(sha);
  }

  // No node was given and the host name has no server: the only live server on the Redis is
  // the one meant. With none or several, the caller's error lists them.
  Status DiscoverNode() {
    MCD_ASSIGN_OR_RETURN(auto live, ServerView::Live(*redis_, opt_.keys));
    if (live.size() == 1 && !live[0].node.empty()) {
      opt_.node = live[0].node;
      node_discovered_ = true;
    }
    return Status::Ok();
  }

  // Whether this client found Redis away (restarting, loading) within its timeout: a Redis
  // back from that has no live heartbeat until the server writes it again.
  bool RedisWasAwayLately() const {
    return redis_away_ms_ != 0 && SteadyMs() - redis_away_ms_ < opt_.timeout_ms;
  }

  // Runs `op` again while Redis answers that it is loading, busy or failing over (kTryAgain:
  // it did not run), while the connection is lost before any of the op's requests left (it
  // did not run either), and, where `repeatable`, while the connection is lost or refused
  // (Redis restarting), until the timeout. A lost connection that does not come back in time
  // is kTryAgain; one lost with a request of an op that is not repeatable sent and unanswered
  // leaves its outcome unknown; "no server" just after Redis was away is waited through too.
  // A template, not a std::function: it wraps every get and release.
  template <typename Op>
  auto Retrying(const char* what, bool repeatable, Op op) -> decltype(op()) {
    Backoff backoff(opt_.timeout_ms);
    for (;;) {
      // A connection Redis closed since the last request (a restart) is found before the op
      // is sent, and reconnected first (refused: still lost).
      if (!repeatable) redis_->DropIfClosedByPeer();
      Status failed = redis_->connected() ? Status::Ok() : redis_->Reconnect();
      bool tried = failed.ok();
      if (tried) {
        auto result = op();
        if (result.ok()) return result;
        failed = result.status();
      }
      bool lost = !redis_->connected();
      if (lost && tried && !repeatable && redis_->awaiting_reply() &&
          failed.code() != ErrorCode::kTryAgain) {
        return Status(ErrorCode::kUnavailable,
                      std::string("Redis went away during the ") + what +
                          ", which may or may not have taken effect: check with mcd-ls before "
                          "repeating it (" + failed.message() + ")");
      }
      // As at connect: after Redis was away, its heartbeat may be back only a moment later.
      bool heartbeat_due = failed.code() == ErrorCode::kUnavailable && RedisWasAwayLately();
      if (failed.code() != ErrorCode::kTryAgain && !lost && !heartbeat_due) return failed;
      if (failed.code() == ErrorCode::kTryAgain || lost) redis_away_ms_ = SteadyMs();
      if (!backoff.Wait()) {
        if (failed.code() == ErrorCode::kTryAgain || heartbeat_due) return failed;
        return Status(ErrorCode::kTryAgain,
                      "Redis at " + opt_.redis_url.Redacted() + " did not come back within " +
                          std::to_string(opt_.timeout_ms) + " ms (restarting?): try again (" +
                          failed.message() + ")");
      }
    }
  }

  // get: refcount+1 in Redis by one script, no server hop (no memory changes hands).
  // Repeated after a lost connection: at worst this process then holds one more reference,
  // given back when it exits.
  Result<TensorRecord> DirectGet(const std::string& name) {
    if (holder_ && holder_->pid == kInitPid) {
      return Status(ErrorCode::kInvalidArgument,
                    "this client's references would be bound to pid 1 (init), which never "
                    "exits while the server runs, and never be given back: bind them to "
                    "another process or to none (holder_pid kNoHolder), or run the program "
                    "under an init (docker run --init)");
    }
    auto record = Retrying("get", true, [&]() -> Result<TensorRecord> {
      MCD_RETURN_IF_ERROR(server_->EnsureAlive());  // its tensors died with it
      return script_->Get(name);
    });
    if (record.ok()) {
      Saw(name, record->refcount);
      if (taken_epochs_.size() < kSeenMax || taken_epochs_.count(name) != 0)
        taken_epochs_[name].push_back(record->epoch);
    }
    return record;
  }

  // create: the command through the server; the tensor is then one this client tracks (Saw).
  Result<TensorRecord> Create(Command cmd) {
    std::string name = cmd.name;
    auto created = Retrying("create", false, [&]() -> Result<TensorRecord> {
      MCD_RETURN_IF_ERROR(server_->EnsureAlive());  // nobody would take the command
      return transport_->Request(cmd);
    });
    if (created.ok() && seen_refcount_.size() < kSeenMax) seen_refcount_[name] = created->refcount;
    return created;
  }

  // The filled tensor `name` becomes ready (its filler's publish command, through the server).
  Result<TensorRecord> Publish(const std::string& name) {
    Command cmd;
    cmd.op = Op::kPublish;
    cmd.name = name;
    return Retrying("publish", false, [&]() -> Result<TensorRecord> {
      MCD_RETURN_IF_ERROR(server_->EnsureAlive());  // the tensor died with it
      return transport_->Request(cmd);
    });
  }

  // A tensor this client created and could not fill goes again, unpublished. Only a tensor this
  // process is filling is touched, so it is safe whenever the create's outcome is not known; a
  // failure is the original error's to report (the reaper removes it once this process exits).
  void Abandon(const std::string& name) {
    Command cmd;
    cmd.op = Op::kAbandon;
    cmd.name = name;
    (void)Retrying("abandon", false, [&]() -> Result<TensorRecord> {
      MCD_RETURN_IF_ERROR(server_->EnsureAlive());  // the tensor died with it
      return transport_->Request(cmd);
    });
    Saw(name, 0);
  }

  // release: a tensor this client created and whose refcount it last saw at 1 is most likely
  // released for the last time, which only the server can do: its delete command goes to the
  // server at once. Were another process to have taken a reference since, the server's delete
  // gives one back just the same. Any other release runs the reference script, which answers a
  // release that leaves references itself and queues the delete command of the last one.
  //
  // A reference this client took (DirectGet) names the epoch it was taken in, so that one taken
  // before Redis lost the hash does not give back another's (TensorRecord::epoch); the creator's
  // is the one a hash put back keeps, and any other is not known here (kAnyEpoch).
  Result<TensorRecord> Release(const std::string& name) {
    std::string epoch = TakenEpoch(name);
    auto seen = seen_refcount_.find(name);
    bool last = seen != seen_refcount_.end() && seen->second <= 1 &&
                epoch == ReferenceScript::kAnyEpoch;
    Result<TensorRecord> released = Retrying("release", false, [&]() -> Result<TensorRecord> {
      MCD_RETURN_IF_ERROR(server_->EnsureAlive());  // nobody holds its memory any more
      return last ? transport_->Request(DeleteCommand(name, holder_))
                  : script_->Release(name, epoch);
    });
    Saw(name, released.ok() ? released->refcount : 0);  // a failed release: no longer tracked
    return released;
  }

  // The tensors this client created (bounded: past kSeenMax, further ones are not tracked),
  // with the refcount it last saw of each from its own create, get or release; one that drops
  // to 1 gets its next release sent to the server directly (Release), and one at 0 is no
  // longer tracked. Only a hint: any count is right for the server's delete.
  void Saw(const std::string& name, int64_t refcount) {
    auto seen = seen_refcount_.find(name);
    if (seen == seen_refcount_.end()) return;
    if (refcount <= 0) {
      seen_refcount_.erase(seen);
    } else {
      seen->second = refcount;
    }
  }

  // The epoch of the oldest reference to `name` this client took and has not given back, which
  // it stops tracking; kAnyEpoch when it holds none it took.
  std::string TakenEpoch(const std::string& name) {
    auto taken = taken_epochs_.find(name);
    if (taken == taken_epochs_.end()) return ReferenceScript::kAnyEpoch;
    std::string epoch = std::move(taken->second.front());
    taken->second.erase(taken->second.begin());
    if (taken->second.empty()) taken_epochs_.erase(taken);
    return epoch;
  }

  Result<TensorRecord> Stat(const std::string& name) {
    MCD_RETURN_IF_ERROR(ValidateName(name));
    std::vector<std::string_view> argv = {"HMGET"};
    std::string key = opt_.keys.Tensor(name);
    argv.push_back(key);
    for (const std::string& field : TensorFieldNames()) argv.push_back(field);
    return Retrying("read", true, [&]() -> Result<TensorRecord> {
      MCD_ASSIGN_OR_RETURN(RedisValue reply, redis_->Command(argv));
      auto record = RecordFromHmget(name, reply);
      if (record.status().code() == ErrorCode::kNotFound) return server_->Missing(name);
      return record;
    });
  }

  Result<std::vector<TensorRecord>> List(const std::string& glob,
                                         std::vector<std::string>* unreadable, bool holders) {
    return Retrying("listing", true, [&] {
      if (unreadable) unreadable->clear();
      return ListOnce(glob, unreadable, holders);
    });
  }

  Result<std::vector<TensorRecord>> ListOnce(const std::string& glob,
                                             std::vector<std::string>* unreadable, bool holders) {
    // The names first (SCAN, sorted, deduplicated), then their fields with pipelined HMGETs (or,
    // for the holders too, HGETALLs) in windows: while this process parses one window, Redis
    // already answers the next.
    MCD_ASSIGN_OR_RETURN(std::vector<std::string> names, ListNamesOnce(glob));
    const auto& fields = TensorFieldNames();
    std::string fields_resp;  // the same for every key
    if (!holders) {
      for (const std::string& field : fields) RespArg(fields_resp, field);
    }
    std::string head = RespCommand(holders ? 2 : 2 + fields.size());
    RespArg(head, holders ? "HGETALL" : "HMGET");
    auto append = [&](const std::string& name) {
      std::string resp = head;
      RespArg(resp, opt_.keys.Tensor(name));
      resp += fields_resp;
      return redis_->AppendFormatted(resp);
    };
    constexpr size_t kWindow = 1000;
    std::vector<TensorRecord> out;
    out.reserve(names.size());
    Status refused = Status::Ok();
    std::vector<std::string> vanished;
    size_t sent = 0;
    for (size_t read = 0; read < names.size(); ++read) {
      while (sent < names.size() && sent < read + 2 * kWindow)
        MCD_RETURN_IF_ERROR(append(names[sent++]));
      MCD_ASSIGN_OR_RETURN(RedisValue reply, redis_->ReadReply());
      if (reply.type == RedisValue::Type::kError && refused.ok()) {
        // Not this key's fault but this user's: the whole listing fails (once every reply
        // sent is read), rather than show a partial one.
        Status status = RedisErrorStatus(holders ? "HGETALL" : "HMGET", reply.str);
        if (status.code() == ErrorCode::kPermissionDenied) refused = status;
      }
      if (reply.type != RedisValue::Type::kArray) {
        bool wrong_type =
            reply.type == RedisValue::Type::kError && reply.str.rfind("WRONGTYPE", 0) == 0;
        if (unreadable)
          unreadable->push_back(names[read] + ": " + (wrong_type ? "not a hash" : reply.str));
        continue;
      }
      auto record = holders ? RecordFromHgetall(names[read], reply)
                            : RecordFromHmget(names[read], reply);
      if (record.ok()) {
        out.push_back(std::move(record).value());
      } else if (record.status().code() == ErrorCode::kNotFound) {
        vanished.push_back(names[read]);
      } else if (unreadable) {
        unreadable->push_back(names[read] + ": " + record.status().message());
      }
    }
    if (!refused.ok()) return refused;
    if (unreadable) MCD_RETURN_IF_ERROR(NameFieldless(vanished, *unreadable));
    return out;
  }

  // Keys whose HMGET found none of a tensor's fields: deleted since the SCAN, or hashes that
  // hold none of them (written by hand), which are named unreadable. Rare, so a round trip each.
  Status NameFieldless(const std::vector<std::string>& vanished, std::vector<std::string>& unreadable) {
    for (const std::string& name : vanished) {
      MCD_ASSIGN_OR_RETURN(RedisValue exists, redis_->Command({"EXISTS", opt_.keys.Tensor(name)}));
      if (exists.integer == 1) unreadable.push_back(name + ": a hash that holds none of a tensor's fields");
    }
    return Status::Ok();
  }

  Result<std::vector<std::string>> ListNames(const std::string& glob) {
    return Retrying("listing", true, [&] { return ListNamesOnce(glob); });
  }

  Result<std::vector<std::string>> ListNamesOnce(const std::string& glob) {
    std::vector<std::string> out;
    Status scanned =
        redis_->Scan(opt_.keys.TensorPattern(glob), 5000, [&](const std::vector<RedisValue>& keys) {
          for (const RedisValue& key : keys) {
            std::string name = opt_.keys.NameFromTensorKey(key.str);
            if (!name.empty()) out.push_back(std::move(name));
          }
          return Status::Ok();
        });
    MCD_RETURN_IF_ERROR(scanned);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());  // SCAN may repeat a key
    return out;
  }

  // A mapping that failed because the server that exported it died (its heartbeat outlives it
  // by up to its TTL, and the driver then calls the handle invalid) is kUnavailable, as for
  // any tensor of a server that is gone, not a CUDA error.
  Status WhyNotOpened(const Status& failed) const {
    if (failed.code() != ErrorCode::kCudaError) return failed;
    int64_t pid = server_->heartbeat().pid;
    // A second is far more than a context's teardown takes once the kernel marks the server
    // exiting (ServerView::DiedWithin), and only a failed open waits it.
    if (pid <= 0 || (!server_->DiedWithin(1000) && ProcessAlive(pid, 0))) return failed;
    return Status(ErrorCode::kUnavailable,
                  "the mcd-serve that owns the tensor (pid " + std::to_string(pid) +
                      ") has died; its tensors are gone (" + failed.message() + ")");
  }

  // A read without a reference races the tensor's removal, after which its memory is given to
  // other tensors (zeroed and handed out again, on a GPU). The hash goes before the memory, so
  // the same hash still there once the copy is done means the copy read the tensor's own bytes.
  Status StillThere(const TensorRecord& read) {
    auto now = Stat(read.name);
    if (!now.ok() && now.status().code() != ErrorCode::kNotFound) return now.status();
    if (now.ok() && now->ctime_ms == read.ctime_ms && now->owner == read.owner &&
        now->ipc_handle == read.ipc_handle && now->offset == read.offset) {
      return Status::Ok();
    }
    return Status(ErrorCode::kNotFound,
                  "tensor '" + read.name +
                      "' was removed while it was read without a reference, so what was read "
                      "may be another tensor's bytes (take a reference to keep it alive "
                      "meanwhile)");
  }

  // The holder that ClientOptions::holder_pid names, with its start time.
  static Result<std::optional<Holder>> ResolveHolder(int64_t pid) {
    if (pid == kNoHolder) return std::optional<Holder>();
    if (pid < 0) return Status(ErrorCode::kInvalidArgument, "holder pid must be positive");
    Holder holder;
    holder.pid = pid == 0 ? static_cast<int64_t>(getpid()) : pid;
    holder.start = ProcessStartTime(holder.pid);
    if (holder.start == 0) {
      return Status(ErrorCode::kInvalidArgument,
                    "holder process " + std::to_string(holder.pid) + " is not running");
    }
    return std::optional<Holder>(holder);
  }

  ClientOptions opt_;
  bool node_given_ = false;       // by ClientOptions::node or MCD_NODE
  bool node_discovered_ = false;  // taken from the only live server (DiscoverNode)
  std::optional<Holder> holder_;
  std::unique_ptr<RedisConnection> redis_;
  std::unique_ptr<ServerView> server_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<ReferenceScript> script_;
  static constexpr size_t kSeenMax = 1 << 16;
  int64_t redis_away_ms_ = 0;  // SteadyMs when Redis was last found away; see Retrying
  std::unordered_map<std::string, int64_t> seen_refcount_;  // by name; see Saw
  // The epoch of each reference taken and not given back, oldest first, by name (bounded as
  // seen_refcount_); see Release.
  std::unordered_map<std::string, std::vector<std::string>> taken_epochs_;
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  MCD_RETURN_IF_ERROR(impl->Connect());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const ClientOptions& Client::options() const noexcept { return impl_->opt_; }

Result<std::map<std::string, std::string>> Client::ServerInfo() {
  MCD_ASSIGN_OR_RETURN(HeartbeatRecord heartbeat, impl_->server_->Read());
  return HeartbeatMap(heartbeat);
}

Result<std::vector<std::map<std::string, std::string>>> Client::LiveServers(
    std::vector<std::map<std::string, std::string>>* dead) {
  std::vector<HeartbeatRecord> dead_ones;
  MCD_ASSIGN_OR_RETURN(auto live, impl_->Retrying("listing servers", true, [&] {
    dead_ones.clear();
    return ServerView::Live(*impl_->redis_, impl_->opt_.keys,
                            dead != nullptr ? &dead_ones : nullptr);
  }));
  std::vector<std::map<std::string, std::string>> out;
  for (const HeartbeatRecord& server : live) out.push_back(HeartbeatMap(server));
  if (dead != nullptr) {
    dead->clear();
    for (const HeartbeatRecord& server : dead_ones) dead->push_back(HeartbeatMap(server));
  }
  return out;
}

bool Client::node_discovered() const noexcept { return impl_->node_discovered_; }

Result<TensorRecord> Client::Create(const CreateSpec& spec) {
  MCD_RETURN_IF_ERROR(ValidateName(spec.name));
  Command cmd;
  cmd.op = Op::kCreate;
  cmd.name = spec.name;
  cmd.dtype = spec.dtype;
  cmd.shape = spec.shape;
  MCD_ASSIGN_OR_RETURN(cmd.bytes, ShapeBytes(spec.shape, spec.dtype));
  cmd.device = spec.device;
  cmd.lifetime = spec.lifetime;
  cmd.zero_init = spec.zero_init;
  cmd.copy_of = spec.copy_of;
  cmd.owner_pid = spec.owner_pid;
  if (spec.lifetime == Lifetime::kStack &&
      (spec.owner_pid != 0 ? spec.owner_pid : static_cast<int64_t>(getpid())) == kInitPid) {
    return Status(ErrorCode::kInvalidArgument,
                  "a stack tensor bound to pid 1 (init), which never exits while the server "
                  "runs, would never be reclaimed: name another owner process, or make a heap "
                  "tensor");
  }
  if (spec.lifetime == Lifetime::kStack && spec.owner_pid != 0) {
    cmd.owner_start = ProcessStartTime(spec.owner_pid);
    if (cmd.owner_start == 0) {
      return Status(ErrorCode::kInvalidArgument,
                    "owner process " + std::to_string(spec.owner_pid) + " is not running");
    }
  }
  if (spec.contents == nullptr) return impl_->Create(std::move(cmd));
  if (!spec.copy_of.empty()) {
    return Status(ErrorCode::kInvalidArgument, "a copy of another node's tensor takes no contents");
  }
  if (spec.contents_bytes != cmd.bytes) {
    return Status(ErrorCode::kInvalidArgument,
                  "contents of " + std::to_string(spec.contents_bytes) + " bytes for tensor '" +
                      spec.name + "' of " + std::to_string(cmd.bytes));
  }
  cmd.fill = true;
  cmd.pid_space = PidSpace();
  cmd.zero_init = false;  // every byte is about to be written
  auto creating = impl_->Create(std::move(cmd));
  if (!creating.ok()) {
    // A create that timed out, or whose answer was lost, may still be applied: then it would
    // stay "creating" for as long as this process lives.
    ErrorCode code = creating.status().code();
    if (code == ErrorCode::kTimeout || code == ErrorCode::kTryAgain ||
        code == ErrorCode::kUnavailable || code == ErrorCode::kInternal) {
      impl_->Abandon(spec.name);
    }
    return creating.status();
  }
  Status filled = Fill(creating.value(), spec.contents);
  if (filled.ok()) {
    auto published = impl_->Publish(spec.name);
    if (published.ok()) return published;
    filled = published.status();
    if (filled.code() == ErrorCode::kNotFound) {
      // Only its server removes a tensor being filled: one that is gone went with that server.
      filled = Status(ErrorCode::kUnavailable,
                      "tensor '" + spec.name +
                          "' went with its server before it was published (the server was "
                          "killed or restarted): nothing was created");
    }
  }
  impl_->Abandon(spec.name);
  return filled;
}

Status Client::Fill(const TensorRecord& creating, const void* contents) {
  // Mapped from the create's own record: the hash says "creating", which Open refuses.
  auto ptr = MappingRegistry::Get().Open(creating, impl_->server_->PoolSourceOf());
  if (!ptr.ok()) return impl_->WhyNotOpened(ptr.status());
  Status copied = CopyFromHost(TensorView{creating, ptr.value()}, contents, creating.bytes);
  Status closed = MappingRegistry::Get().Close(creating);
  return copied.ok() ? closed : copied;
}

Result<TensorView> Client::Get(const std::string& name) {
  MCD_RETURN_IF_ERROR(ValidateName(name));
  // The same effect as the queue's get command (refcount+1 on a ready tensor of a live server),
  // in one Redis round trip, during which the driver's once-per-process costs are being paid.
  impl_->server_->PrefetchImports();
  MCD_ASSIGN_OR_RETURN(TensorRecord record, impl_->DirectGet(name));
  auto ptr = MappingRegistry::Get().Open(record, impl_->server_->PoolSourceOf());
  if (!ptr.ok()) {
    (void)ReleaseReference(name);  // nobody in this process holds it: give it back
    return impl_->WhyNotOpened(ptr.status());
  }
  return TensorView{record, ptr.value()};
}

Result<TensorView> Client::Open(const std::string& name) {
  impl_->server_->PrefetchImports();
  MCD_ASSIGN_OR_RETURN(TensorRecord record, impl_->Stat(name));
  if (record.state != "ready") {
    return Status(ErrorCode::kNotReady, "tensor '" + name + "' is " + record.state);
  }
  if (record.node != impl_->opt_.node) {  // as the reference script answers a get
    return Status(ErrorCode::kWrongNode, "tensor '" + name + "' lives on node '" + record.node +
                                             "', not '" + impl_->opt_.node + "'");
  }
  ServerView& server = *impl_->server_;
  // A hash whose server instance is gone lingers until the node's next server removes it.
  if (record.owner != server.heartbeat().instance) {
    MCD_RETURN_IF_ERROR(impl_->Retrying("read", true, [&] { return server.Refresh(); }).status());
  }
  if (record.owner != server.heartbeat().instance) {
    return Status(ErrorCode::kUnavailable,
                  "the mcd-serve instance that owns tensor '" + name + "' is not running");
  }
  MCD_RETURN_IF_ERROR(server.Alive());  // its memory died with it
  auto ptr = MappingRegistry::Get().Open(record, impl_->server_->PoolSourceOf());
  if (!ptr.ok()) {
    Status why = impl_->WhyNotOpened(ptr.status());
    // Without a reference, the tensor may have been removed since its hash was read.
    if (why.code() == ErrorCode::kCudaError &&
        impl_->StillThere(record).code() == ErrorCode::kNotFound) {
      return Status(ErrorCode::kNotFound,
                    "tensor '" + name + "' was removed while it was being opened");
    }
    return why;
  }
  return TensorView{record, ptr.value(), /*referenced=*/false};
}

Result<TensorRecord> Client::Release(const std::string& name) {
  MCD_RETURN_IF_ERROR(ValidateName(name));
  // Unmap before the count drops: at zero the server frees the memory.
  MCD_RETURN_IF_ERROR(Close(name));
  return ReleaseReference(name);
}

Result<TensorRecord> Client::ReleaseReference(const std::string& name) {
  return impl_->Release(name);
}

Status Client::Close(const std::string& name) {
  auto record = MappingRegistry::Get().FindByName(name);
  if (!record) return Status::Ok();
  return MappingRegistry::Get().Close(*record);
}

Result<TensorRecord> Client::Stat(const std::string& name) { return impl_->Stat(name); }

namespace {
Status ValidateGlob(const std::string& glob) {
  if (glob.size() > 2 * kMaxNameLength) return Status(ErrorCode::kInvalidArgument, "glob too long");
  for (char c : glob) {
    if (c == '{' || c == '}' || static_cast<unsigned char>(c) < 0x20) {
      return Status(ErrorCode::kInvalidArgument, "glob holds a brace or control character");
    }
  }
  return Status::Ok();
}
}  // namespace

Result<std::vector<TensorRecord>> Client::List(const std::string& glob,
                                               std::vector<std::string>* unreadable,
                                               bool holders) {
  MCD_RETURN_IF_ERROR(ValidateGlob(glob));
  return impl_->List(glob, unreadable, holders);
}

Result<std::vector<std::string>> Client::ListNames(const std::string& glob) {
  MCD_RETURN_IF_ERROR(ValidateGlob(glob));
  return impl_->ListNames(glob);
}

namespace {
Status Copy(const TensorView& view, void* dst, const void* src, uint64_t bytes) {
  if (bytes > view.record.bytes) {
    return Status(ErrorCode::kInvalidArgument, "copy of " + std::to_string(bytes) +
                                                   " bytes into a tensor of " +
                                                   std::to_string(view.record.bytes));
  }
  if (view.record.device == kHostDevice) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  return MappingRegistry::Get().Worker(view.record.device).Call([&](DeviceContext& ctx) -> Status {
    MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
    MCD_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream()));
    MCD_CUDA_RETURN(cudaStreamSynchronize(ctx.stream()));
    return Status::Ok();
  });
}
}  // namespace

bool Client::BindsToInit() const { return impl_->holder_ && impl_->holder_->pid == kInitPid; }

Status Client::Warmup(int device) {
  if (device == kHostDevice) return Status::Ok();
  return MappingRegistry::Get().Worker(device).Call(
      [](DeviceContext& ctx) { return ctx.EnsureGpu(); });
}

Status Client::CopyToHost(const TensorView& view, void* dst, uint64_t bytes) {
  MCD_RETURN_IF_ERROR(Copy(view, dst, view.data, bytes));
  return view.referenced ? Status::Ok() : impl_->StillThere(view.record);
}

Status Client::CopyFromHost(const TensorView& view, const void* src, uint64_t bytes) {
  return Copy(view, view.data, src, bytes);
}

}  // namespace mcd
