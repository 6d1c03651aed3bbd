// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/status.h"

#include <gtest/gtest.h>

namespace mcd {
namespace {

TEST(Status, NamesAreStableAndRoundTrip) {
  EXPECT_STREQ(ErrorName(ErrorCode::kOk), "ok");
  EXPECT_STREQ(ErrorName(ErrorCode::kNotFound), "not_found");
  EXPECT_STREQ(ErrorName(ErrorCode::kOutOfMemory), "out_of_memory");
  EXPECT_STREQ(ErrorName(static_cast<int32_t>(9999)), "unknown");
  for (int32_t code = 0; code <= static_cast<int32_t>(ErrorCode::kNotHeld); ++code) {
    auto back = ErrorCodeFromName(ErrorName(code));
    ASSERT_TRUE(back.has_value()) << code;
    EXPECT_EQ(static_cast<int32_t>(*back), code);
  }
}

TEST(Status, ExitCodesFollowTheTable) {
  EXPECT_EQ(ExitCodeFor(ErrorCode::kOk), 0);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kNotFound), 1);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kAlreadyExists), 1);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kInvalidArgument), 64);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kUnavailable), 69);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kInternal), 70);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kIoError), 74);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kTimeout), 75);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kTryAgain), 75);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kNotHeld), 1);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kUnexpectedReply), 76);
}

Result<int> Half(int x) {
  if (x % 2 != 0) return Status(ErrorCode::kInvalidArgument, "odd");
  return x / 2;
}

Status Quarter(int x, int& out) {
  MCD_ASSIGN_OR_RETURN(int half, Half(x));
  MCD_ASSIGN_OR_RETURN(out, Half(half));
  return Status::Ok();
}

TEST(Status, PropagationMacros) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, out).ok());
  EXPECT_EQ(out, 2);
  Status failed = Quarter(6, out);
  EXPECT_EQ(failed.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(failed.ToString(), "invalid_argument: odd");
}

}  // namespace
}  // namespace mcd
