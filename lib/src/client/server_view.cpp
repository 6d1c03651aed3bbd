// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "client/server_view.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>

#include "common/process.h"
#include "common/trust.h"
#include "ipc/fd_passing.h"
#include "memcuda/protocol.h"

namespace mcd {

namespace hb = heartbeat_field;

Result<HeartbeatRecord> ServerView::Read() {
  MCD_ASSIGN_OR_RETURN(RedisValue all, redis_.Command({"HGETALL", keys_.Server(node_)}));
  return Parse(all);
}

Result<HeartbeatRecord> ServerView::Parse(const RedisValue& all) {
  if (all.type == RedisValue::Type::kError) {
    return RedisErrorStatus("HGETALL " + keys_.Server(node_), all.str);
  }
  std::map<std::string, std::string> fields = FieldMap(all);
  if (fields.empty()) {
    std::string live;
    std::vector<std::string> unreadable;
    if (auto servers = Live(redis_, keys_, nullptr, &unreadable); servers.ok()) {
      for (auto& server : servers.value()) {
        // Written meanwhile: a Redis back from a restart has no heartbeat until the server
        // writes it again, a moment after it answers.
        if (server.node == node_) return std::move(server);
        live += (live.empty() ? "" : ", ") + server.node;
      }
    }
    std::string unread;
    // A few at most: anyone with Redis credentials may write heartbeats.
    for (size_t i = 0; i < unreadable.size() && i < 3; ++i)
      unread += "; unreadable heartbeat " + unreadable[i];
    if (unreadable.size() > 3)
      unread += "; " + std::to_string(unreadable.size() - 3) + " more unreadable";
    return Status(ErrorCode::kUnavailable,
                  "no mcd-serve is running for node '" + node_ + "' on " + redis_url_ +
                      " (no heartbeat at " + keys_.Server(node_) + "); " +
                      (live.empty() ? "no server is live there: start one with mcd-serve"
                                    : "live there: " + live + " (--node or MCD_NODE picks one)") +
                      unread);
  }
  auto record = HeartbeatFromFields(fields);
  if (!record.ok()) {
    return Status(record.status().code(), "the heartbeat of node '" + node_ + "' at " +
                                              keys_.Server(node_) + ": " +
                                              record.status().message());
  }
  return record;
}

Result<std::vector<HeartbeatRecord>> ServerView::Live(RedisConnection& redis, const KeySpace& keys,
                                                      std::vector<HeartbeatRecord>* dead,
                                                      std::vector<std::string>* unreadable) {
  std::vector<std::string> names;
  MCD_RETURN_IF_ERROR(redis.Scan(keys.Server("*"), 1000, [&](const std::vector<RedisValue>& page) {
    for (const RedisValue& key : page) names.push_back(key.str);
    return Status::Ok();
  }));
  std::sort(names.begin(), names.end());
  std::vector<HeartbeatRecord> out;
  for (const std::string& key : names) {
    MCD_ASSIGN_OR_RETURN(RedisValue all, redis.Command({"HGETALL", key}));
    if (all.type == RedisValue::Type::kError) continue;  // not a hash: not a heartbeat
    auto record = HeartbeatFromFields(FieldMap(all));
    if (!record.ok()) {
      if (unreadable != nullptr) unreadable->push_back(key + ": " + record.status().message());
      continue;
    }
    if (record->instance.empty()) continue;  // no server wrote it
    // A SIGKILLed server's heartbeat lingers until its TTL: not live where that can be told.
    if (!DeadHere(*record)) {
      out.push_back(std::move(record).value());
    } else if (dead != nullptr) {
      dead->push_back(std::move(record).value());
    }
  }
  return out;
}

Result<HeartbeatRecord> ServerView::Refresh() {
  auto info = Read();
  if (info.ok()) Adopt(info.value());
  return info;
}

Status ServerView::Missing(const std::string& name, bool heartbeat, const std::string& settled) {
  const std::string& sha = heartbeat ? settled : info_.settled;
  bool lost = false;  // Redis lacks the script: it is not the one the server settled in
  if (!sha.empty()) {
    MCD_ASSIGN_OR_RETURN(RedisValue exists, redis_.Command({"SCRIPT", "EXISTS", sha}));
    if (exists.type == RedisValue::Type::kError)
      return RedisErrorStatus("SCRIPT EXISTS", exists.str);
    lost = exists.elements.size() != 1 || exists.elements[0].integer != 1;
  }
  if (lost) {
    return Status(ErrorCode::kTryAgain,
                  "tensor '" + name + "' is not in Redis, which restarted or failed over: the " +
                      "server of node '" + node_ + "' has not put its tensors back yet" +
                      (heartbeat ? "" : " (nor its heartbeat)") + "; try again");
  }
  if (heartbeat) return Status(ErrorCode::kNotFound, "no tensor named '" + name + "'");
  // Without a heartbeat nobody can say: a Redis restarted empty has neither the hash nor the
  // heartbeat until the server writes them again.
  return Status(ErrorCode::kUnavailable, "no tensor named '" + name +
                                             "' in Redis, and no mcd-serve is running for node '" +
                                             node_ + "' (no heartbeat at " + keys_.Server(node_) +
                                             ") to say whether it has one");
}

Status ServerView::Missing(const std::string& name) {
  MCD_RETURN_IF_ERROR(redis_.Append({"MULTI"}));
  MCD_RETURN_IF_ERROR(redis_.Append({"EXISTS", keys_.Tensor(name)}));
  static const std::vector<const char*> kFields = {hb::kInstance, hb::kSettled};
  std::string key = keys_.Server(node_);
  std::vector<std::string_view> hmget = {"HMGET", key};
  hmget.insert(hmget.end(), kFields.begin(), kFields.end());
  MCD_RETURN_IF_ERROR(redis_.Append(hmget));
  MCD_RETURN_IF_ERROR(redis_.Append({"EXEC"}));
  Result<RedisValue> reply = RedisValue{};
  for (int i = 0; i < 4 && reply.ok(); ++i) reply = redis_.ReadReply();
  MCD_RETURN_IF_ERROR(reply.status());
  if (reply->type == RedisValue::Type::kError) return RedisErrorStatus("EXEC", reply->str);
  if (reply->elements.size() != 2)
    return Status(ErrorCode::kUnexpectedReply, "EXEC reply for tensor '" + name + "'");
  if (reply->elements[0].integer == 1) {
    return Status(ErrorCode::kTryAgain, "tensor '" + name + "' appeared while it was looked up");
  }
  MCD_ASSIGN_OR_RETURN(HeartbeatRecord heartbeat, HeartbeatFromHmget(kFields, reply->elements[1]));
  return Missing(name, !heartbeat.instance.empty(), heartbeat.settled);
}

void ServerView::Adopt(HeartbeatRecord info) {
  bool same = known_ && info.instance == info_.instance && info.pid == info_.pid;
  info_ = std::move(info);
  known_ = true;
  const HeartbeatRecord& hb = info_;
  queue_ = hb.node_queue.empty() ? keys_.queue : keys_.NodeQueue(node_);
  if (!same) Watch();
  if (!server_pin_ && !hb.pool_fd.empty()) {
    // Not pinned (another PID namespace, a kernel before 5.3): the pool socket serves.
    int64_t pid = hb.pid;
    std::shared_ptr<const PinnedProcess> pinned = process_;
    if (!pinned) {
      auto opened = PinnedProcess::Open(pid, Identity());
      if (opened.ok()) pinned = std::move(opened).value();
    }
    // Pinned, the process is the one named; its descriptors are used only if it is a trusted
    // user's (root could copy them from anyone's). Otherwise the pool socket, which checks.
    if (pinned && CheckProcessOwner(pid, "the node's server").ok()) server_pin_ = pinned;
  }
  // Read again after the first Get (a refresh, or a Get on the worker thread meeting a new
  // server instance): the prefetch is done, only the pin is of use.
  if (prefetched_) return;
  // "0:<hex of a cudaIpcMemHandle>,1:..." and "0:<hex of a cudaMemPoolPtrExportData>,..."
  auto primers = [](const std::string& items) {
    std::map<int, std::string> by_device;
    for (const auto& [device, hex] : DeviceItems(items)) {
      auto bytes = HexDecode(hex);
      if (bytes.ok()) by_device[device] = std::move(bytes).value();
    }
    return by_device;
  };
  auto pool_primers = primers(hb.pool_primer);
  pool_prefetch_.clear();
  bool pool_socket = !hb.pool_socket.empty();
  // "0:cuda_mempool,1:cuda_mempool,cpu:host_shm"
  for (const auto& [device, kind] : DeviceItems(hb.allocator)) {
    if (ParseIpcKind(kind) == IpcKind::kCudaMempool && pool_socket) {
      pool_prefetch_.push_back({device, PoolSourceFrom(device), std::move(pool_primers[device])});
    }
  }
  ipc_prefetch_ = primers(hb.ipc_primer);
}

ProcessIdentity ServerView::Identity() { return ProcessIdentity{info_.pid_ino, info_.pid_start}; }

void ServerView::Watch() {
  server_pin_.reset();
  process_.reset();
  dead_ = false;
  // Only a heartbeat of this boot and PID namespace names a process this one can look at.
  local_ = !info_.pid_space.empty() && info_.pid_space == PidSpace();
  if (!local_) return;
  auto opened = PinnedProcess::Open(info_.pid, Identity());
  if (opened.ok()) {
    process_ = std::move(opened).value();
  } else {
    dead_ = DeadHere(info_);  // and without a pidfd (or one not checkable), Alive asks each time
  }
}

bool ServerView::DeadHere(const HeartbeatRecord& heartbeat) {
  if (heartbeat.pid_space.empty() || heartbeat.pid_space != PidSpace()) return false;
  int64_t pid = heartbeat.pid;
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  // A /proc entry this process may not read (hidepid) says nothing: not judged.
  if (ProcessStartTime(pid) == 0) return false;
  return !ProcessAlive(pid, heartbeat.pid_start);
}

Status ServerView::Alive() {
  if (!dead_ && local_) dead_ = process_ ? process_->Exited() : DeadHere(info_);
  if (!dead_) return Status::Ok();
  return Status(ErrorCode::kUnavailable,
                "the mcd-serve of node '" + node_ + "' (pid " + std::to_string(info_.pid) +
                    ") is not running: it was killed or crashed, and its heartbeat lingers "
                    "until it expires; start it again (a new one takes the node over at once)");
}

bool ServerView::DiedWithin(int wait_ms) {
  // A killed server stays alive to its pidfd while the kernel tears its GPU context down (1.4 s
  // on an H100, 18 s on a busy one), but the kernel marks it exiting at once.
  if (!dead_ && local_) {
    dead_ = ProcessExiting(info_.pid, info_.pid_start);
  }
  if (!dead_ && local_ && process_) dead_ = process_->Exited(wait_ms);
  return !Alive().ok();
}

Status ServerView::EnsureAlive() {
  if (Alive().ok()) return Status::Ok();
  MCD_RETURN_IF_ERROR(Refresh().status());  // a server that took the node over is alive
  return Alive();
}

MappingRegistry::SourceOf ServerView::PoolSourceOf() {
  return [this](const std::string& owner, int device) -> Result<PoolSource> {
    // The heartbeat read at connect usually names the owner already: no round trip then.
    if (info_.instance != owner || info_.pool_socket.empty()) {
      MCD_ASSIGN_OR_RETURN(auto info, Read());
      Adopt(std::move(info));
    }
    if (info_.instance != owner) {
      return Status(ErrorCode::kUnavailable,
                    "the server instance " + owner + " that owns this tensor is gone");
    }
    if (info_.pool_socket.empty()) {
      return Status(ErrorCode::kUnavailable, "the server publishes no pool socket");
    }
    return PoolSourceFrom(device);
  };
}

PoolSource ServerView::PoolSourceFrom(int device) {
  PoolSource source;
  source.socket = info_.pool_socket;
  source.server = server_pin_;
  source.server_pid = info_.pid;
  for (const auto& [d, fd] : DeviceItems(info_.pool_fd)) {
    if (d == device) source.fd = std::atoi(fd.c_str());
  }
  return source;
}

void ServerView::PrefetchImports() {
  if (prefetched_ || !known_) return;
  prefetched_ = true;
  const std::string& instance = info_.instance;
  for (auto& pool : pool_prefetch_) {
    MappingRegistry::Get().PrefetchPool(instance, pool.device, std::move(pool.source),
                                        std::move(pool.primer));
  }
  for (auto& [device, handle] : ipc_prefetch_)
    MappingRegistry::Get().PrefetchIpc(device, std::move(handle));
  pool_prefetch_.clear();
  ipc_prefetch_.clear();
}

std::vector<std::pair<int, std::string>> ServerView::DeviceItems(const std::string& text) {
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
      if (ec == std::errc() && ptr == item.data() + colon)
        items.emplace_back(device, std::string(item.substr(colon + 1)));
    }
    start = end + 1;
  }
  return items;
}

}  // namespace mcd
