// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/redis.h"

#include <gtest/gtest.h>

#include <thread>

#include "test_support.h"

namespace mcd {
namespace {

TEST(RedisUrl, ParsesTheRedisCliGrammar) {
  auto u = RedisUrl::Parse("redis://alice:s%40cret@10.0.0.5:6380/3");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->is_unix);
  EXPECT_EQ(u->host, "10.0.0.5");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->user, "alice");
  EXPECT_EQ(u->password, "s@cret");
  EXPECT_EQ(u->db, 3);
  EXPECT_EQ(u->Redacted(), "redis://alice:***@10.0.0.5:6380/3");

  auto s = RedisUrl::Parse("unix:///run/redis.sock?db=2");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->is_unix);
  EXPECT_EQ(s->path, "/run/redis.sock");
  EXPECT_EQ(s->db, 2);

  auto d = RedisUrl::Parse("redis://localhost");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->port, 6379);
  EXPECT_EQ(RedisUrl::Parse("redis://[::1]:7000")->host, "::1");

  for (const char* bad : {"http://x", "redis://h:notaport", "redis://h:70000",
                          "unix://relative.sock", "redis://h/db", "unix:///s.sock?foo=1"}) {
    EXPECT_EQ(RedisUrl::Parse(bad).status().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(RedisUrl, ParsesTheSentinelFormOfRedisPy) {
  auto u =
      RedisUrl::Parse("redis-sentinel://bob:pw@10.0.0.1:26380,sentinel-b,[::1]:5000/mymaster/2");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_TRUE(u->via_sentinel());
  ASSERT_EQ(u->sentinels.size(), 3u);
  EXPECT_EQ(u->sentinels[0], (std::pair<std::string, int>{"10.0.0.1", 26380}));
  EXPECT_EQ(u->sentinels[1], (std::pair<std::string, int>{"sentinel-b", 26379}));
  EXPECT_EQ(u->sentinels[2], (std::pair<std::string, int>{"::1", 5000}));
  EXPECT_EQ(u->master, "mymaster");
  EXPECT_EQ(u->db, 2);
  EXPECT_EQ(u->user, "bob");
  EXPECT_EQ(u->password, "pw");
  EXPECT_EQ(u->Redacted(),
            "redis-sentinel://bob:***@10.0.0.1:26380,sentinel-b:26379,[::1]:5000/mymaster/2");
  EXPECT_EQ(RedisUrl::Parse(u->Redacted())->sentinels, u->sentinels);
  for (const char* bad :
       {"redis-sentinel://h:1", "redis-sentinel://h:1/", "redis-sentinel:///m",
        "redis-sentinel://h:x/m", "redis-sentinel://h:1,/m", "redis-sentinel://h:1/m/x"}) {
    EXPECT_EQ(RedisUrl::Parse(bad).status().code(), ErrorCode::kInvalidArgument) << bad;
  }
  // No sentinel answers: a clear error naming them, not a hang.
  auto none = RedisConnection::Connect(RedisUrl::Parse("redis-sentinel://127.0.0.1:1/m").value());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(none.status().message().find(
                "no sentinel of redis-sentinel://127.0.0.1:1/m named the master"),
            std::string::npos)
      << none.status().message();
}

TEST(Redis, UnixSocketAndTcpRoundTripBinarySafe) {
  for (bool tcp : {false, true}) {
    test::RedisServerOptions opts;
    opts.tcp = tcp;
    test::RedisServer server(opts);
    auto conn = server.Connect();
    std::string binary("a\0b\r\n%s\xff", 8);
    ASSERT_TRUE(conn->Command({"SET", "k", binary}).ok());
    auto got = conn->Command({"GET", "k"});
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->str, binary);
    auto pipelined_a = conn->Append({"INCR", "n"});
    auto pipelined_b = conn->Append({"INCR", "n"});
    ASSERT_TRUE(pipelined_a.ok() && pipelined_b.ok());
    EXPECT_EQ(conn->ReadReply()->integer, 1);
    EXPECT_EQ(conn->ReadReply()->integer, 2);
  }
}

TEST(Redis, SelectsTheDatabaseOfTheUrl) {
  test::RedisServer server;
  auto url = server.parsed_url();
  url.db = 5;
  auto conn = RedisConnection::Connect(url);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.value()->Command({"SET", "only-in-5", "1"}).ok());
  auto db0 = server.Connect();
  EXPECT_TRUE(db0->Command({"GET", "only-in-5"})->is_nil());
}

