// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Reading tensor records without touching them: one hash (Stat), the names that match a glob
// (SCAN), and the records of all of them (pipelined HMGETs or HGETALLs in windows). One try
// each: the caller retries while Redis is away (RedisRetry). Used by one Client, so by one thread
// at a time.
#pragma once

#include <string>
#include <vector>

#include "client/server_view.h"
#include "memcuda/keys.h"
#include "memcuda/protocol.h"
#include "memcuda/redis.h"

namespace mcd {

class RecordReads {
 public:
  // `server` says what a hash found missing means (ServerView::Missing).
  RecordReads(RedisConnection& redis, const KeySpace& keys, ServerView& server)
      : redis_(redis), keys_(keys), server_(server) {}

  // The record of `name` (a valid name), or kNotFound.
  Result<TensorRecord> Stat(const std::string& name);
  // The names of the tensors that match `glob`, sorted, each once.
  Result<std::vector<std::string>> ListNames(const std::string& glob);
  // The records of those tensors, sorted by name; `unreadable`, `holders`: as Client::List.
  Result<std::vector<TensorRecord>> List(const std::string& glob,
                                         std::vector<std::string>* unreadable, bool holders);

 private:
  // Keys whose HMGET found none of a tensor's fields: deleted since the SCAN, or hashes that
  // hold none of them (written by hand), which are named unreadable.
  Status NameFieldless(const std::vector<std::string>& vanished,
                       std::vector<std::string>& unreadable);

  RedisConnection& redis_;
  const KeySpace& keys_;
  ServerView& server_;
};

}  // namespace mcd
