// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The Redis key layout of the contract (man memcuda(7)), in one place.
#pragma once

#include <string>
#include <string_view>

#include "memcuda/export.h"

namespace mcd {

inline constexpr const char* kDefaultQueue = "tensor_lifecycle";
inline constexpr const char* kDefaultPrefix = "mcd";

struct MCD_API KeySpace {
  std::string prefix = kDefaultPrefix;
  std::string queue = kDefaultQueue;

  // <prefix>:tensor:{NAME}: every key of one tensor shares the hash tag {NAME}.
  std::string Tensor(std::string_view name) const;
  // The name inside a tensor key, or "" when the key is not one.
  std::string NameFromTensorKey(std::string_view key) const;
  // SCAN pattern for tensors whose name matches `glob` ("*" for all).
  std::string TensorPattern(std::string_view glob) const;
  std::string Reply(std::string_view req) const;        // <prefix>:reply:<req>, a list
  std::string Done(std::string_view req) const;         // <prefix>:req:<req>, the first result
  std::string Server(std::string_view node) const;      // <prefix>:server:<node>, the heartbeat
  std::string Processing(std::string_view node) const;  // <prefix>:processing:<node>
  // <queue>:<node>, a list: the commands for that node's server. Servers also relay what is
  // pushed onto the shared `queue` (the minimal redis-cli form) into their own (memcuda(7),
  // COMMANDS).
  std::string NodeQueue(std::string_view node) const;
  // <prefix>:holders:<node>, a set: the processes of the node that hold references ("PID:START").
  std::string Holders(std::string_view node) const;
  // <prefix>:held:<node>:<holder>, a set: the tensor keys whose references `holder` holds.
  std::string Held(std::string_view node, std::string_view holder) const;
  // <prefix>:copy:<id>, a string with a TTL: a server's grant to read a tensor of another
  // node's server, used up by that server (memcuda(7), TRUST).
  std::string CopyGrant(std::string_view id) const;
  // <prefix>:set:{NAME}, a list: the tensor keys of the members of tensor set NAME, written with
  // them (memcuda(7), TENSOR SETS).
  std::string Set(std::string_view name) const;
  // <prefix>:setm:{NAME}, a hash: each member of tensor set NAME still alive, by name, with its
  // fixed fields in one value (SetRecordValue), written and trimmed with the list, so that a
  // get of the whole set reads one key rather than every member's hash.
  std::string SetRecord(std::string_view name) const;
  // <prefix>:members:<id>, a list with a TTL: the members of a create_set command, one JSON
  // object each, pushed by its client before the command.
  std::string Members(std::string_view id) const;
  // <prefix>:events, a stream: the lifecycle events of every node (memcuda/events.h).
  std::string Events() const;
  // <prefix>:-, named among a script's KEYS where a call has no such key. Never read nor
  // written; inside the prefix, so that a Redis user whose ACL covers the prefix may run it.
  std::string Unused() const;
};

}  // namespace mcd
