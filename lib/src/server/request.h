// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A command as the server handles it: where it came from and its reply goes (its route), its
// text, its request id and what parsing it made of it. Made by Intake, handed by value through
// the applier, the responder and the continuation of its commit. Main thread of the server only.
#pragma once

#include <cstdint>
#include <string>

#include "memcuda/protocol.h"
#include "memcuda/status.h"

namespace mcd {

// Where a command came from and its reply goes: the lifecycle list (conn 0), or a connection of
// the command socket, whose commands are answered there and leave no reply in Redis.
struct Route {
  uint64_t conn = 0;
  uint64_t token = 0;  // this command's, among those of the socket waiting for a reply
  bool socket() const { return conn != 0; }
};

struct Request {
  Route route;
  std::string raw;  // the command's line, as taken (the processing list holds it so)
  std::string req;  // its request id, "" when it has none or did not parse
  Result<Command> parsed = Status(ErrorCode::kInvalidArgument, "not parsed");
  bool overlong = false;  // a socket line over kMaxCommandBytes (its connection is closed)
};

}  // namespace mcd
