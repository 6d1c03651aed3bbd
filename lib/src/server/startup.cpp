// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/startup.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "alloc/allocator.h"
#include "common/log.h"
#include "memcuda/unique_fd.h"
#include "protocol/text.h"
#include "redis/script_calls.h"

namespace mcd {

Status ScanNodeHashes(
    RedisConnection& redis, const KeySpace& keys, const std::string& node,
    const std::vector<std::string>& fields,
    const std::function<Status(const std::string& key, RedisValue& values)>& on_hash) {
  std::vector<std::string> command = {"HMGET", "", "node", "owner"};
  command.insert(command.end(), fields.begin(), fields.end());
  return redis.Scan(
      keys.TensorPattern("*"), 1000, [&](const std::vector<RedisValue>& keys) -> Status {
        for (const RedisValue& key : keys) {
          command[1] = key.str;
          MCD_RETURN_IF_ERROR(
              redis.Append(std::vector<std::string_view>(command.begin(), command.end())));
        }
        // Every reply is read before any is handled: a handler may send commands of its own.
        std::vector<RedisValue> replies;
        for (size_t i = 0; i < keys.size(); ++i) {
          MCD_ASSIGN_OR_RETURN(RedisValue f, redis.ReadReply());
          replies.push_back(std::move(f));
        }
        for (size_t i = 0; i < keys.size(); ++i) {
          RedisValue& f = replies[i];
          if (f.elements.size() != command.size() - 2 || f.elements[0].str != node) continue;
          f.elements.erase(f.elements.begin());  // "owner", then `fields`
          MCD_RETURN_IF_ERROR(on_hash(keys[i].str, f));
        }
        return Status::Ok();
      });
}

Status ReconcileNode(RedisConnection& redis, const ReconcileOptions& opt,
                     const std::string& instance, const std::string& shm_prefix,
                     const std::string& socket_dir) {
  int removed = 0;
  Status scanned = ScanNodeHashes(
      redis, opt.keys, opt.node, {"ipc_kind", "ipc_handle", "set"},
      [&](const std::string& key, RedisValue& f) -> Status {
        if (f.elements[0].str == instance) return Status::Ok();
        // Only an object a server of this node made: the name comes from Redis, where anyone
        // who can write could plant one naming another user's file.
        const std::string& shm = f.elements[2].str;
        if (ParseIpcKind(f.elements[1].str) == IpcKind::kHostShm) {
          bool ours = shm.rfind(shm_prefix, 0) == 0 && shm.find('/', 1) == std::string::npos;
          if (ours && HostShmIsOwn(shm)) {
            UnlinkHostShm(shm);
          } else if (!ours || access(("/dev/shm" + shm).c_str(), F_OK) == 0) {
            Log(LogLevel::kWarn, "stale tensor '" + opt.keys.NameFromTensorKey(key) +
                                     "' names the shared-memory object '" + Printable(shm) +
                                     "', which no server of this node made (" +
                                     (ours ? "another user's" : "not its naming") +
                                     "); left alone");
          }
        }
        // Only while it is still the dead instance's, with the event that says it went.
        const std::string& dead = f.elements[0].str;
        auto command =
            DeleteIfCommand(EventTarget::Of(opt.keys, opt.event_history, opt.node), key, "owner",
                            dead, CommitEvent{"reclaim", 0, "server_lost"},
                            opt.keys.NameFromTensorKey(key), &opt.keys, f.elements[3].str);
        MCD_RETURN_IF_ERROR(
            redis.Command(std::vector<std::string_view>(command.begin(), command.end())).status());
        Log(LogLevel::kInfo, "removed stale tensor '" + opt.keys.NameFromTensorKey(key) +
                                 "' of dead instance " + f.elements[0].str);
        ++removed;
        return Status::Ok();
      });
  MCD_RETURN_IF_ERROR(scanned);
  int shm_removed = RemoveHostShmObjects(shm_prefix);
  int sockets_removed = RemoveDeadSockets(socket_dir, opt.node, instance);
  MCD_ASSIGN_OR_RETURN(RedisValue pending, redis.Command({"LLEN", opt.keys.Processing(opt.node)}));
  Log(LogLevel::kInfo, "startup: removed " + std::to_string(removed) +
                           " stale tensor(s) of dead instances, " + std::to_string(shm_removed) +
                           " orphaned shm object(s), " + std::to_string(sockets_removed) +
                           " dead instances' socket(s); " + std::to_string(pending.integer) +
                           " unfinished command(s) to resume");
  return Status::Ok();
}

std::string SocketFileName(const std::string& kind, const std::string& node,
                           const std::string& instance) {
  std::string tag;
  for (char c : node.substr(0, 40))
    tag.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return kind + "-" + tag + "-" + instance + ".sock";
}

namespace {

// Whether nobody listens on the Unix socket at `path`: a connection is refused. A live
// listener, a full backlog or any other failure says no.
bool NobodyListens(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return false;
  return connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
         errno == ECONNREFUSED;
}

}  // namespace

int RemoveDeadSockets(const std::string& dir, const std::string& node,
                      const std::string& instance) {
  if (dir.empty()) return 0;
  DIR* folder = opendir(dir.c_str());
  if (folder == nullptr) return 0;
  int removed = 0;
  const std::string kSuffix = ".sock";
  for (dirent* entry = readdir(folder); entry != nullptr; entry = readdir(folder)) {
    const std::string name = entry->d_name;
    for (const char* kind : {"cmd", "pool"}) {
      std::string head = SocketFileName(kind, node, "");
      head.resize(head.size() - kSuffix.size());  // "<kind>-<node>-"
      // Every instance id has the same length as this one's.
      if (name.size() != head.size() + instance.size() + kSuffix.size() ||
          name.rfind(head, 0) != 0 ||
          name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
        continue;
      }
      std::string other = name.substr(head.size(), instance.size());
      std::string path = dir + "/" + name;
      struct stat st {};
      if (other == instance || lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      if (!NobodyListens(path) || unlink(path.c_str()) != 0) continue;
      Log(LogLevel::kInfo, "removed the socket " + path + " of dead instance " + Printable(other));
      ++removed;
    }
  }
  closedir(folder);
  return removed;
}

Status CheckRedisVersion(RedisConnection& redis, const std::string& where) {
  // HELLO (Redis 6 and newer; RESP2 kept) names the version, and no ACL can forbid it; before
  // Redis 6, INFO does, which ACLs of shared deployments forbid (@dangerous).
  std::string version;
  auto hello = redis.Command({"HELLO", "2"});
  for (size_t i = 0; hello.ok() && i + 1 < hello->elements.size(); i += 2) {
    if (hello->elements[i].str == "version") version = hello->elements[i + 1].str;
  }
  Result<RedisValue> info = RedisValue{};
  if (version.empty()) info = redis.Command({"INFO", "server"});
  if (version.empty() && info.ok()) version = InfoField(info->str, "redis_version");
  if (version.empty()) {
    Log(LogLevel::kWarn,
        "cannot tell the version of Redis at " + where +
            " (HELLO: " + (hello.ok() ? "no version" : hello.status().message()) +
            "; INFO: " + (info.ok() ? "no redis_version" : info.status().message()) +
            "); memcuda needs Redis 7.0 or newer");
    return Status::Ok();
  }
  if (std::atoi(version.c_str()) >= 7) return Status::Ok();
  return Status(ErrorCode::kUnavailable,
                "Redis at " + where + " is version " + version +
                    "; memcuda needs 7.0 or newer: an older Redis keeps loaded scripts in its AOF "
                    "and RDB and passes them to its replicas, so that a server cannot tell when "
                    "Redis lost the tensors it must put back");
}

void WarnIfRedisEvicts(RedisConnection& redis) {
  auto policy = redis.Command({"CONFIG", "GET", "maxmemory-policy"});
  if (!policy.ok() || policy->elements.size() != 2 || policy->elements[1].str == "noeviction")
    return;
  auto limit = redis.Command({"CONFIG", "GET", "maxmemory"});
  std::string bytes = limit.ok() && limit->elements.size() == 2 ? limit->elements[1].str : "?";
  Log(LogLevel::kWarn, "Redis's maxmemory-policy is '" + policy->elements[1].str +
                           "': at its maxmemory (" +
                           (bytes == "0" ? "none set now" : bytes + " bytes") +
                           ") it evicts keys, and a tensor whose hash it evicts is lost to every "
                           "client while its memory stays held; set maxmemory-policy noeviction");
}

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

}  // namespace mcd
