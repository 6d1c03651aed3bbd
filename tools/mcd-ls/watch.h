// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-ls --watch: the lifecycle events as they happen (memcuda/events.h), as table lines or JSON
// lines, from now or from a point in the kept history, until interrupted. See mcd-ls(1).
#pragma once

#include <cstdint>
#include <string>

#include "memcuda/client.h"

namespace mcd::tools {

struct WatchOptions {
  std::string glob = "*";  // tensor names; server events are shown whatever it is
  bool json = false;
  bool headers = true;
  std::string since;  // "" from now; a duration back (5m), "all", or an event id to go on after
  int64_t count = 0;  // stop after this many events (0: never)
  std::string node;   // only this node's events ("" for all)
};

// Prints events until interrupted (or `count` were printed); returns the exit code.
int Watch(const char* tool, const ClientOptions& client, const WatchOptions& options);

}  // namespace mcd::tools
