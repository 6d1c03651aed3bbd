#include "server/heartbeat.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/log.h"
#include "common/process.h"
#include "redis/lua_scripts.h"
#include "server/commit_pipeline.h"
#include "server/recurring.h"

namespace mcd {

Heartbeat::Heartbeat(const ServerOptions& opt, std::string instance, DeviceSet& devices,
                     const TensorTable& table, const OutcomeLog& outcomes)
    : opt_(opt),
      instance_(std::move(instance)),
      devices_(devices),
      table_(table),
      outcomes_(outcomes) {
  started_ms_ = NowMs();
  pid_start_ = ProcessStartTime(getpid());
  pid_ino_ = PidfdInode(getpid());
  thread_ = std::thread([this] { Run(); });
}

std::string Heartbeat::ThreadName(const std::string& instance) {
  return "mcd-" + instance.substr(0, 11);  // the kernel keeps 15 characters
}

Status Heartbeat::Claim(RedisConnection& conn) {
  std::string replace;
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto written = Write(conn, replace);
    if (!written.ok()) {
      return Status(written.status().code(),
                    "cannot write the heartbeat: " + written.status().message());
    }
    if (!written->has_value()) {
      owned_ = true;
      return Status::Ok();
    }
    const NodeHolder& holder = **written;
    if (holder.pid != getpid()) {  // an instance of this process (its earlier claim) is replaced
      std::string stale = Stale(holder);
      if (stale.empty()) {
        return Status(ErrorCode::kAlreadyExists,
                      "another mcd-serve (pid " + std::to_string(holder.pid) + ", instance " +
                          holder.instance + ") already serves node '" + opt_.node + "' on " +
                          opt_.redis_url.Redacted() + "; stop it or pick another --node");
      }
      Log(LogLevel::kWarn, "the heartbeat of node '" + opt_.node + "' (instance " +
                               holder.instance + ") " + stale + ": taking the node over");
    }
    replace = holder.instance;  // its process is gone: take over, unless another did meanwhile
  }
  return Status(ErrorCode::kUnavailable,
                "the heartbeat of node '" + opt_.node +
                    "' keeps changing hands: are other mcd-serve starting?");
}

