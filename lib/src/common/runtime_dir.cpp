// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "common/runtime_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

Result<std::string> OwnRuntimeDir() {
  std::string dir = RuntimeDir();
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status(ErrorCode::kIoError, "mkdir " + dir + ": " + std::strerror(errno));
  }
  MCD_RETURN_IF_ERROR(CheckOwnFolder(dir));
  return dir;
}

Status CheckOwnFolder(const std::string& dir) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    return Status(ErrorCode::kIoError, "cannot look at " + dir + ": " + std::strerror(errno));
  }
  std::string wrong;
  if (!S_ISDIR(st.st_mode)) {
    wrong = "is not a folder";
  } else if (st.st_uid != geteuid()) {
    wrong = "belongs to uid " + std::to_string(st.st_uid) + ", not to this user (" +
            std::to_string(geteuid()) + ")";
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    wrong = std::string("is open to other users (mode ") + mode + ", not 0700)";
  }
  if (wrong.empty()) return Status::Ok();
  return Status(ErrorCode::kPermissionDenied,
                "the runtime folder " + dir + " " + wrong +
                    ": another user could see and steer what is in it; remove it, or set "
                    "XDG_RUNTIME_DIR to a folder of your own");
}

std::string PrivateRedisSocketPath() { return RuntimeDir() + "/redis.sock"; }

}  // namespace mcd
