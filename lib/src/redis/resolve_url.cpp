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

}  // namespace mcd
