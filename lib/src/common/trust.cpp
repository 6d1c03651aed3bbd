// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "common/trust.h"

#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace mcd {
namespace {

// A user's passwd entry, by the reentrant lookup `lookup` (getpwnam_r, getpwuid_r): a client opens
// tensors from more than one thread (a large batched get's chunks), and getpwnam's answer lives
// in storage every thread shares. The buffer grows while the entry does not fit. Null with
// `*err` 0: no such user; with `*err` set: the lookup itself failed.
template <typename Lookup>
std::optional<passwd> PasswdEntry(Lookup lookup, std::vector<char>& buffer, int* err) {
  long hint = sysconf(_SC_GETPW_R_SIZE_MAX);
  buffer.resize(hint > 0 ? static_cast<size_t>(hint) : 16384);
  passwd entry{};
  passwd* found = nullptr;
  int rc = 0;
  while ((rc = lookup(&entry, buffer.data(), buffer.size(), &found)) == ERANGE &&
         buffer.size() < (1u << 20)) {
    buffer.resize(buffer.size() * 2);
  }
  // Not found is rc 0 with no entry, or, by some NSS modules, one of these.
  *err = rc == ENOENT || rc == ESRCH || rc == EBADF || rc == EPERM ? 0 : rc;
  if (rc != 0 || found == nullptr) return std::nullopt;
  return entry;
}

// MCD_TRUSTED_USERS as uids. Read on every check, not once: a check is rare (a connection, a
// first open) and a test or a long-lived program may change the environment.
Result<std::vector<uid_t>> ExtraTrusted() {
  std::vector<uid_t> uids;
  const char* env = std::getenv("MCD_TRUSTED_USERS");
  if (env == nullptr) return uids;
  std::stringstream list(env);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    unsigned long number = std::strtoul(item.c_str(), &end, 10);
    if (*end == '\0' && number <= 0xfffffffeul) {
      uids.push_back(static_cast<uid_t>(number));
      continue;
    }
    std::vector<char> buffer;
    int err = 0;
    auto user = PasswdEntry(
        [&](passwd* entry, char* buf, size_t size, passwd** found) {
          return getpwnam_r(item.c_str(), entry, buf, size, found);
        },
        buffer, &err);
    if (!user && err != 0) {
      return Status(ErrorCode::kIoError,
                    "MCD_TRUSTED_USERS names '" + item +
                        "', which could not be looked up: " + std::strerror(err));
    }
    if (!user) {
      return Status(ErrorCode::kInvalidArgument,
                    "MCD_TRUSTED_USERS names '" + item + "', which is no user of this machine");
    }
    uids.push_back(user->pw_uid);
  }
  return uids;
}

std::string UserName(uid_t uid) {
  std::vector<char> buffer;
  int err = 0;
  auto user = PasswdEntry([&](passwd* entry, char* buf, size_t size,
                              passwd** found) { return getpwuid_r(uid, entry, buf, size, found); },
                          buffer, &err);
  return user ? std::string(user->pw_name) + " (uid " + std::to_string(uid) + ")"
              : "uid " + std::to_string(uid);
}

Status Untrusted(const std::string& what, uid_t owner) {
  return Status(ErrorCode::kPermissionDenied,
                what + " belongs to " + UserName(owner) +
                    ", a user this process does not trust: the heartbeat or hash that named "
                    "it may have been written by someone else. Set MCD_TRUSTED_USERS to the "
                    "server's user if that user runs mcd-serve for you");
}

// The process's pid in its own PID namespace (the last NSpid of /proc/<pid>/status), which is
// what a server in a container writes in its heartbeat; `pid` itself where the kernel shows no
// NSpid line.
int64_t InnermostPid(int64_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::stringstream fields(line.substr(6));
    int64_t value = pid;
    int64_t last = pid;
    while (fields >> value) last = value;
    return last;
  }
  return pid;
}

}  // namespace

Result<bool> TrustedUid(uid_t uid) {
  if (uid == geteuid() || uid == 0) return true;
  MCD_ASSIGN_OR_RETURN(std::vector<uid_t> extra, ExtraTrusted());
  for (uid_t trusted : extra) {
    if (trusted == uid) return true;
  }
  return false;
}

Status CheckServerPeer(int conn, int64_t server_pid, const std::string& what) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status(ErrorCode::kIoError, "SO_PEERCRED of " + what + ": " + std::strerror(errno));
  }
  MCD_RETURN_IF_ERROR(
      CheckOwner(cred.uid, what + ", served by pid " + std::to_string(cred.pid) + ","));
  // pid 0: the peer lives in a PID namespace this process cannot see into (a server outside
  // this container); its user was checked, which is what the kernel lets this side know.
  if (server_pid == 0 || cred.pid == 0 || cred.pid == server_pid) return Status::Ok();
  if (InnermostPid(cred.pid) == server_pid) return Status::Ok();
  return Status(ErrorCode::kPermissionDenied,
                what + " is served by pid " + std::to_string(cred.pid) +
                    ", not by the server process the node's heartbeat names (pid " +
                    std::to_string(server_pid) + "): the heartbeat is stale or forged");
}

Status CheckOwner(uid_t owner, const std::string& what) {
  MCD_ASSIGN_OR_RETURN(bool trusted, TrustedUid(owner));
  return trusted ? Status::Ok() : Untrusted(what, owner);
}

Status CheckProcessOwner(int64_t pid, const std::string& what) {
  struct stat st {};
  std::string named = what + " (pid " + std::to_string(pid) + ")";
  if (stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0)
    return Status(ErrorCode::kNotFound, named + " is gone");
  return CheckOwner(st.st_uid, named);
}

}  // namespace mcd
