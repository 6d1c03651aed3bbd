// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The helpers the mcd-* tools share, tested without a Redis or a server.
#include "tool_common.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "npy.h"
#include "test_support.h"

namespace mcd::tools {
namespace {

// No byte sequence a terminal would act on reaches it: C0, DEL and C1 controls in any form
// (8-bit, UTF-8, overlong), bytes that are not UTF-8, and the bidi controls that reorder a line.
TEST(Escaped, ShowsEveryControlAndStrayByteAndKeepsPrintableUtf8) {
  struct Case {
    std::string in, out;
  };
  const Case cases[] = {
      {"plain name.7", "plain name.7"},
      {"a\nb\tc\rd\\e", "a\\nb\\tc\\rd\\\\e"},
      {"\x1b[2J\x07\x7f", "\\x1b[2J\\x07\\x7f"},
      {std::string("\0z", 2), "\\x00z"},
      {"\xc2\x9b"
       "1m",
       "\\u009b1m"},  // C1 CSI as UTF-8
      {"\x9b"
       "1m",
       "\\x9b1m"},                 // C1 CSI as one byte
      {"\xff\xfe", "\\xff\\xfe"},  // never UTF-8
      {"\xc0\x9b", "\\xc0\\x9b"},  // overlong ESC-like forms
      {"\xe0\x82\x9b", "\\xe0\\x82\\x9b"},
      {"\xed\xa0\x80", "\\xed\\xa0\\x80"},           // a surrogate
      {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // past U+10FFFF
      {"\xe2\x82", "\\xe2\\x82"},                    // cut short
      {"\xe2\x82x", "\\xe2\\x82x"},
      {"a\xe2\x80\xae"
       "b",
       "a\\u202eb"},  // RIGHT-TO-LEFT OVERRIDE
      {"\xe2\x80\xaa\xe2\x81\xa6\xe2\x81\xa9\xe2\x80\x8f\xd8\x9c",
       "\\u202a\\u2066\\u2069\\u200f\\u061c"},
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82 \xc2\xa0",
       "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82 \xc2\xa0"},
  };
  for (const Case& c : cases) EXPECT_EQ(Escaped(c.in), c.out) << "of the bytes of " << c.out;
}

}  // namespace
}  // namespace mcd::tools

namespace mcd::tools {
namespace {

// A version 1.0 .npy of `descr` and `shape` (as NumPy writes the header), then `data`.
std::string Npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

// What ReadNpy refuses: no shape the file does not state, no bytes its header does not cover.
TEST(ReadNpy, RefusesZeroDimensionalArraysAndBytesPastTheData) {
  test::TempDir dir;
  const std::string data = test::RandomBytes(16, 7);
  auto read = [&](const std::string& contents) {
    std::string path = dir.path() + "/a.npy";
    std::ofstream(path, std::ios::binary) << contents;
    return ReadNpy(path);
  };
  auto whole = read(Npy("|u1", "(16,)", data));
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->data, data);
  auto scalar = read(Npy("<f4", "()", data.substr(0, 4)));
  ASSERT_FALSE(scalar.ok()) << "made shape " << ShapeText(scalar->shape);
  EXPECT_EQ(scalar.status().code(), ErrorCode::kInvalidArgument) << scalar.status().ToString();
  auto trailing = read(Npy("|u1", "(16,)", data + "x"));
  ASSERT_FALSE(trailing.ok());
  EXPECT_EQ(trailing.status().code(), ErrorCode::kIoError) << trailing.status().ToString();
  auto short_data = read(Npy("|u1", "(16,)", data.substr(1)));
  EXPECT_EQ(short_data.status().code(), ErrorCode::kIoError);
}

// --print takes a count: -1 is a usage error, not "all of them".
TEST(McdGet, RefusesANegativePrintCount) {
  auto get = test::Run({test::ToolPath("mcd-get"), "x", "--print", "-1", "--no-ref"}, {});
  EXPECT_EQ(get.exit_code, 64) << get.out << get.err;
}

}  // namespace
}  // namespace mcd::tools