Result<std::optional<Heartbeat::NodeHolder>> Heartbeat::Write(RedisConnection& conn,
                                                          const std::string& replace) {
  std::vector<std::string> args = {"EVAL",
                                   kHeartbeatScript,
                                   "2",
                                   opt_.keys.Server(opt_.node),
                                   opt_.keys.Events(),
                                   instance_,
                                   replace,
                                   std::to_string(opt_.heartbeat_ttl_s),
                                   std::to_string(opt_.event_history),
                                   owned_ ? "1" : "",
                                   "instance",
                                   instance_,
                                   "pid",
                                   std::to_string(getpid()),
                                   "pid_start",
                                   std::to_string(pid_start_),
                                   "pid_ino",
                                   pid_ino_ != 0 ? std::to_string(pid_ino_) : "",
                                   "pid_space",
                                   PidSpace(),
                                   "node",
                                   opt_.node,
                                   "devices",
                                   devices_.devices_text(),
                                   "allocator",
                                   devices_.allocator_text(),
                                   "pool_socket",
                                   pool_socket_,
                                   "pool_fd",
                                   devices_.PoolFdText(),
                                   "ipc_primer",
                                   devices_.PrimerText(IpcKind::kCudaIpc),
                                   "pool_primer",
                                   devices_.PrimerText(IpcKind::kCudaMempool),
                                   "command_socket",
                                   command_socket_,
                                   "ucx_address",
                                   ucx_address_,
                                   "ucx_version",
                                   ucx_version_,
                                   "node_copies",
                                   node_copies_,
                                   "pool_used",
                                   std::to_string(pool_used_.load()),
                                   "ready_bytes",
                                   std::to_string(devices_.ReadyBytes()),
                                   "slab_bytes",
                                   std::to_string(devices_.SlabBytes()),
                                   "slab_free_bytes",
                                   std::to_string(devices_.SlabFreeBytes()),
                                   "started",
                                   std::to_string(started_ms_),
                                   "queue",
                                   opt_.keys.queue,
                                   "node_queue",
                                   opt_.keys.NodeQueue(opt_.node),
                                   "version",
                                   "1",
                                   "event_history",
                                   std::to_string(opt_.event_history),
                                   "tensors",
                                   std::to_string(table_.count()),
                                   "tensor_bytes",
                                   std::to_string(table_.bytes()),
                                   "commands_ok",
                                   std::to_string(outcomes_.ok()),
                                   "settled",
                                   settled()};
  uint64_t failed = 0;
  for (const auto& [code, n] : outcomes_.Errors()) {
    failed += n;
    args.push_back("errors_" + code);
    args.push_back(std::to_string(n));
  }
  args.push_back("commands_failed");
  args.push_back(std::to_string(failed));
  for (size_t op = 0; op < OutcomeLog::kTimedOps.size(); ++op) {
    args.push_back(std::string("latency_") + OutcomeLog::kTimedOps[op]);
    args.push_back(outcomes_.LatencyText(op));
  }
  std::vector<std::string_view> argv(args.begin(), args.end());
  // An error reply (OOM under maxmemory, say) is a failure too, not only a lost connection.
  MCD_ASSIGN_OR_RETURN(RedisValue reply, conn.CommandRaw(argv));
  if (reply.type == RedisValue::Type::kError)
    return Status(ErrorCode::kRedisError, "Redis: " + reply.str);
  if (reply.elements.empty()) return Status(ErrorCode::kUnexpectedReply, "heartbeat script reply");
  if (reply.elements[0].str == "ok") return std::optional<NodeHolder>();
  if (reply.elements[0].str != "held" || reply.elements.size() != 6) {
    return Status(ErrorCode::kUnexpectedReply,
                  "heartbeat script answered '" + reply.elements[0].str + "'");
  }
  NodeHolder holder;
  holder.instance = reply.elements[1].str;
  holder.pid = std::atoll(reply.elements[2].str.c_str());
  holder.pid_start = std::strtoull(reply.elements[3].str.c_str(), nullptr, 10);
  holder.expires = reply.elements[4].integer != -1;
  holder.pid_space = reply.elements[5].str;
  holder.pttl_ms = reply.elements[4].integer;
  return std::optional<NodeHolder>(std::move(holder));
}

std::string Heartbeat::Stale(const NodeHolder& holder) {
  if (!holder.expires) return "has no expiry, which a server's heartbeat always has";
  if (holder.pttl_ms > int64_t{kMaxHeartbeatTtlS} * 1000) {
    return "expires in " + std::to_string(holder.pttl_ms / 1000) +
           " s, later than any server's heartbeat (at most " + std::to_string(kMaxHeartbeatTtlS) +
           " s)";
  }
  if (holder.pid <= 0) return "names no process";
  // A pid of another host or PID namespace says nothing here: that heartbeat lives until its TTL.
  if (!holder.pid_space.empty() && holder.pid_space != PidSpace()) return "";
  std::string pid = "names pid " + std::to_string(holder.pid);
  if (!ProcessAlive(holder.pid, holder.pid_start)) {
    return pid + (holder.pid_start != 0 ? " started at " + std::to_string(holder.pid_start) : "") +
           ", which is not running";
  }
  // A live process is the node's server only when it has the instance's heartbeat thread: any
  // other (pid 1, say) was named by someone who wrote the heartbeat by hand.
  std::string thread = ThreadName(holder.instance);
  if (!ProcessHasThreadNamed(holder.pid, thread)) {
    return pid + ", which runs but is no server of instance " + holder.instance +
           " (it has no thread '" + thread + "')";
  }
  return "";
}

void Heartbeat::Run() {
  pthread_setname_np(pthread_self(), ThreadName(instance_).c_str());
  std::function<void()> on_stop;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [this] { return started_ || stop_.load(); });
    if (!started_) return;  // stopped before it served: nothing to wake
    on_stop = std::move(on_stop_);
  }
  Loop(on_stop);
}

void Heartbeat::Start(std::function<void()> on_stop) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    on_stop_ = std::move(on_stop);
    started_ = true;
  }
  wake_.notify_all();
}

