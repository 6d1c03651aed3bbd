// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// RecordReads (record_reads.h): tensor records read from Redis. The client's thread.
#include "client/record_reads.h"

#include <algorithm>

#include "client/records.h"

namespace mcd {

Result<TensorRecord> RecordReads::Stat(const std::string& name) {
  std::string key = keys_.Tensor(name);
  std::vector<std::string_view> argv = {"HMGET", key};
  for (const std::string& field : TensorFieldNames()) argv.push_back(field);
  MCD_ASSIGN_OR_RETURN(RedisValue reply, redis_.Command(argv));
  auto record = RecordFromHmget(name, reply);
  if (record.status().code() == ErrorCode::kNotFound) return server_.Missing(name);
  return record;
}

Result<std::vector<std::string>> RecordReads::ListNames(const std::string& glob) {
  std::vector<std::string> out;
  Status scanned =
      redis_.Scan(keys_.TensorPattern(glob), 5000, [&](const std::vector<RedisValue>& keys) {
        for (const RedisValue& key : keys) {
          std::string name = keys_.NameFromTensorKey(key.str);
          if (!name.empty()) out.push_back(std::move(name));
        }
        return Status::Ok();
      });
  MCD_RETURN_IF_ERROR(scanned);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());  // SCAN may repeat a key
  return out;
}

Result<std::vector<TensorRecord>> RecordReads::List(const std::string& glob,
                                                    std::vector<std::string>* unreadable,
                                                    bool holders) {
  // The names first (SCAN, sorted, deduplicated), then their fields with pipelined HMGETs (or,
  // for the holders too, HGETALLs) in windows: while this process parses one window, Redis
  // already answers the next.
  MCD_ASSIGN_OR_RETURN(std::vector<std::string> names, ListNames(glob));
  const auto& fields = TensorFieldNames();
  std::string fields_resp;  // the same for every key
  if (!holders) {
    for (const std::string& field : fields) RespArg(fields_resp, field);
  }
  std::string head = RespCommand(holders ? 2 : 2 + fields.size());
  RespArg(head, holders ? "HGETALL" : "HMGET");
  auto append = [&](const std::string& name) {
    std::string resp = head;
    RespArg(resp, keys_.Tensor(name));
    resp += fields_resp;
    return redis_.AppendFormatted(resp);
  };
  constexpr size_t kWindow = 1000;
  std::vector<TensorRecord> out;
  out.reserve(names.size());
  Status refused = Status::Ok();
  std::vector<std::string> vanished;
  size_t sent = 0;
  for (size_t read = 0; read < names.size(); ++read) {
    while (sent < names.size() && sent < read + 2 * kWindow)
      MCD_RETURN_IF_ERROR(append(names[sent++]));
    MCD_ASSIGN_OR_RETURN(RedisValue reply, redis_.ReadReply());
    if (reply.type == RedisValue::Type::kError && refused.ok()) {
      // Not this key's fault but this user's: the whole listing fails (once every reply
      // sent is read), rather than show a partial one.
      Status status = RedisErrorStatus(holders ? "HGETALL" : "HMGET", reply.str);
      if (status.code() == ErrorCode::kPermissionDenied) refused = status;
    }
    if (reply.type != RedisValue::Type::kArray) {
      bool wrong_type =
          reply.type == RedisValue::Type::kError && reply.str.rfind("WRONGTYPE", 0) == 0;
      if (unreadable)
        unreadable->push_back(names[read] + ": " + (wrong_type ? "not a hash" : reply.str));
      continue;
    }
    auto record =
        holders ? RecordFromHgetall(names[read], reply) : RecordFromHmget(names[read], reply);
    if (record.ok()) {
      out.push_back(std::move(record).value());
    } else if (record.status().code() == ErrorCode::kNotFound) {
      vanished.push_back(names[read]);
    } else if (unreadable) {
      unreadable->push_back(names[read] + ": " + record.status().message());
    }
  }
  if (!refused.ok()) return refused;
  if (unreadable) MCD_RETURN_IF_ERROR(NameFieldless(vanished, *unreadable));
  return out;
}

// Rare, so a round trip each.
Status RecordReads::NameFieldless(const std::vector<std::string>& vanished,
                                  std::vector<std::string>& unreadable) {
  for (const std::string& name : vanished) {
    MCD_ASSIGN_OR_RETURN(RedisValue exists, redis_.Command({"EXISTS", keys_.Tensor(name)}));
    if (exists.integer == 1)
      unreadable.push_back(name + ": a hash that holds none of a tensor's fields");
  }
  return Status::Ok();
}

}  // namespace mcd
