// The per-user runtime folder: $XDG_RUNTIME_DIR/memcuda when that is a writable folder, else
// /tmp/memcuda-<uid>. The server's sockets and a private Redis live there.
#pragma once

#include <string>

namespace mcd {

std::string RuntimeDir();
// Where `mcd-serve --spawn-redis` puts its Redis's socket, which the tools find with no URL set.
std::string PrivateRedisSocketPath();

}  // namespace mcd
