// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The server's reading of Redis's refusals of a commit (server/replies.h): RedisWords strips what
// the pipeline adds around Redis's own words, MayPass says which refusals the server tries
// again later. Pure functions; main thread.
#include "server/replies.h"

#include <gtest/gtest.h>

#include <string>

namespace mcd {
namespace {

TEST(Replies, RedisWordsAreTheRefusalWithoutTheCommandAndTheScriptsName) {
  Status refused(ErrorCode::kRedisError,
                 "Redis EVALSHA: NOPERM this user has no permissions to access one of the keys "
                 "script: 1b2c3d, on @user_script:12.");
  EXPECT_EQ(RedisWords(refused), "NOPERM this user has no permissions to access one of the keys");
  EXPECT_EQ(RedisWords(Status(ErrorCode::kRedisError, "LOADING Redis is loading the dataset")),
            "LOADING Redis is loading the dataset");
}

TEST(Replies, StatesThatPassAndNoPermissionAnywherePass) {
  for (const char* words :
       {"LOADING Redis is loading the dataset in memory",
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down", "READONLY You can't write against a read only replica.",
        "NOSCRIPT No matching script.",
        "NOPERM this user has no permissions to run the 'evalsha' command",
        "ERR Error running script (call to f_1b2c): @user_script:3: NOPERM this user has no "
        "permissions to access one of the keys",
        "BUSY"}) {
    EXPECT_TRUE(MayPass(words)) << words;
  }
}

TEST(Replies, OtherRefusalsAndWordsThatOnlyBeginLikeAPassingOneDoNotPass) {
  for (const char* words :
       {"BUSYKEY Target key name already exists.", "LOADINGX", "READONLYISH no",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "OOM command not allowed when used memory > 'maxmemory'.", "ERR unknown command 'FOO'",
        "NOAUTH Authentication required.", "WRONGPASS invalid username-password pair", ""}) {
    EXPECT_FALSE(MayPass(words)) << words;
  }
}

}  // namespace
}  // namespace mcd
