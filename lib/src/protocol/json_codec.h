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

}  // namespace mcd
