// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/heartbeat.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/log.h"
#include "common/process.h"
#include "memcuda/heartbeat.h"
#include "memcuda/server.h"  // kMaxHeartbeatTtlS
#include "redis/lua_scripts.h"
#include "redis/script_calls.h"
#include "server/recurring.h"

namespace mcd {

Heartbeat::Heartbeat(HeartbeatOptions opt, std::string instance, StopSignal& stop,
                     DeviceSet& devices, const TensorTable& table, const OutcomeLog& outcomes)
    : opt_(std::move(opt)),
      instance_(std::move(instance)),
      stop_(stop),
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

HeartbeatRecord Heartbeat::Record() {
  HeartbeatRecord r;
  r.instance = instance_;
  r.pid = getpid();
  r.pid_start = pid_start_;
  r.pid_ino = pid_ino_;
  r.pid_space = PidSpace();
  r.node = opt_.node;
  r.devices = devices_.devices_text();
  r.allocator = devices_.allocator_text();
  r.pool_socket = pool_socket_;
  r.pool_fd = devices_.PoolFdText();
  r.ipc_primer = devices_.PrimerText(IpcKind::kCudaIpc);
  r.pool_primer = devices_.PrimerText(IpcKind::kCudaMempool);
  r.command_socket = command_socket_;
  r.ucx_address = ucx_address_;
  r.ucx_version = ucx_version_;
  r.node_copies = node_copies_;
  r.pool_used = pool_used_.load();
  r.ready_bytes = devices_.ReadyBytes();
  r.slab_bytes = devices_.SlabBytes();
  r.slab_free_bytes = devices_.SlabFreeBytes();
  r.started_ms = started_ms_;
  r.queue = opt_.keys.queue;
  r.node_queue = opt_.keys.NodeQueue(opt_.node);
  r.version = "1";
  r.event_history = opt_.event_history;
  // The totals and the by-device counts from one reading, so that they agree.
  const std::map<int, TensorTable::DeviceCount> counts = table_.ByDevice();
  for (const auto& [device, count] : counts) {
    r.tensors += count.tensors;
    r.tensor_bytes += count.bytes;
  }
  r.device_tensors = DeviceTensorsText(counts);
  r.commands_ok = outcomes_.ok();
  r.settled = settled();
  r.errors = outcomes_.Errors();
  for (const auto& [code, n] : r.errors) r.commands_failed += n;
  for (size_t op = 0; op < OutcomeLog::kTimedOps.size(); ++op)
    r.latency.emplace_back(OutcomeLog::kTimedOps[op], outcomes_.LatencyText(op));
  return r;
}

Result<std::optional<Heartbeat::NodeHolder>> Heartbeat::Write(RedisConnection& conn,
                                                              const std::string& replace) {
  auto fields = HeartbeatFields(Record());
  HeartbeatArgs args;
  std::string key = opt_.keys.Server(opt_.node), events = opt_.keys.Events();
  args.heartbeat = key;
  args.events = events;
  args.instance = instance_;
  args.replace = replace;
  args.ttl_s = opt_.ttl_s;
  args.event_cap = opt_.event_history;
  args.held_before = owned_;
  args.fields = &fields;
  std::vector<std::string> argv = HeartbeatCall(args);
  return ParseHeartbeatReply(
      conn.CommandRaw(std::vector<std::string_view>(argv.begin(), argv.end())));
}

std::string Heartbeat::DeviceTensorsText(std::map<int, TensorTable::DeviceCount> counts) const {
  std::string out;
  size_t start = 0;
  const std::string& devices = devices_.devices_text();
  while (start <= devices.size()) {
    size_t comma = std::min(devices.find(',', start), devices.size());
    std::string device = devices.substr(start, comma - start);
    TensorTable::DeviceCount count =
        counts[device == "cpu" ? kHostDevice : std::atoi(device.c_str())];
    out += (out.empty() ? "" : ",") + device + ":" + std::to_string(count.tensors) + ":" +
           std::to_string(count.bytes);
    start = comma + 1;
  }
  return out;
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
    wake_.wait(lock, [this] { return started_ || quit_; });
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
  auto interval = std::chrono::milliseconds(std::max(200, opt_.ttl_s * 1000 / 4));
  Recurring failed;
  while (!stop_.requested()) {
    if (devices_.has_pool_socket()) pool_used_ = devices_.PoolUsedBytes();
    if (connect()) {
      auto written = Write(*conn);
      if (written.ok() && written->has_value()) {
        // This server was not heard from for longer than the TTL (stopped, or its machine
        // paused), and another one took the node over and removed this one's hashes as
        // stale: stop serving, and leave the keys alone, which are the other one's now.
        const NodeHolder& holder = **written;
        std::string lost =
            "another mcd-serve (pid " + std::to_string(holder.pid) + ", instance " +
            holder.instance + ") took node '" + opt_.node +
            "' over while this one was not heard from for " +
            "longer than its heartbeat TTL; this one stops and leaves that one's keys alone";
        Log(LogLevel::kError, lost);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          node_lost_ = std::move(lost);
        }
        stop_.Request();  // after node_lost_, which the serving loop reads once it sees the stop
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
    stop_.WaitFor(interval);
  }
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

void Heartbeat::Stop() {
  stop_.Request();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string Heartbeat::node_lost() {
  std::lock_guard<std::mutex> lock(mutex_);
  return node_lost_;
}

void Heartbeat::Remove(RedisConnection& conn) {
  if (!owned_ || !conn.connected()) return;
  auto command = DeleteIfCommand(EventTarget::Of(opt_.keys, opt_.event_history, opt_.node),
                                 opt_.keys.Server(opt_.node), heartbeat_field::kInstance, instance_,
                                 CommitEvent{"server_stop", getpid()}, "");
  (void)conn.Command(std::vector<std::string_view>(command.begin(), command.end()));
}

}  // namespace mcd
