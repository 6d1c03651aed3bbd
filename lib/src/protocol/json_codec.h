// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The one JSON codec of the protocol: commands, replies and records, read and written with
// RapidJSON (Debian's rapidjson-dev, header-only). json_support.h says how; command_json.cpp and
// record_json.cpp hold the rest of the codec, whose entry points for users (ParseCommand,
// CommandToJson, RecordToJson, ...) are declared in memcuda/protocol.h; these three are the
// server's and the client's own. RapidJSON rather than nlohmann_json, which the tools use for
// their reports: on the create path the server parses a command and writes a record, and
// nlohmann costs several times more there (docs/design.md, "The JSON codec"). Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "memcuda/protocol.h"
#include "memcuda/status.h"

namespace mcd {

// The server's reply line: the record of a success, the error's code and message otherwise
// (kUnexpectedReply when it is not a reply).
Result<TensorRecord> RecordFromReply(std::string_view text);
// {"ok":false,"error":{"code":..,"message":..},"req":..,"op":..} (req and op when given).
std::string ErrorReplyJson(const std::string& req, const char* op, const Status& status);
// The start of a success reply, up to the tensor object: {"ok":true,"op":..,"req":..,"tensor":
std::string ReplyHeadJson(const std::string& req, Op op);

// A tensor's success reply (create, get, delete, publish, abandon) is assembled here and nowhere
// else: the record (RecordJsonHead) with its refcount, and after a delete or an abandon whether
// the tensor was freed. A get's or a delete's count is known only in Redis, at the change, so
// the reply is made of parts around it: commit.lua writes head, the count, then the tail for it,
// exactly as TensorReplyJson does.
struct TensorReplyParts {
  std::string head;        // {"ok":true,...,"tensor":{...,"refcount":
  const char* held_tail;   // after a count > 0
  const char* freed_tail;  // after "0", for a count <= 0
};
TensorReplyParts TensorReplyHead(const std::string& req, Op op, std::string_view record_head);
// The reply at `refcount` from its parts.
std::string TensorReplyJson(std::string head, long long refcount, std::string_view held_tail,
                            std::string_view freed_tail);
// The reply of `op` at a count known here (a create's or a publish's 1, an abandon's 0).
std::string TensorReplyJson(const std::string& req, Op op, std::string_view record_head,
                            long long refcount);

}  // namespace mcd
