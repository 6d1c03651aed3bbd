// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Grants: what keeps copies between nodes inside the trust domain (memcuda(7), TRUST). The copy
// service's UCX worker takes messages from whoever reaches it, and its address is no secret, so a
// server serves a read only against a grant. The asking server writes a grant into the Redis it
// shares with the serving one: a key <prefix>:copy:<id> holding 128 random bits (the token) and
// what they grant (the serving node, the tensor, its ctime, the asking node), with a TTL; its
// READ carries id and token. The serving server compares what the key holds with what the read
// says and deletes it only when they match, in one script (a grant serves once); the comparison
// is of SHA-1 digests, so its time tells nothing of the value. So only a holder of Redis
// credentials that may write under the serving server's prefix can make a grant: a stranger's
// READ, or a stranger's server with a Redis of its own, gets nothing. The id, not the token,
// names the key: other Redis users may see key names (SCAN), not values, and a read with the
// id and a wrong token leaves the grant as it was.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/process.h"  // SecureRandom
#include "memcuda/keys.h"
#include "memcuda/redis.h"
#include "memcuda/status.h"
#include "server/copy_service.h"

namespace mcd {

// What a grant's key holds: the token and what it grants, one field a line (the name last).
std::string CopyGrantValue(std::string_view token, std::string_view serving_node,
                           std::string_view asker_node, int64_t ctime_ms, std::string_view name);

// What the grants need of the server's options.
struct CopyGrantsOptions {
  RedisUrl redis_url;  // for their own connection
  KeySpace keys;
  std::string node;  // the node served
};

// The grants of one server, on a Redis connection of their own (the serving loop's may have
// commands in flight). Main thread of the server.
class CopyGrants {
 public:
  explicit CopyGrants(CopyGrantsOptions opt) : opt_(std::move(opt)) {}

  // Writes a grant for this node to read `name`, created at `ctime_ms`, of `serving_node`; Redis
  // drops it after `ttl_ms` unless it is used or withdrawn first.
  Result<CopyGrant> Issue(const std::string& serving_node, const std::string& name,
                          int64_t ctime_ms, int ttl_ms);
  // Deletes a grant the serving server may not have used (its fetch failed).
  void Withdraw(const CopyGrant& grant);
  // For each read, in order: Ok when its grant was in Redis and granted what the read asks of
  // this node (the grant is used up then), kPermissionDenied when not (a grant the read names
  // with another token, or for something else, stays), kUnavailable when Redis could not be
  // asked.
  std::vector<Status> Redeem(const std::vector<CopyService::Read>& reads);

 private:
  static constexpr std::chrono::milliseconds kMinBackoff{500};
  static constexpr std::chrono::milliseconds kMaxBackoff{8000};

  // The connection, or kUnavailable at once while the backoff after a failure lasts.
  Result<RedisConnection*> Connection();
  // The connection failed: dropped, and no new one tried for the backoff, which doubles.
  void Lost();
  // Redis answered: the backoff starts small again.
  void Answered();

  const CopyGrantsOptions opt_;
  std::unique_ptr<RedisConnection> conn_;
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_ = kMinBackoff;
};

}  // namespace mcd
