// Private: a record from a reply already parsed (the client parses each reply once).
#pragma once

#include <cstdint>

#include "protocol/json_reader.h"
#include "memcuda/protocol.h"

namespace mcd {

// The tensor record in object node `object` of `doc`. Errors: kUnexpectedReply.
Result<TensorRecord> RecordFromJsonNode(const JsonReader& doc, uint32_t object);

}  // namespace mcd
