#include "common/runtime_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

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

std::string PrivateRedisSocketPath() { return RuntimeDir() + "/redis.sock"; }

}  // namespace mcd
