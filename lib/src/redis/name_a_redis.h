// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// How a user names a Redis, for the errors that meet none: ResolveRedisUrl finding nothing
// configured, and a connection from a RedisUrl{} that names none.
#pragma once

namespace mcd {

extern const char* const kNameARedis;

}  // namespace mcd