TEST(Redis, AclUserWithPasswordAndWrongPassword) {
  test::RedisServerOptions opts;
  opts.extra = {"user alice on >wonderland ~* &* +@all", "user default off"};
  test::RedisServer server(opts);
  auto url = server.parsed_url();
  url.user = "alice";
  url.password = "wonderland";
  auto ok = RedisConnection::Connect(url);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok.value()->Command({"PING"}).ok());

  url.password = "wrong";
  auto bad = RedisConnection::Connect(url);
  EXPECT_EQ(bad.status().code(), ErrorCode::kAuthFailed);
  EXPECT_EQ(bad.status().message().find("wrong"), std::string::npos) << "password leaked";

  url.user.clear();
  url.password.clear();
  auto anonymous = RedisConnection::Connect(url);
  ASSERT_TRUE(anonymous.ok());  // connecting works; commands are refused
  EXPECT_EQ(anonymous.value()->Command({"PING"}).status().code(), ErrorCode::kAuthFailed);
}

TEST(Redis, RefusedAndErrorsAreClear) {
  RedisUrl url;
  url.is_unix = true;
  url.path = "/nonexistent/redis.sock";
  auto refused = RedisConnection::Connect(url);
  EXPECT_EQ(refused.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("/nonexistent/redis.sock"), std::string::npos);

  test::RedisServer server;
  auto conn = server.Connect();
  ASSERT_TRUE(conn->Command({"SET", "s", "x"}).ok());
  EXPECT_EQ(conn->Command({"LPUSH", "s", "y"}).status().code(), ErrorCode::kUnexpectedReply);
  EXPECT_EQ(conn->Command({"NOSUCHCOMMAND"}).status().code(), ErrorCode::kRedisError);
  EXPECT_TRUE(conn->Command({"PING"}).ok());  // an error reply leaves the connection usable
}

TEST(Redis, CommandTimeoutIsReported) {
  test::RedisServer server;
  RedisOptions opts;
  opts.command_timeout_ms = 200;
  auto conn = RedisConnection::Connect(server.parsed_url(), opts);
  ASSERT_TRUE(conn.ok());
  auto slow = conn.value()->Command({"BLPOP", "empty", "2"});
  EXPECT_EQ(slow.status().code(), ErrorCode::kTimeout) << slow.status().ToString();
  ASSERT_TRUE(conn.value()->Reconnect().ok());
  EXPECT_TRUE(conn.value()->Command({"PING"}).ok());
}

TEST(Redis, ServerKilledMidCommandThenReconnect) {
  auto server = std::make_unique<test::RedisServer>();
  auto conn = server->Connect();
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    server->Kill();
  });
  auto blocked = conn->Command({"BLPOP", "never", "3"});
  killer.join();
  EXPECT_EQ(blocked.status().code(), ErrorCode::kUnavailable) << blocked.status().ToString();
  EXPECT_FALSE(conn->connected());
  EXPECT_TRUE(conn->awaiting_reply()) << "the BLPOP was sent: its outcome is unknown";
  EXPECT_EQ(conn->Command({"PING"}).status().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(conn->Reconnect().code(), ErrorCode::kUnavailable);  // still down
}

