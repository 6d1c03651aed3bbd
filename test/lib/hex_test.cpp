// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Hex encoding and decoding (common/hex.h), which ids, epochs, primers, grant keys and the UCX
// worker's address all go through.
#include "common/hex.h"

#include <gtest/gtest.h>

#include <string>

namespace mcd {
namespace {

TEST(Hex, EncodesEveryByteAsTwoLowercaseDigits) {
  EXPECT_EQ(HexEncode(""), "");
  EXPECT_EQ(HexEncode(std::string("\x00\x01\x7f\x80\xab\xff", 6)), "00017f80abff");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string hex = HexEncode(all);
  ASSERT_EQ(hex.size(), 512u);
  EXPECT_EQ(hex.substr(0, 8), "00010203");
  EXPECT_EQ(hex.substr(2 * 0x9e, 4), "9e9f");
  EXPECT_EQ(hex.substr(504), "fcfdfeff");
}

TEST(Hex, DecodesWhatItEncodesAndEitherCase) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  auto back = HexDecode(HexEncode(all));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, all);
  auto upper = HexDecode("ABcdEf09");
  ASSERT_TRUE(upper.ok()) << upper.status().ToString();
  EXPECT_EQ(*upper, std::string("\xab\xcd\xef\x09", 4));
  auto empty = HexDecode("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

TEST(Hex, RefusesAnOddLengthOrANonHexCharacter) {
  for (const char* bad :
       {"0", "abc", "0g", "g0", "zz", "0G", "ZZ", "0x00", " 0", "0 ", "-1", "0:"}) {
    auto decoded = HexDecode(bad);
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_EQ(decoded.status().code(), ErrorCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(HexDecode(std::string("0\0", 2)).ok());
}

}  // namespace
}  // namespace mcd
