#include "memcuda/client.h"

#include <cuda_runtime_api.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "alloc/allocator.h"
#include "cuda_check.h"
#include "fd_passing.h"
#include "memcuda/gpu_worker.h"
#include "lua_scripts.h"
#include "process.h"
#include "spin.h"
#include "unix_socket.h"
#include "protocol_json.h"

namespace mcd {


std::string RuntimeDir() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && xdg[0] == '/') {
    struct stat st {};
    if (stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) && access(xdg, W_OK) == 0) {
      return std::string(xdg) + "/memcuda";
    }
  }
  return "/tmp/memcuda-" + std::to_string(getuid());
}

std::string PrivateRedisSocketPath() { return RuntimeDir() + "/redis.sock"; }

Result<RedisUrl> ResolveRedisUrl(const std::string& flag_value) {
  std::string text = flag_value;
  for (const char* var : {"MCD_REDIS_URL", "REDIS_URL"}) {
    if (!text.empty()) break;
    const char* value = std::getenv(var);
    if (value != nullptr && value[0] != '\0') text = value;
  }
  if (text.empty()) {
    std::string socket = PrivateRedisSocketPath();
    struct stat st {};
    text = (stat(socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ? "unix://" + socket
                                                                     : "redis://127.0.0.1:6379";
  }
  MCD_ASSIGN_OR_RETURN(RedisUrl url, RedisUrl::Parse(text));
  if (url.password.empty()) {
    for (const char* var : {"MCD_REDIS_PASSWORD", "REDISCLI_AUTH"}) {
      const char* value = std::getenv(var);
      if (value != nullptr && value[0] != '\0') {
        url.password = value;
        break;
      }
    }
  }
  return url;
}

bool CommandsViaQueue() {
  const char* via_queue = std::getenv("MCD_VIA_QUEUE");
  return via_queue != nullptr && *via_queue != '\0' && std::strcmp(via_queue, "0") != 0;
}

namespace {

// Where this process gets a server's pool descriptor for one device, as the heartbeat says:
// copied straight out of the server process where the kernel allows it (no exchange with a server
// thread that may be asleep), otherwise asked of the pool socket.
struct PoolSource {
  std::string socket;                           // pool_socket
  std::shared_ptr<const PinnedProcess> server;  // pid, pid_ino, pid_start; null: the socket only
  int fd = -1;                                  // the device's item of pool_fd
};

// Process-wide: one worker per device for this process's CUDA calls, and the mappings it has
// opened: each tensor once per process, however often it is got, and each GPU allocation once
// however many of its tensors are open (tensors carved from one slab share it).
class MappingRegistry {
 public:
  static MappingRegistry& Get() {
    static MappingRegistry registry;
    return registry;
  }

  GpuWorker& Worker(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& worker = workers_[device];
    if (!worker) worker = std::make_unique<GpuWorker>(device);
    return *worker;
  }

  // Resolves where the pool of a server instance on a device comes from (its heartbeat).
  using SourceOf = std::function<Result<PoolSource>(const std::string& owner, int device)>;

  Result<void*> Open(const TensorRecord& r, const SourceOf& source_of) {
    std::string key = Key(r);
    std::string base_key = BaseKey(r);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto known = ReuseLocked(key, base_key, r)) return *known;
    }
    void* ptr = nullptr;
    // Pools are imported once per process and server instance (a new instance: a new import).
    PoolImporter import_pool = [&](DeviceContext& ctx) -> Result<cudaMemPool_t> {
      if (auto known = FindPool(r.owner, r.device)) return *known;
      MCD_ASSIGN_OR_RETURN(PoolSource source, source_of(r.owner, r.device));
      return ImportPoolOf(ctx, r.owner, r.device, source);
    };
    Status opened = RunMappingJob(r.device, [&](DeviceContext& ctx) -> Status {
      MCD_ASSIGN_OR_RETURN(ptr, OpenMapping(ctx, r, import_pool));
      return Status::Ok();
    });
    if (!opened.ok()) return opened;
    std::optional<void*> known;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      known = ReuseLocked(key, base_key, r);
      if (!known) {
        maps_[key] = Mapping{ptr, 1, r};
        if (!base_key.empty()) bases_[base_key] = Base{1, r, ptr};
      }
    }
    if (!known) return ptr;
    // Another thread opened the tensor or its allocation meanwhile: keep theirs, undo ours.
    (void)RunMappingJob(r.device, [&](DeviceContext& ctx) { return CloseMapping(ctx, r, ptr); });
    return *known;
  }

  // Runs an open or close of a mapping: on the device's worker, where every CUDA call of this
  // process for that device runs; on the calling thread for host memory, whose mapping is plain
  // system calls (the hop to a worker would cost more than the mmap).
  Status RunMappingJob(int device, const std::function<Status(DeviceContext&)>& job) {
    if (device != kHostDevice) return Worker(device).Call(job);
    DeviceContext host(kHostDevice);
    return job(host);
  }

  // Starts importing the pool of server instance `owner` on `device` on that device's worker,
  // without waiting: a Get that is about to need it overlaps the import with its Redis round
  // trip (the Open job queues behind it on the same worker). Then imports and frees `primer`
  // (the heartbeat's pool_primer, when the server publishes one): a process's first pointer
  // import costs ~50-70 us more than later ones (docs/benchmarks.md, change 24), paid there too.
  // Errors are left to the Open. Only where this process has the device's CUDA context up
  // already: a process that maps host tensors only must not get a CUDA context from this.
  void PrefetchPool(const std::string& owner, int device, PoolSource source, std::string primer) {
    std::string key = PoolKey(owner, device);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto worker = workers_.find(device);
      if (worker == workers_.end() || !worker->second->GpuUp()) return;
      if (pools_.count(key) != 0 || !prefetching_.insert(key).second) return;
    }
    Status posted = Worker(device).Post([this, owner, device, source = std::move(source), key,
                                         primer = std::move(primer)](DeviceContext& ctx) {
      Status imported = Status::Ok();
      if (!FindPool(owner, device)) {
        auto pool = ImportPoolOf(ctx, owner, device, source);
        imported = pool.status();
        if (pool.ok() && !primer.empty()) {
          // Freed at once, as PrefetchIpc's primer: the setup stays paid.
          auto ptr = OpenPoolPointer(ctx, pool.value(), primer, 0);
          if (ptr.ok()) (void)ClosePoolPointer(ctx, ptr.value(), 0);
        }
      }
      std::lock_guard<std::mutex> lock(mutex_);
      prefetching_.erase(key);
      return imported;
    });
    if (!posted.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      prefetching_.erase(key);
    }
  }

  // Opens, on `device`'s worker and without waiting, the small allocation that the server
  // publishes for this (the heartbeat's ipc_primer), and closes it again. A process's first
  // cudaIpcOpenMemHandle costs ~100-240 us more than the ones after it (docs/benchmarks.md,
  // change 30): a Get that is about to open a cuda_ipc tensor overlaps that with its Redis round
  // trip (the Open job queues behind it on the same worker). Once per device and process;
  // errors are ignored (the tensor's own open reports what is wrong). Only where the device's
  // CUDA context is up already, as for PrefetchPool.
  void PrefetchIpc(int device, std::string handle) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto worker = workers_.find(device);
      if (worker == workers_.end() || !worker->second->GpuUp()) return;
      if (!primed_.insert(device).second) return;
    }
    // Closed at once: the setup stays paid (keeping it open measured no faster), and the
    // process holds no reference to the server's memory.
    (void)Worker(device).Post([handle = std::move(handle)](DeviceContext& ctx) {
      auto ptr = OpenCudaIpc(ctx, handle, 0);
      if (ptr.ok()) (void)CloseCudaIpc(ctx, ptr.value(), 0);
      return Status::Ok();
    });
  }

  // Drops one open of the tensor; unmaps its allocation when no tensor of this process that
  // lies in it is open any more. Not found is fine (not opened here).
  Status Close(const TensorRecord& r) {
    TensorRecord opener;
    void* opener_ptr = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = maps_.find(Key(r));
      if (it == maps_.end()) return Status::Ok();
      if (--it->second.opens > 0) return Status::Ok();
      opener = it->second.record;
      opener_ptr = it->second.ptr;
      maps_.erase(it);
      auto base = bases_.find(BaseKey(opener));
      if (base != bases_.end()) {
        if (--base->second.tensors > 0) return Status::Ok();
        opener = base->second.opener;
        opener_ptr = base->second.opener_ptr;
        bases_.erase(base);
      }
    }
    return RunMappingJob(r.device, [&](DeviceContext& ctx) { return CloseMapping(ctx, opener, opener_ptr); });
  }

  // Finds the record of an opened tensor by name (for Release without a record at hand).
  std::optional<TensorRecord> FindByName(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, mapping] : maps_) {
      if (mapping.record.name == name) return mapping.record;
    }
    return std::nullopt;
  }

  ~MappingRegistry() {
    // Each allocation once: through its base where tensors share one, else per tensor.
    auto close = [this](const TensorRecord& record, void* ptr) {
      (void)RunMappingJob(record.device, [&](DeviceContext& ctx) { return CloseMapping(ctx, record, ptr); });
    };
    for (auto& [key, base] : bases_) close(base.opener, base.opener_ptr);
    for (auto& [key, mapping] : maps_) {
      if (BaseKey(mapping.record).empty()) close(mapping.record, mapping.ptr);
    }
    for (auto& [device, worker] : workers_) worker->Stop();
  }

 private:
  struct Mapping {
    void* ptr = nullptr;
    int opens = 0;
    TensorRecord record;
  };
  // A GPU allocation this process has mapped, and how many of its open tensors lie in it.
  struct Base {
    int tensors = 0;
    TensorRecord opener;  // the tensor whose open mapped it; closing that unmaps it
    void* opener_ptr = nullptr;
  };
  // A tensor: carved tensors share their slab's handle and differ in offset.
  static std::string Key(const TensorRecord& r) {
    return r.owner + "/" + r.ipc_kind + "/" + std::to_string(r.offset) + "/" + r.ipc_handle;
  }
  // The allocation a tensor lies in, for the kinds whose open maps all of it (the driver maps a
  // whole cuda_ipc allocation or pool pointer; a host tensor maps only its own bytes): "" else.
  static std::string BaseKey(const TensorRecord& r) {
    if (r.ipc_kind != "cuda_ipc" && r.ipc_kind != "cuda_mempool") return "";
    return r.owner + "/" + r.ipc_kind + "/" + std::to_string(r.device) + "/" + r.ipc_handle;
  }

  // The pointer of a tensor already open here (one more open), or of one in an allocation
  // already mapped here (no driver call, no hop to the worker); nullopt when neither.
  std::optional<void*> ReuseLocked(const std::string& key, const std::string& base_key, const TensorRecord& r) {
    auto it = maps_.find(key);
    if (it != maps_.end()) {
      it->second.opens++;
      return it->second.ptr;
    }
    if (base_key.empty()) return std::nullopt;
    auto base = bases_.find(base_key);
    if (base == bases_.end()) return std::nullopt;
    base->second.tensors++;
    const Base& b = base->second;
    void* ptr = static_cast<char*>(b.opener_ptr) - b.opener.offset + r.offset;
    maps_[key] = Mapping{ptr, 1, r};
    return ptr;
  }
  static std::string PoolKey(const std::string& owner, int device) { return owner + "/" + std::to_string(device); }

  std::optional<cudaMemPool_t> FindPool(const std::string& owner, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(PoolKey(owner, device));
    if (it == pools_.end()) return std::nullopt;
    return it->second;
  }

  // Worker thread of `device` only.
  Result<cudaMemPool_t> ImportPoolOf(DeviceContext& ctx, const std::string& owner, int device,
                                     const PoolSource& source) {
    std::optional<cudaMemPool_t> imported;
    // The copy is not the pool's descriptor only if the server replaced its pool since the
    // heartbeat was read: the socket then serves the new one.
    if (source.server) {
      if (auto copied = source.server->CopyFd(source.fd); copied.ok()) {
        if (auto pool = ImportPool(ctx, copied.value()); pool.ok()) imported = pool.value();
      }
    }
    if (!imported) {
      MCD_ASSIGN_OR_RETURN(int fd, FetchFd(source.socket, device, 5000));
      MCD_ASSIGN_OR_RETURN(imported, ImportPool(ctx, fd));
    }
    cudaMemPool_t pool = *imported;
    std::lock_guard<std::mutex> lock(mutex_);
    pools_[PoolKey(owner, device)] = pool;
    return pool;
  }

  std::mutex mutex_;
  std::map<int, std::unique_ptr<GpuWorker>> workers_;
  std::map<std::string, Mapping> maps_;
  std::map<std::string, Base> bases_;  // by BaseKey
  std::map<std::string, cudaMemPool_t> pools_;  // imported pools by "<owner>/<device>"
  std::set<std::string> prefetching_;  // pool imports posted and not yet run
  std::set<int> primed_;               // devices whose PrefetchIpc was posted
};

