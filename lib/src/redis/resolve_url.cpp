#include <sys/stat.h>

#include <cstdlib>

#include "common/runtime_dir.h"
#include "memcuda/redis.h"

namespace mcd {

Result<RedisUrl> ResolveRedisUrl(const std::string& flag_value) {
  std::string text = flag_value;
  for (const char* var : {"MCD_REDIS_URL", "REDIS_URL"}) {
    if (!text.empty()) break;
    const char* value = std::getenv(var);
    if (value != nullptr && value[0] != '\0') text = value;
  }
  if (text.empty()) {
    // The private Redis's socket, when there is one, and only in a runtime folder of this
    // user's own: one that another user made would hand this user's tensors to that user.
    std::string socket = PrivateRedisSocketPath();
    struct stat st {};
    bool present = lstat(socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
    if (present) MCD_RETURN_IF_ERROR(CheckOwnFolder(RuntimeDir()));
    text = present ? "unix://" + socket : "redis://127.0.0.1:6379";
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

}  // namespace mcd
