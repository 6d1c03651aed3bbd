// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Small text helpers shared by the protocol's validation and its JSON codec. Private.
#pragma once

#include <string>
#include <string_view>

#include "memcuda/status.h"

namespace mcd {

// [A-Za-z0-9._:/@+=,-]: the characters of names and request ids.
bool IsNameChar(char c);
// At most `max` characters of `text`, with anything outside printable ASCII shown as '?': safe
// to quote in an error message.
std::string Printable(std::string_view text, size_t max = 40);
inline Status Invalid(const std::string& message) {
  return Status(ErrorCode::kInvalidArgument, message);
}

}  // namespace mcd
