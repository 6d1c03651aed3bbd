// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Bytes as lowercase hex and back: process ids, epochs, primers, grant keys and the UCX worker's
// address are all written this way. Pure functions, any thread.
#pragma once

#include <string>
#include <string_view>

#include "memcuda/export.h"
#include "memcuda/status.h"

namespace mcd {

// Two lowercase digits per byte.
MCD_API std::string HexEncode(std::string_view bytes);
// The bytes of `hex` (either case); kInvalidArgument for an odd length or a non-hex character.
MCD_API Result<std::string> HexDecode(std::string_view hex);

}  // namespace mcd