// How long the marker of a release that the reference script answered may stay: it is popped at
// once by the BLPOP sent right behind the script, so this only bounds one whose client died.
constexpr const char* kMarkerTtl = "60";

std::string FormatSeconds(int ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace

class Client::Impl {
 public:
  explicit Impl(ClientOptions options) : opt_(std::move(options)) {
    if (CommandsViaQueue()) opt_.command_socket = false;
  }
  ~Impl() { CloseSocket(); }

  Status Connect() {
    if (opt_.node.empty()) opt_.node = HostName();
    // One socket timeout for everything, with room for a request's BLPOP (which waits
    // timeout_ms itself): no timeout switching on every request.
    RedisOptions ropt;
    ropt.command_timeout_ms = opt_.timeout_ms + 2000;
    MCD_ASSIGN_OR_RETURN(redis_, RedisConnection::Connect(opt_.redis_url, ropt));
    req_base_ = opt_.node.substr(0, 32) + "-" + std::to_string(getpid()) + "-" + RandomHex(4);
    for (char& c : req_base_) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
    }
    if (!opt_.require_server) return Status::Ok();
    // The heartbeat check and the reference script's loading share one round trip, so that a
    // fresh process's first Get is a single EVALSHA.
    std::string server_key = opt_.keys.Server(opt_.node);
    MCD_RETURN_IF_ERROR(redis_->Append({"HGETALL", server_key}));
    MCD_RETURN_IF_ERROR(redis_->Append({"SCRIPT", "LOAD", kRefScript}));
    auto heartbeat = redis_->ReadReply();
    auto sha = redis_->ReadReply();
    if (sha.ok() && sha->type == RedisValue::Type::kString) ref_sha_ = sha->str;
    if (!heartbeat.ok()) return heartbeat.status();
    MCD_ASSIGN_OR_RETURN(auto info, ParseServerInfo(heartbeat.value()));
    AdoptServerInfo(std::move(info));
    return Status::Ok();
  }

  Result<std::map<std::string, std::string>> ServerInfo() {
    MCD_ASSIGN_OR_RETURN(RedisValue all, redis_->Command({"HGETALL", opt_.keys.Server(opt_.node)}));
    return ParseServerInfo(all);
  }

  Result<std::map<std::string, std::string>> ParseServerInfo(const RedisValue& all) {
    if (all.type == RedisValue::Type::kError) {
      return Status(ErrorCode::kRedisError, "HGETALL " + opt_.keys.Server(opt_.node) + ": " + all.str);
    }
    std::map<std::string, std::string> fields;
    for (size_t i = 0; i + 1 < all.elements.size(); i += 2) {
      fields[all.elements[i].str] = all.elements[i + 1].str;
    }
    if (fields.empty()) {
      return Status(ErrorCode::kUnavailable,
                    "no mcd-serve is running for node '" + opt_.node + "' (no heartbeat at " +
                        opt_.keys.Server(opt_.node) + " on " + opt_.redis_url.Redacted() +
                        "); start one with mcd-serve");
    }
    return fields;
  }

  // A command ready to send, and where its reply will come.
  struct Outgoing {
    Command cmd;
    std::string body;       // the command's JSON
    std::string reply_key;  // the list the reply is pushed onto
    std::string wait;       // BLPOP timeout, seconds
  };
  Outgoing Prepare(Command cmd) {
    cmd.req = req_base_ + "-" + std::to_string(++seq_);
    cmd.node = opt_.node;
    cmd.pid = getpid();
    Outgoing out;
    out.body = CommandToJson(cmd);
    out.reply_key = opt_.keys.Reply(cmd.req);
    out.wait = FormatSeconds(opt_.timeout_ms);
    out.cmd = std::move(cmd);
    return out;
  }

  // Sends a command and waits for its reply: on the server's command socket when it has one,
  // else through the queue.
  Result<TensorRecord> Request(Command cmd) {
    Outgoing out = Prepare(std::move(cmd));
    if (SocketReady()) {
      auto sent = SocketRequest(out);
      if (sent.has_value()) return std::move(*sent);
      // Not delivered (the server went away since): the queue, where a server that took the
      // node over finds it, or a clear error.
    }
    return QueueRequest(out);
  }

  // True when a connection to the server's command socket is open, or could be opened now.
  bool SocketReady() {
    if (cmd_fd_ >= 0) return true;
    if (!opt_.command_socket || server_info_.empty()) return false;
    const std::string& path = server_info_["command_socket"];
    if (path.empty() || path == socket_refused_) return false;
    auto fd = ConnectUnix(path, opt_.timeout_ms, "command socket");
    if (!fd.ok()) {
      socket_refused_ = path;  // not this one again: the queue serves this process
      return false;
    }
    cmd_fd_ = fd.value();
    return true;
  }

  void CloseSocket() {
    if (cmd_fd_ >= 0) close(cmd_fd_);
    cmd_fd_ = -1;
  }

  // One command on the socket. nullopt when it could not be sent (the server closed the
  // connection before): then nothing reached it.
  std::optional<Result<TensorRecord>> SocketRequest(const Outgoing& out) {
    std::string line = out.body + "\n";
    size_t sent = 0;
    while (sent < line.size()) {
      ssize_t n = send(cmd_fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        CloseSocket();
        (void)RefreshServer();
        if (sent == 0) return std::nullopt;
        return Result<TensorRecord>(Status(ErrorCode::kUnavailable, "the server's command socket broke while the " +
                                                                         std::string(OpName(out.cmd.op)) + " of '" +
                                                                         out.cmd.name + "' was being sent"));
      }
      sent += static_cast<size_t>(n);
    }
    std::string what = std::string("the ") + OpName(out.cmd.op) + " of '" + out.cmd.name + "'";
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opt_.timeout_ms);
    pollfd p{cmd_fd_, POLLIN, 0};
    // Readable already when the spin saw the reply come: then no second poll before the recv.
    bool readable = SpinUntil([&] { return poll(&p, 1, 0) != 0; });
    char buf[4096];
    for (;;) {
      size_t newline = socket_buf_.find('\n');
      if (newline != std::string::npos) {
        std::string reply = socket_buf_.substr(0, newline);
        socket_buf_.erase(0, newline + 1);
        return ParseReply(reply);
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      int ready = readable ? 1 : poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
      readable = false;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        // Closing the connection withdraws the command from a server that has not read it yet.
        CloseSocket();
        auto info = RefreshServer();
        std::string fate = "; " + what + " was withdrawn: a server that had not begun it drops it, "
                           "but one that had may still finish it: check before repeating it";
        if (!info.ok()) return Result<TensorRecord>(Status(info.status().code(), info.status().message() + fate));
        return Result<TensorRecord>(Status(ErrorCode::kTimeout, std::string("no reply to ") + OpName(out.cmd.op) + " '" +
                                                                    out.cmd.name + "' within " + out.wait +
                                                                    " s (the server is busy or stopped)" + fate));
      }
      ssize_t n = recv(cmd_fd_, buf, sizeof(buf), 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        CloseSocket();
        (void)RefreshServer();
        return Result<TensorRecord>(Status(ErrorCode::kUnavailable,
                                           "the server closed its command socket before answering " + what +
                                               " (it stopped or failed), so it may or may not have taken effect: "
                                               "check before repeating it"));
      }
      socket_buf_.append(buf, static_cast<size_t>(n));
    }
  }

  // The node's heartbeat read again, after the command socket failed: a server that took the
  // node over names its own socket.
  Result<std::map<std::string, std::string>> RefreshServer() {
    socket_buf_.clear();
    auto info = ServerInfo();
    if (info.ok()) AdoptServerInfo(info.value());
    return info;
  }

  // Pushes a command and waits for its reply: LPUSH and BLPOP go out in one write.
  Result<TensorRecord> QueueRequest(const Outgoing& out) {
    MCD_RETURN_IF_ERROR(redis_->Append({"LPUSH", opt_.keys.queue, out.body}));
    MCD_RETURN_IF_ERROR(redis_->Append({"BLPOP", out.reply_key, out.wait}));
    auto pushed = redis_->ReadReply();
    auto popped = redis_->ReadReply();
    if (!pushed.ok()) return pushed.status();
    if (pushed->type == RedisValue::Type::kError) {
      return Status(ErrorCode::kRedisError, "LPUSH " + opt_.keys.queue + ": " + pushed->str);
    }
    return ServerReply(out, std::move(popped));
  }

  // The server's reply to `out`, as its BLPOP returned it.
  Result<TensorRecord> ServerReply(const Outgoing& out, Result<RedisValue> popped) {
    if (!popped.ok()) return popped.status();
    if (popped->type == RedisValue::Type::kError) {
      return Status(ErrorCode::kRedisError, "BLPOP: " + popped->str);
    }
    if (popped->is_nil() || popped->elements.size() != 2) return Unanswered(out);
    return ParseReply(popped->elements[1].str);
  }

  // No reply in time. A command the server has not taken yet is taken back off the queue, so
  // that a request reported as failed does not take effect later, when a server gets to it: a
  // create nobody holds, or a release applied twice when the caller tries again. A reply that
  // came just after the wait still counts. The body holds the command's unique req, so the
  // LREM can only find this one command.
  Result<TensorRecord> Unanswered(const Outgoing& out) {
    MCD_RETURN_IF_ERROR(redis_->Append({"LREM", opt_.keys.queue, "1", out.body}));
    MCD_RETURN_IF_ERROR(redis_->Append({"LPOP", out.reply_key}));
    auto removed = redis_->ReadReply();
    auto late = redis_->ReadReply();
    if (late.ok() && late->type == RedisValue::Type::kString) return ParseReply(late->str);
    if (!removed.ok()) return removed.status();
    bool withdrawn = removed->type == RedisValue::Type::kInteger && removed->integer == 1;
    std::string what = std::string("the ") + OpName(out.cmd.op) + " of '" + out.cmd.name + "'";
    std::string fate = withdrawn ? "; " + what + " was withdrawn from the queue, nothing changed"
                                 : "; the server had taken " + what +
                                       ", which may still take effect: check before repeating it";
    auto info = ServerInfo();
    if (!info.ok()) return Status(info.status().code(), info.status().message() + fate);
    return Status(ErrorCode::kTimeout, std::string("no reply to ") + OpName(out.cmd.op) + " '" +
                                           out.cmd.name + "' within " + out.wait +
                                           " s (the server is busy or the queue is long)" + fate);
  }

  static Result<TensorRecord> ParseReply(const std::string& text) {
    auto parsed = JsonReader::Parse(text, 3, "server reply");
    if (!parsed.ok() || parsed->root().kind != JsonReader::Kind::kObject) {
      return Status(ErrorCode::kUnexpectedReply, "server reply is not a JSON object");
    }
    const JsonReader& doc = parsed.value();
    auto ok = doc.Find(doc.root_index(), "ok");
    if (ok && doc.at(*ok).kind == JsonReader::Kind::kBool && doc.at(*ok).boolean) {
      auto tensor = doc.Find(doc.root_index(), "tensor");
      if (!tensor) return Status(ErrorCode::kUnexpectedReply, "reply has no tensor");
      return RecordFromJsonNode(doc, *tensor);
    }
    std::string code = "internal";
    std::string message = "the server gave no reason";
    if (auto error = doc.Find(doc.root_index(), "error")) {
      auto text_of = [&](const char* key, std::string& out) {
        auto index = doc.Find(*error, key);
        if (index && doc.at(*index).kind == JsonReader::Kind::kString) out = std::string(doc.at(*index).text);
      };
      text_of("code", code);
      text_of("message", message);
    }
    return Status(ErrorCodeFromName(code).value_or(ErrorCode::kInternal), message);
  }

  // Where the pool of server instance `owner` comes from, from the node's heartbeat.
  MappingRegistry::SourceOf PoolSourceOf() {
    return [this](const std::string& owner, int device) -> Result<PoolSource> {
      // The heartbeat read at connect usually names the owner already: no round trip then.
      if (server_info_["instance"] != owner || server_info_["pool_socket"].empty()) {
        MCD_ASSIGN_OR_RETURN(auto info, ServerInfo());
        AdoptServerInfo(std::move(info));
      }
      auto& info = server_info_;
      if (info["instance"] != owner) {
        return Status(ErrorCode::kUnavailable, "the server instance " + owner +
                                                   " that owns this tensor is gone");
      }
      if (info["pool_socket"].empty()) {
        return Status(ErrorCode::kUnavailable, "the server publishes no pool socket");
      }
      return PoolSourceFrom(device);
    };
  }

  // Takes `info` as the node's heartbeat and prepares, here where it is read rather than on a
  // first Get's path, what a first Get needs of it: the server pinned for copying its pools'
  // descriptors (a pidfd_open and an fstat, ~15-30 us in a fresh process on the H100 hosts),
  // and each device's pool source and primer, parsed and decoded.
  void AdoptServerInfo(std::map<std::string, std::string> info) {
    if (info["instance"] != server_info_["instance"] || info["pid"] != server_info_["pid"]) server_pin_.reset();
    server_info_ = std::move(info);
    auto& hb = server_info_;
    if (!server_pin_ && !hb["pool_fd"].empty()) {
      ProcessIdentity who{std::strtoull(hb["pid_ino"].c_str(), nullptr, 10),
                          std::strtoull(hb["pid_start"].c_str(), nullptr, 10)};
      // Not pinned (another PID namespace, a kernel before 5.3): the pool socket serves.
      auto pinned = PinnedProcess::Open(std::strtoll(hb["pid"].c_str(), nullptr, 10), who);
      if (pinned.ok()) server_pin_ = std::move(pinned).value();
    }
    // Read again after the first Get (a refresh, or a Get on the worker thread meeting a new
    // server instance): the prefetch is done, only the pin is of use.
    if (prefetched_) return;
    // "0:<hex of a cudaIpcMemHandle>,1:..." and "0:<hex of a cudaMemPoolPtrExportData>,..."
    auto primers = [&hb](const char* field) {
      std::map<int, std::string> by_device;
      for (const auto& [device, hex] : DeviceItems(hb[field])) {
        auto bytes = HexDecode(hex);
        if (bytes.ok()) by_device[device] = std::move(bytes).value();
      }
      return by_device;
    };
    auto pool_primers = primers("pool_primer");
    pool_prefetch_.clear();
    bool pool_socket = !hb["pool_socket"].empty();
    // "0:cuda_mempool,1:cuda_mempool,cpu:host_shm"
    for (const auto& [device, kind] : DeviceItems(hb["allocator"])) {
      if (kind == "cuda_mempool" && pool_socket) {
        pool_prefetch_.push_back({device, PoolSourceFrom(device), std::move(pool_primers[device])});
      }
    }
    ipc_prefetch_ = primers("ipc_primer");
  }

  // The heartbeat's fields for `device`'s pool; without a pinned server, the socket only.
  PoolSource PoolSourceFrom(int device) {
    PoolSource source;
    source.socket = server_info_["pool_socket"];
    source.server = server_pin_;
    for (const auto& [d, fd] : DeviceItems(server_info_["pool_fd"])) {
      if (d == device) source.fd = std::atoi(fd.c_str());
    }
    return source;
  }

  // A first Get or Open from this process's node server: what the driver charges a process
  // once is paid meanwhile, on each device's worker: importing the server's pools
  // (MappingRegistry::PrefetchPool) and the process's first cuda_ipc open (PrefetchIpc).
  void PrefetchImports() {
    if (prefetched_ || server_info_.empty()) return;
    prefetched_ = true;
    const std::string& instance = server_info_["instance"];
    for (auto& pool : pool_prefetch_) {
      MappingRegistry::Get().PrefetchPool(instance, pool.device, std::move(pool.source), std::move(pool.primer));
    }
    for (auto& [device, handle] : ipc_prefetch_) MappingRegistry::Get().PrefetchIpc(device, std::move(handle));
    pool_prefetch_.clear();
    ipc_prefetch_.clear();
  }

  // "<device>:<value>,..." of a heartbeat field, GPU devices only, malformed items skipped.
  static std::vector<std::pair<int, std::string>> DeviceItems(const std::string& text) {
    std::vector<std::pair<int, std::string>> items;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find(',', start);
      if (end == std::string::npos) end = text.size();
      std::string_view item(text.data() + start, end - start);
      size_t colon = item.find(':');
      int device = 0;
      if (colon != std::string_view::npos) {
        auto [ptr, ec] = std::from_chars(item.data(), item.data() + colon, device);
        if (ec == std::errc() && ptr == item.data() + colon) items.emplace_back(device, std::string(item.substr(colon + 1)));
      }
      start = end + 1;
    }
    return items;
  }

  // get: refcount+1 in Redis by one script, no server hop (no memory changes hands).
  Result<TensorRecord> DirectGet(const std::string& name) {
    std::string key = opt_.keys.Tensor(name);
    std::string server = opt_.keys.Server(opt_.node);
    std::vector<std::string_view> argv = {"EVALSHA", ref_sha_, "2", key, server, "1", opt_.node, "", ""};
    for (const std::string& field : TensorFieldNames()) argv.push_back(field);
    auto reply = redis_->Command(argv);
    if (!reply.ok() && IsNoScript(reply.status().message())) {
      MCD_RETURN_IF_ERROR(LoadRefScript());
      argv[1] = ref_sha_;
      reply = redis_->Command(argv);
    }
    if (!reply.ok()) return reply.status();
    bool taken = !reply->elements.empty() && reply->elements[0].str == "ok";
    auto record = RefAnswer(name, reply.value());
    if (!record.ok() && taken) (void)ScriptRelease(name);  // a hash it cannot read: the reference goes back
    if (record.ok()) Saw(name, record->refcount);
    return record;
  }

  // create: the command through the server; the tensor is then one this client tracks (Saw).
  Result<TensorRecord> Create(Command cmd) {
    std::string name = cmd.name;
    auto created = Request(std::move(cmd));
    if (created.ok() && seen_refcount_.size() < kSeenMax) seen_refcount_[name] = created->refcount;
    return created;
  }

  // release: a tensor this client created and whose refcount it last saw at 1 is most likely
  // released for the last time, which only the server can do: its delete command
  // goes to the queue at once. Were another process to have taken a reference since, the
  // server's delete gives one back just the same. Any other release runs the reference script,
  // which answers a release that leaves references itself, with no server hop, and queues the
  // delete command of the last one. The BLPOP for the server's reply goes out behind the push
  // or the script in one write; when the script answered, it also pushed a marker, so the BLPOP
  // returns at once. One round trip in every case.
  Result<TensorRecord> Release(const std::string& name) {
    auto seen = seen_refcount_.find(name);
    bool last = seen != seen_refcount_.end() && seen->second <= 1;
    Result<TensorRecord> released = last ? Request(DeleteCommand(name)) : ScriptRelease(name);
    Saw(name, released.ok() ? released->refcount : 0);  // a failed release: no longer tracked
    return released;
  }

  static Command DeleteCommand(const std::string& name) {
    Command cmd;
    cmd.op = Op::kDelete;
    cmd.name = name;
    return cmd;
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

  Result<TensorRecord> ScriptRelease(const std::string& name, bool retried = false) {
    if (ref_sha_ == kNoScript) MCD_RETURN_IF_ERROR(LoadRefScript());
    Outgoing out = Prepare(DeleteCommand(name));
    std::string key = opt_.keys.Tensor(name);
    std::string server = opt_.keys.Server(opt_.node);
    std::vector<std::string_view> argv = {"EVALSHA", ref_sha_, "4", key, server, opt_.keys.queue,
                                          out.reply_key, "-1", opt_.node, out.body, kMarkerTtl};
    for (const std::string& field : TensorFieldNames()) argv.push_back(field);
    MCD_RETURN_IF_ERROR(redis_->Append(argv));
    MCD_RETURN_IF_ERROR(redis_->Append({"BLPOP", out.reply_key, out.wait}));
    auto script = redis_->ReadReply();
    if (!script.ok()) return script.status();
    if (script->type == RedisValue::Type::kError) {
      // The script did not run (NOSCRIPT after a Redis restart, or an error), so nothing will
      // wake the BLPOP: drop the connection with it, and try once more on a fresh one.
      std::string error = script->str;
      MCD_RETURN_IF_ERROR(redis_->Reconnect());
      if (retried || !IsNoScript(error)) {
        return Status(ErrorCode::kRedisError, "reference script: " + error);
      }
      MCD_RETURN_IF_ERROR(LoadRefScript());
      return ScriptRelease(name, true);
    }
    auto popped = redis_->ReadReply();
    if (!script->elements.empty() && script->elements[0].str == "queued") {
      return ServerReply(out, std::move(popped));
    }
    if (!popped.ok()) return popped.status();
    return RefAnswer(name, script.value());
  }

  Status LoadRefScript() {
    MCD_ASSIGN_OR_RETURN(RedisValue sha, redis_->Command({"SCRIPT", "LOAD", kRefScript}));
    MCD_ASSIGN_OR_RETURN(ref_sha_, AsString(sha, "SCRIPT LOAD"));
    return Status::Ok();
  }

  // What the reference script answered, for `name`.
  Result<TensorRecord> RefAnswer(const std::string& name, RedisValue& reply) {
    if (reply.elements.empty()) return Status(ErrorCode::kUnexpectedReply, "reference script reply");
    const std::string& kind = reply.elements[0].str;
    std::string detail = reply.elements.size() > 1 ? reply.elements[1].str : "";
    if (kind == "ok" && reply.elements.size() == 2) return ToRecord(name, reply.elements[1]);
    if (kind == "missing") return Status(ErrorCode::kNotFound, "no tensor named '" + name + "'");
    if (kind == "not_ready") return Status(ErrorCode::kNotReady, "tensor '" + name + "' is " + detail);
    if (kind == "wrong_node") {
      return Status(ErrorCode::kWrongNode, "tensor '" + name + "' lives on node '" + detail +
                                               "', not '" + opt_.node + "'");
    }
    if (kind == "gone") {
      return Status(ErrorCode::kUnavailable, "the mcd-serve instance that owns tensor '" + name +
                                                 "' is not running");
    }
    return Status(ErrorCode::kUnexpectedReply, "reference script answered '" + kind + "'");
  }

  Result<TensorRecord> Stat(const std::string& name) {
    MCD_RETURN_IF_ERROR(ValidateName(name));
    std::vector<std::string_view> argv = {"HMGET"};
    std::string key = opt_.keys.Tensor(name);
    argv.push_back(key);
    for (const std::string& field : TensorFieldNames()) argv.push_back(field);
    MCD_ASSIGN_OR_RETURN(RedisValue reply, redis_->Command(argv));
    return ToRecord(name, reply);
  }

  static Result<TensorRecord> ToRecord(const std::string& name, RedisValue& reply) {
    if (reply.elements.size() != TensorFieldNames().size()) {
      return Status(ErrorCode::kUnexpectedReply, "HMGET reply for tensor '" + name + "'");
    }
    std::vector<std::optional<std::string>> values;
    values.reserve(reply.elements.size());
    bool any = false;
    for (RedisValue& v : reply.elements) {
      any = any || !v.is_nil();
      values.push_back(v.is_nil() ? std::nullopt : std::optional<std::string>(std::move(v.str)));
    }
    if (!any) return Status(ErrorCode::kNotFound, "no tensor named '" + name + "'");
    return RecordFromFields(name, values);
  }

  Result<std::vector<TensorRecord>> List(const std::string& glob, std::vector<std::string>* unreadable) {
    // The names first (SCAN, sorted, deduplicated), then their fields with pipelined HMGETs in
    // windows: while this process parses one window, Redis already answers the next.
    MCD_ASSIGN_OR_RETURN(std::vector<std::string> names, ListNames(glob));
    const auto& fields = TensorFieldNames();
    std::string fields_resp;  // the same for every key
    for (const std::string& field : fields) RespArg(fields_resp, field);
    std::string head = RespCommand(2 + fields.size());
    RespArg(head, "HMGET");
    auto append = [&](const std::string& name) {
      std::string resp = head;
      RespArg(resp, opt_.keys.Tensor(name));
      resp += fields_resp;
      return redis_->AppendFormatted(resp);
    };
    constexpr size_t kWindow = 1000;
    std::vector<TensorRecord> out;
    out.reserve(names.size());
    size_t sent = 0;
    for (size_t read = 0; read < names.size(); ++read) {
      while (sent < names.size() && sent < read + 2 * kWindow) MCD_RETURN_IF_ERROR(append(names[sent++]));
      MCD_ASSIGN_OR_RETURN(RedisValue reply, redis_->ReadReply());
      if (reply.type != RedisValue::Type::kArray) {
        bool wrong_type = reply.type == RedisValue::Type::kError && reply.str.rfind("WRONGTYPE", 0) == 0;
        if (unreadable) unreadable->push_back(names[read] + ": " + (wrong_type ? "not a hash" : reply.str));
        continue;
      }
      auto record = ToRecord(names[read], reply);
      if (record.ok()) {
        out.push_back(std::move(record).value());
      } else if (record.status().code() != ErrorCode::kNotFound && unreadable) {  // not deleted meanwhile
        unreadable->push_back(names[read] + ": " + record.status().message());
      }
    }
    return out;
  }

  Result<std::vector<std::string>> ListNames(const std::string& glob) {
    std::vector<std::string> out;
    Status scanned = redis_->Scan(opt_.keys.TensorPattern(glob), 5000, [&](const std::vector<RedisValue>& keys) {
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

  ClientOptions opt_;
  std::unique_ptr<RedisConnection> redis_;
  std::string req_base_;
  uint64_t seq_ = 0;
  static constexpr const char* kNoScript = "0";
  std::string ref_sha_ = kNoScript;  // loaded while connecting, or on first use
  std::map<std::string, std::string> server_info_;  // the node's heartbeat, as last read
  // Prepared from server_info_ by AdoptServerInfo.
  std::shared_ptr<const PinnedProcess> server_pin_;
  struct PoolPrefetch {
    int device;
    PoolSource source;
    std::string primer;
  };
  std::vector<PoolPrefetch> pool_prefetch_;
  std::map<int, std::string> ipc_prefetch_;
  bool prefetched_ = false;  // PrefetchImports ran
  int cmd_fd_ = -1;            // connection to the server's command socket, when open
  std::string socket_buf_;     // what came on it past the last reply line
  std::string socket_refused_;  // a command socket that could not be connected to
  static constexpr size_t kSeenMax = 1 << 16;
  std::unordered_map<std::string, int64_t> seen_refcount_;  // by name; see Saw
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  MCD_RETURN_IF_ERROR(impl->Connect());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const ClientOptions& Client::options() const noexcept { return impl_->opt_; }

Result<std::map<std::string, std::string>> Client::ServerInfo() { return impl_->ServerInfo(); }

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
  cmd.owner_pid = spec.owner_pid;
  if (spec.lifetime == Lifetime::kStack && spec.owner_pid != 0) {
    cmd.owner_start = ProcessStartTime(spec.owner_pid);
    if (cmd.owner_start == 0) {
      return Status(ErrorCode::kInvalidArgument,
                    "owner process " + std::to_string(spec.owner_pid) + " is not running");
    }
  }
  return impl_->Create(std::move(cmd));
}

Result<TensorView> Client::Get(const std::string& name) {
  MCD_RETURN_IF_ERROR(ValidateName(name));
  // The same effect as the queue's get command (refcount+1 on a ready tensor of a live server),
  // in one Redis round trip, during which the driver's once-per-process costs are being paid.
  impl_->PrefetchImports();
  MCD_ASSIGN_OR_RETURN(TensorRecord record, impl_->DirectGet(name));
  auto ptr = MappingRegistry::Get().Open(record, impl_->PoolSourceOf());
  if (!ptr.ok()) {
    (void)ReleaseReference(name);  // nobody in this process holds it: give it back
    return ptr.status();
  }
  return TensorView{record, ptr.value()};
}

Result<TensorView> Client::Open(const std::string& name) {
  impl_->PrefetchImports();
  MCD_ASSIGN_OR_RETURN(TensorRecord record, impl_->Stat(name));
  if (record.state != "ready") {
    return Status(ErrorCode::kNotReady, "tensor '" + name + "' is " + record.state);
  }
  MCD_ASSIGN_OR_RETURN(void* ptr, MappingRegistry::Get().Open(record, impl_->PoolSourceOf()));
  return TensorView{record, ptr};
}

Result<TensorRecord> Client::Release(const std::string& name) {
  MCD_RETURN_IF_ERROR(ValidateName(name));
  // Unmap before the count drops: at zero the server frees the memory.
  MCD_RETURN_IF_ERROR(Close(name));
  return ReleaseReference(name);
}

Result<TensorRecord> Client::ReleaseReference(const std::string& name) { return impl_->Release(name); }

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

Result<std::vector<TensorRecord>> Client::List(const std::string& glob, std::vector<std::string>* unreadable) {
  MCD_RETURN_IF_ERROR(ValidateGlob(glob));
  return impl_->List(glob, unreadable);
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

Status Client::Warmup(int device) {
  if (device == kHostDevice) return Status::Ok();
  return MappingRegistry::Get().Worker(device).Call([](DeviceContext& ctx) { return ctx.EnsureGpu(); });
}

Status Client::CopyToHost(const TensorView& view, void* dst, uint64_t bytes) {
  return Copy(view, dst, view.data, bytes);
}

Status Client::CopyFromHost(const TensorView& view, const void* src, uint64_t bytes) {
  return Copy(view, view.data, src, bytes);
}

}  // namespace mcd
