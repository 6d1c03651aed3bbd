// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "client/records.h"

#include <optional>
#include <vector>

namespace mcd {

Result<TensorRecord> RecordFromHmget(const std::string& name, RedisValue& reply) {
  if (reply.elements.size() != TensorFieldNames().size()) {
    return Status(ErrorCode::kUnexpectedReply, "HMGET reply for tensor '" + name + "'");
  }
  std::vector<std::optional<std::string>> values;
  values.reserve(reply.elements.size());
  bool any = false;
  for (RedisValue& v : reply.elements) {
    any = any || !v.is_nil();
    values.push_back(v.is_nil() ? std::nullopt : std::optional<std::string>(std::move(v.str)));
  }
  if (!any) return Status(ErrorCode::kNotFound, "no tensor named '" + name + "'");
  return RecordFromFields(name, values);
}

Result<TensorRecord> RecordFromHgetall(const std::string& name, const RedisValue& reply) {
  if (reply.elements.empty()) return Status(ErrorCode::kNotFound, "no tensor named '" + name + "'");
  return RecordFromHash(name, FieldMap(reply));
}

Command DeleteCommand(const std::string& name, const std::optional<Holder>& holder, bool own_only) {
  Command cmd;
  cmd.op = Op::kDelete;
  cmd.name = name;
  if (holder) {
    cmd.owner_pid = holder->pid;
    cmd.owner_start = holder->start;
    cmd.own_only = own_only;
  }
  return cmd;
}

}  // namespace mcd