void Heartbeat::Loop(const std::function<void()>& on_stop) {
  RedisOptions ropt;
  ropt.command_timeout_ms = 2000;
  std::unique_ptr<RedisConnection> conn;
  auto connect = [&] {
    if (conn && conn->connected()) return true;
    auto c = RedisConnection::Connect(opt_.redis_url, ropt);
    if (c.ok()) conn = std::move(c).value();
    return conn && conn->connected();
  };
  auto interval = std::chrono::milliseconds(std::max(200, opt_.heartbeat_ttl_s * 1000 / 4));
  Recurring failed;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    if (devices_.has_pool_socket()) pool_used_ = devices_.PoolUsedBytes();
    if (connect()) {
      auto written = Write(*conn);
      if (written.ok() && written->has_value()) {
        // This server was not heard from for longer than the TTL (stopped, or its machine
        // paused), and another one took the node over and removed this one's hashes as
        // stale: stop serving, and leave the keys alone, which are the other one's now.
        const NodeHolder& holder = **written;
        lock.lock();
        node_lost_ =
            "another mcd-serve (pid " + std::to_string(holder.pid) + ", instance " +
            holder.instance + ") took node '" + opt_.node +
            "' over while this one was not heard from for " +
            "longer than its heartbeat TTL; this one stops and leaves that one's keys alone";
        Log(LogLevel::kError, node_lost_);
        stop_ = true;
        break;
      }
      if (written.ok()) CheckSettled(*conn);
      Status s = written.ok() ? Status::Ok() : written.status();
      if (!s.ok() && failed.Again()) {
        int n = failed.count();
        Log(LogLevel::kWarn, "heartbeat: " + s.ToString() +
                                 (n > 1 ? " (" + std::to_string(n) + " failures in a row)" : ""));
      } else if (s.ok() && failed.count() > 0) {
        Log(LogLevel::kInfo,
            "heartbeat written again after " + std::to_string(failed.count()) + " failure(s)");
        failed.Over();
      }
    }
    lock.lock();
    wake_.wait_for(lock, interval, [this] { return stop_.load(); });
  }
  lock.unlock();
  on_stop();
}

Status Heartbeat::MarkSettled(RedisConnection& conn) {
  // A script no other instance, and no earlier settle of this one, loads: its SHA names this
  // settle in this Redis process.
  MCD_ASSIGN_OR_RETURN(std::string nonce, RandomHex(8));
  std::string body = "return 'memcuda settled " + instance_ + " " + nonce + "'";
  MCD_ASSIGN_OR_RETURN(RedisValue sha, conn.Command({"SCRIPT", "LOAD", body}));
  if (sha.type != RedisValue::Type::kString || sha.str.empty())
    return Status(ErrorCode::kUnexpectedReply, "SCRIPT LOAD of the settled marker");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    settled_ = sha.str;
    settled_lost_ = false;
  }
  return Claim(conn);
}

void Heartbeat::CheckSettled(RedisConnection& conn) {
  std::string sha = settled();
  if (sha.empty()) return;
  auto exists = conn.Command({"SCRIPT", "EXISTS", sha});
  if (!exists.ok() || exists->elements.size() != 1 || exists->elements[0].integer != 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (settled_ == sha && !settled_lost_) {
    settled_lost_ = true;
    Log(LogLevel::kWarn,
        "Redis lost the server's settled marker (restarted, failed over or SCRIPT FLUSH): "
        "settling again");
  }
}

std::string Heartbeat::settled() {
  std::lock_guard<std::mutex> lock(mutex_);
  return settled_;
}

void Heartbeat::RequestStop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
}

void Heartbeat::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

std::string Heartbeat::node_lost() {
  std::lock_guard<std::mutex> lock(mutex_);
  return node_lost_;
}

void Heartbeat::Remove(RedisConnection& conn) {
  if (!owned_ || !conn.connected()) return;
  auto command = DeleteIfCommand(opt_, opt_.keys.Server(opt_.node), "instance", instance_,
                                 CommitEvent{"server_stop", getpid()}, "");
  (void)conn.Command(std::vector<std::string_view>(command.begin(), command.end()));
}

}  // namespace mcd
