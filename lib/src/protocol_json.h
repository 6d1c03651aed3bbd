// Private: records from an already parsed JSON value (the client parses each reply once).
#pragma once

#include <nlohmann/json.hpp>

#include "memcuda/protocol.h"

namespace mcd {

Result<TensorRecord> RecordFromJsonObject(const nlohmann::json& doc);

}  // namespace mcd