// A connection Redis closed while idle (a restart) is told from one that lost an answer: what
// goes on it never leaves (a Unix socket's write fails at once), or it is found dead before
// anything is sent (DropIfClosedByPeer, needed on TCP, where the first write still succeeds).
TEST(Redis, ARequestOnAConnectionRedisClosedIsKnownNotToHaveLeft) {
  for (bool tcp : {false, true}) {
    test::RedisServerOptions opts;
    opts.tcp = tcp;
    test::RedisServer server(opts);
    auto conn = server.Connect();
    ASSERT_TRUE(conn->Command({"PING"}).ok());
    conn->DropIfClosedByPeer();
    EXPECT_TRUE(conn->connected()) << "a live idle connection is kept (tcp " << tcp << ")";
    server.Restart();
    if (!tcp) {
      auto lost = conn->Command({"INCR", "n"});
      EXPECT_EQ(lost.status().code(), ErrorCode::kUnavailable) << lost.status().ToString();
      EXPECT_FALSE(conn->awaiting_reply()) << lost.status().ToString();
      ASSERT_TRUE(conn->Reconnect().ok());
      auto n = conn->Command({"GET", "n"});
      ASSERT_TRUE(n.ok());
      EXPECT_TRUE(n->is_nil()) << "the INCR reached Redis";
      server.Restart();
    }
    conn->DropIfClosedByPeer();
    EXPECT_FALSE(conn->connected()) << "tcp " << tcp;
    EXPECT_FALSE(conn->awaiting_reply());
    ASSERT_TRUE(conn->Reconnect().ok());
    conn->DropIfClosedByPeer();
    EXPECT_TRUE(conn->connected());
    EXPECT_EQ(conn->Command({"INCR", "n"})->integer, 1);
  }
}

}  // namespace
namespace {

// Redis's states that pass are "try again" (exit 75) with what to do; the rest keep their codes.
TEST(RedisErrors, StatesThatPassAreTryAgain) {
  for (const char* reply :
       {"LOADING Redis is loading the dataset in memory", "BUSY Redis is busy running a script",
        "MASTERDOWN Link with MASTER is down", "TRYAGAIN Multiple keys request during rehashing",
        "CLUSTERDOWN The cluster is down"}) {
    Status status = RedisErrorStatus("GET", reply);
    EXPECT_EQ(status.code(), ErrorCode::kTryAgain) << reply;
    EXPECT_EQ(ExitCodeFor(status.code()), 75);
    EXPECT_NE(status.message().find("try again"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(reply), std::string::npos) << status.message();
  }
  EXPECT_EQ(RedisErrorStatus("GET", "WRONGTYPE Operation against a key").code(),
            ErrorCode::kUnexpectedReply);
  EXPECT_EQ(RedisErrorStatus("AUTH", "WRONGPASS invalid username-password").code(),
            ErrorCode::kAuthFailed);
  EXPECT_EQ(RedisErrorStatus("SET", "OOM command not allowed").code(), ErrorCode::kRedisError);
  EXPECT_EQ(RedisErrorStatus("SET", "LOADINGX not a state").code(), ErrorCode::kRedisError);
}

// Each error word Redis starts a reply with reads as its class; a longer word that starts the
// same (BUSYKEY, LOADINGX) is not the state, and NOPERM counts inside a script's error too.
TEST(RedisErrors, EachErrorWordMapsToItsClass) {
  const std::pair<const char*, RedisRefusal> cases[] = {
      {"BUSY Redis is busy running a script. You can only call SCRIPT KILL", RedisRefusal::kPasses},
      {"LOADING Redis is loading the dataset in memory", RedisRefusal::kPasses},
      {"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
       RedisRefusal::kPasses},
      {"TRYAGAIN Multiple keys request during rehashing of slot", RedisRefusal::kPasses},
      {"READONLY You can't write against a read only replica.", RedisRefusal::kPasses},
      {"CLUSTERDOWN The cluster is down", RedisRefusal::kPasses},
      {"NOSCRIPT No matching script. Please use EVAL.", RedisRefusal::kNoScript},
      {"NOPERM this user has no permissions to run the 'set' command", RedisRefusal::kNoPermission},
      {"ERR Error running script (call to f_x): @user_script:1: NOPERM this user has no "
       "permissions to access one of the keys used as arguments",
       RedisRefusal::kNoPermission},
      {"OOM command not allowed when used memory > 'maxmemory'.", RedisRefusal::kOther},
      {"WRONGTYPE Operation against a key holding the wrong kind of value",
       RedisRefusal::kWrongType},
      {"NOAUTH Authentication required.", RedisRefusal::kAuth},
      {"WRONGPASS invalid username-password pair or user is disabled.", RedisRefusal::kAuth},
      {"BUSYKEY Target key name already exists.", RedisRefusal::kOther},
      {"LOADINGX not a state", RedisRefusal::kOther},
      {"BUSY", RedisRefusal::kPasses},  // the word alone
      {"ERR unknown command 'FOO'", RedisRefusal::kOther},
      {"", RedisRefusal::kOther},
  };
  for (const auto& [reply, expected] : cases) {
    EXPECT_EQ(static_cast<int>(ClassifyRedisError(reply)), static_cast<int>(expected)) << reply;
  }
}

}  // namespace
}  // namespace mcd
