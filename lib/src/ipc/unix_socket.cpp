// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "ipc/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mcd {
namespace {

Status Errno(ErrorCode code, const std::string& what) {
  return Status(code, what + ": " + std::strerror(errno));
}

Result<sockaddr_un> Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status(ErrorCode::kInvalidArgument, "socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

Result<UniqueFd> ListenUnix(const std::string& path, const PeerPolicy& policy, int backlog) {
  MCD_ASSIGN_OR_RETURN(sockaddr_un addr, Address(path));
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Errno(ErrorCode::kIoError, "socket");
  unlink(path.c_str());
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno(ErrorCode::kIoError, "bind " + path);
  }
  // Connecting needs write permission on the file, so this keeps other users out before the
  // credential check, which is the real gate.
  bool grouped = policy.group != static_cast<gid_t>(-1);
  chmod(path.c_str(), grouped ? 0660 : 0600);
  // No chown where the file has the group already (a service whose Group= is the pool group):
  // its sandbox may deny the call itself.
  struct stat st {};
  bool has_group = stat(path.c_str(), &st) == 0 && st.st_gid == policy.group;
  if (grouped && !has_group && chown(path.c_str(), static_cast<uid_t>(-1), policy.group) != 0) {
    Status status = Errno(ErrorCode::kPermissionDenied, "chown " + path);
    unlink(path.c_str());
    return status;
  }
  if (listen(fd.get(), backlog) != 0) {
    Status status = Errno(ErrorCode::kIoError, "listen " + path);
    unlink(path.c_str());
    return status;
  }
  return fd;
}

bool PeerAllowed(int conn, const PeerPolicy& policy, std::string& who) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  who = "pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid);
  // Root may use any socket of the machine anyway (it can read the server's memory): refusing
  // it would only break root-run tools against a server of another user.
  if (cred.uid == policy.uid || cred.uid == 0) return true;
  if (policy.group == static_cast<gid_t>(-1)) return false;
  if (cred.gid == policy.group) return true;
  // Supplementary groups of the peer, from /proc (same machine by construction).
  std::string status_path = "/proc/" + std::to_string(cred.pid) + "/status";
  FILE* f = std::fopen(status_path.c_str(), "r");
  if (f == nullptr) return false;
  char line[4096];
  bool allowed = false;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "Groups:", 7) != 0) continue;
    char* rest = line + 7;
    char* end = nullptr;
    for (long g = std::strtol(rest, &end, 10); end != rest; g = std::strtol(rest, &end, 10)) {
      if (static_cast<gid_t>(g) == policy.group) allowed = true;
      rest = end;
    }
  }
  std::fclose(f);
  return allowed;
}

Result<UniqueFd> ConnectUnix(const std::string& path, int timeout_ms, const std::string& what) {
  MCD_ASSIGN_OR_RETURN(sockaddr_un addr, Address(path));
  UniqueFd conn(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!conn) return Errno(ErrorCode::kIoError, "socket");
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(conn.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(conn.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno(errno == EACCES ? ErrorCode::kPermissionDenied : ErrorCode::kUnavailable,
                 "connect to " + what + " " + path);
  }
  return conn;
}

}  // namespace mcd
