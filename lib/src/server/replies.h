// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The server's reading of Redis's refusals (its reply texts are the codec's:
// protocol/json_codec.h). Private to the server.
#pragma once

#include <string>

#include "memcuda/protocol.h"
#include "memcuda/redis.h"
#include "memcuda/status.h"

namespace mcd {

// Redis's own words from a refused commit, without the script's name and line.
std::string RedisWords(const Status& status);
// A refusal that may pass (ClassifyRedisError, memcuda/redis.h): Redis busy with another script,
// loading, failing over, without the scripts for a moment, or an ACL being changed.
bool MayPass(const std::string& words);
// Redis answered a command of the server's with an error (it did not run): kRedisError,
// kTryAgain for the states that pass, kPermissionDenied for its ACL (NOPERM).
inline bool RefusedByRedis(const Status& status) {
  return status.code() == ErrorCode::kRedisError || status.code() == ErrorCode::kTryAgain ||
         status.code() == ErrorCode::kPermissionDenied;
}

}  // namespace mcd
