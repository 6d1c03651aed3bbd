// The server's reply texts and its reading of Redis's refusals. Private to the server.
#pragma once

#include <string>

#include "memcuda/protocol.h"
#include "memcuda/status.h"

namespace mcd {

// {"ok":false,"error":{"code":..,"message":..},"req":..,"op":..} (req and op when known).
std::string ErrorReply(const std::string& req, const char* op, const Status& status);
// The start of a success reply, up to the tensor object: {"ok":true,"op":..,"req":..,"tensor":
std::string ReplyHead(const std::string& req, Op op);
// Redis's own words from a refused commit, without the script's name and line.
std::string RedisWords(const Status& status);
// A refusal that may pass: Redis busy with another script, loading, failing over, without the
// scripts for a moment, or an ACL being changed.
bool MayPass(const std::string& words);

}  // namespace mcd
