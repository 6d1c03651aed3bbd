// A tensor's record from an HMGET of its hash (the fields of TensorFieldNames(), in order).
#pragma once

#include <string>

#include "memcuda/protocol.h"
#include "memcuda/redis.h"

namespace mcd {

// kNotFound when every field is nil (no such hash); kUnexpectedReply when the reply has the
// wrong shape; a field's own error when one cannot be read.
Result<TensorRecord> RecordFromHmget(const std::string& name, RedisValue& reply);

// A delete command of `name` (its req, node and pid are added by Transport::Prepare).
Command DeleteCommand(const std::string& name);

}  // namespace mcd
