// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/runtime_dir.h"
#include "memcuda/redis.h"
#include "redis/name_a_redis.h"

namespace mcd {
namespace {

// The first line of `path` (a file such as a systemd credential or a Docker secret).
Result<std::string> PasswordFromFile(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return Status(ErrorCode::kInvalidArgument,
                  "MCD_REDIS_PASSWORD_FILE: cannot read " + path + ": " + std::strerror(errno));
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace

Result<RedisUrl> ResolveRedisUrl(const std::string& flag_value) {
  std::string text = flag_value;
  for (const char* var : {"MCD_REDIS_URL", "REDIS_URL"}) {
    if (!text.empty()) break;
    const char* value = std::getenv(var);
    if (value != nullptr && value[0] != '\0') text = value;
  }
  bool found = text.empty();
  if (found) {
    // The private Redis's socket, when there is one, and only in a runtime folder of this
    // user's own: one that another user made would hand this user's tensors to that user.
    // Nothing else is guessed: whoever listens on a default port would be sent the password.
    std::string socket = PrivateRedisSocketPath();
    struct stat st {};
    if (lstat(socket.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
      return Status(ErrorCode::kUnavailable, "no Redis named and no private Redis running (no " +
                                                 socket + "): " + kNameARedis);
    }
    MCD_RETURN_IF_ERROR(CheckOwnFolder(RuntimeDir()));
    text = "unix://" + socket;
  }
  MCD_ASSIGN_OR_RETURN(RedisUrl url, RedisUrl::Parse(text));
  url.found = found;
  if (!url.password.empty()) return url;
  const char* value = std::getenv("MCD_REDIS_PASSWORD");
  const char* file = std::getenv("MCD_REDIS_PASSWORD_FILE");
  if (value != nullptr && value[0] != '\0') {
    url.password = value;
  } else if (file != nullptr && file[0] != '\0') {
    MCD_ASSIGN_OR_RETURN(url.password, PasswordFromFile(file));
  } else if ((value = std::getenv("REDISCLI_AUTH")) != nullptr) {
    url.password = value;
  }
  return url;
}

}  // namespace mcd
