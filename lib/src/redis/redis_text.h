// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A number of Redis's text and of its URLs, shared by the URL grammar (redis_url.cpp) and the
// connection's reading of a sentinel's answer (redis.cpp). Private to the library.
#pragma once

#include <string_view>

namespace mcd {

// `text` whole as a decimal int: false when empty, not a number, or out of range.
bool ParseInt(std::string_view text, int& out);

}  // namespace mcd
