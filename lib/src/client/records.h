// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A tensor's record from an HMGET of its hash (the fields of TensorFieldNames(), in order).
#pragma once

#include <string>

#include "memcuda/protocol.h"
#include "memcuda/redis.h"

namespace mcd {

// kNotFound when every field is nil (no such hash); kUnexpectedReply when the reply has the
// wrong shape; a field's own error when one cannot be read.
Result<TensorRecord> RecordFromHmget(const std::string& name, RedisValue& reply);
// The same from an HGETALL, holders included.
Result<TensorRecord> RecordFromHgetall(const std::string& name, const RedisValue& reply);

// A delete command of `name` giving back a reference of `holder` (or, without one or when it
// holds none, one bound to nobody); its req, node and pid are added by Transport::Prepare.
// `own_only`: of a reference this client took, bound to `holder`, so never one bound to nobody
// (Command::own_only).
Command DeleteCommand(const std::string& name, const std::optional<Holder>& holder,
                      bool own_only = false);

}  // namespace mcd
