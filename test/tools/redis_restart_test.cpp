// Redis restarts under a serving mcd-serve: what the server had taken is resumed once Redis has
// loaded its data, creates whose outcome was unknown are settled, and clients meeting a Redis
// that is loading wait for it within their timeout, or say "try again" (exit 75).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include "lifecycle_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

class RedisRestart : public Lifecycle {
 protected:
  // Whether Redis answers LOADING. A connection made as the load starts may be served only once
  // it is over: each look is a fresh connection with a short timeout.
  bool Loading() {
    RedisOptions options;
    options.command_timeout_ms = 300;
    auto conn = RedisConnection::Connect(redis_.parsed_url(), options);
    if (!conn.ok()) return false;
    auto reply = conn.value()->Command({"GET", "x"});
    return !reply.ok() && reply.status().code() == ErrorCode::kTryAgain;
  }
  bool LoadingSoon() { return test::WaitFor([&] { return Loading(); }, 5000); }
};

// Commands the server had taken when Redis went away are resumed once Redis has loaded its
// data, even though the reconnect first met LOADING.
TEST_F(RedisRestart, TakenCommandsAreResumedAfterASlowAofLoad) {
  PersistWithFiller(50000);
  // Taken but not committed, as a server that lost Redis mid-batch leaves them.
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  auto conn = redis_.Connect();
  for (int i = 0; i < 3; ++i) {
    std::string body = R"({"op":"create","name":"taken)" + std::to_string(i) +
                       R"(","dtype":"u8","shape":[8],"device":"cpu","req":"taken)" + std::to_string(i) + R"("})";
    ASSERT_TRUE(conn->Command({"LPUSH", keys_.Processing(node_), body}).ok());
  }
  conn.reset();
  RestartLoadingSlowly();
  ASSERT_TRUE(LoadingSoon());
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  ASSERT_TRUE(test::WaitFor([&] { return !Loading(); }, 60000));
  ASSERT_TRUE(test::WaitFor([&] { return HashField("taken2", "state") == "ready"; }, 10000)) << ServeLog();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(HashField("taken" + std::to_string(i), "refcount"), "1") << i;
  EXPECT_EQ(redis_.Connect()->Command({"LLEN", keys_.Processing(node_)})->integer, 0);
  EXPECT_EQ(ShmCount(), 3u);
  EXPECT_NE(ServeLog().find("resuming 3 unfinished command(s)"), std::string::npos) << ServeLog();
}

// A tool meeting a Redis that is loading waits for it within its timeout; past the timeout it
// exits 75 ("try again"), with nothing changed.
TEST_F(RedisRestart, ToolsWaitForALoadingRedisOrSayTryAgain) {
  ASSERT_EQ(Tool("mcd-create", {"kept", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code, 0);
  PersistWithFiller(50000);
  RestartLoadingSlowly();
  ASSERT_TRUE(LoadingSoon());
  auto hurried = Tool("mcd-get", {"kept", "--no-ref", "-q", "--timeout-ms", "200"});
  EXPECT_EQ(hurried.exit_code, 75) << hurried.err;
  EXPECT_NE(hurried.err.find("LOADING"), std::string::npos) << hurried.err;
  EXPECT_NE(hurried.err.find("try again"), std::string::npos) << hurried.err;
  auto hurried_rm = Tool("mcd-rm", {"kept", "--timeout-ms", "200"});
  EXPECT_EQ(hurried_rm.exit_code, 75) << hurried_rm.err;
  auto patient = Tool("mcd-get", {"kept", "--no-ref", "--json", "--timeout-ms", "60000"});
  EXPECT_EQ(patient.exit_code, 0) << patient.err;
  EXPECT_FALSE(Loading());
  EXPECT_EQ(json::parse(patient.out)["refcount"], 1) << patient.out;  // the hurried rm changed nothing
}

// A create whose commit never reached Redis (it was killed with the commit on the wire) is
// settled after the reconnect: no hash landed, so its memory is freed.
TEST_F(RedisRestart, ACreateWhoseCommitWasLostIsFreedAfterTheReconnect) {
  int fd = ConnectCommandSocket();
  ASSERT_GE(fd, 0);
  // Writes are held, so that the server's commit waits in Redis, which then dies.
  ASSERT_TRUE(redis_.Connect()->Command({"CLIENT", "PAUSE", "20000", "WRITE"}).ok());
  std::string line = R"({"op":"create","name":"lost","dtype":"u8","shape":[4],"device":"cpu"})" "\n";
  ASSERT_EQ(send(fd, line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));
  // The server allocated and sent the commit, which Redis holds.
  ASSERT_TRUE(test::WaitFor([&] { return ShmCount() == 1; }, 5000)) << ServeLog();
  redis_.Restart();  // the commit is lost with the process; no persistence
  std::string reply;
  char c = 0;
  while (recv(fd, &c, 1, 0) == 1 && c != '\n') reply.push_back(c);
  close(fd);
  EXPECT_NE(reply.find("may or may not have taken effect"), std::string::npos) << reply;
  ASSERT_TRUE(test::WaitFor([&] { return ServeLog().find("create of 'lost' whose outcome was unknown: it did not; freed") !=
                                         std::string::npos; },
                            10000))
      << ServeLog();
  EXPECT_TRUE(ShmFreedSoon());
  EXPECT_EQ(HashField("lost", "state"), "");
  ASSERT_TRUE(test::WaitFor([&] { return Heartbeat(); }, 5000));
  EXPECT_EQ(Tool("mcd-create", {"lost", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code, 0) << ServeLog();
}

// A Redis restarted from an AOF that lost its last second may bring back the hash of a tensor
// the server has freed: after the reconnect, a hash of this instance that names nothing it holds
// is removed, and one it holds that Redis lost is put back.
TEST_F(RedisRestart, AfterAReconnectPhantomHashesGoAndLostOnesComeBack) {
  ASSERT_EQ(Tool("mcd-create", {"kept", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code, 0);
  ASSERT_EQ(Tool("mcd-create", {"lost", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code, 0);
  auto conn = redis_.Connect();
  auto kept = conn->Command({"HGETALL", keys_.Tensor("kept")});
  std::vector<std::string> ghost = {"HSET", keys_.Tensor("ghost")};
  for (auto& e : kept->elements) ghost.push_back(e.str);
  ASSERT_TRUE(conn->Command(std::vector<std::string_view>(ghost.begin(), ghost.end())).ok());
  ASSERT_TRUE(conn->Command({"DEL", keys_.Tensor("lost")}).ok());
  // Every connection but this one dropped: the server reconnects and settles.
  ASSERT_TRUE(conn->Command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}).ok());
  ASSERT_TRUE(test::WaitFor([&] { return HashField("ghost", "state").empty() && HashField("lost", "state") == "ready"; },
                            10000))
      << ServeLog();
  std::string log = ServeLog();
  EXPECT_NE(log.find("removed the hash of tensor 'ghost', which Redis brought back"), std::string::npos) << log;
  EXPECT_NE(log.find("tensor 'lost' lost its hash with Redis; put it back"), std::string::npos) << log;
  EXPECT_EQ(HashField("kept", "refcount"), "1");
  EXPECT_EQ(ShmCount(), 2u);
}

}  // namespace
}  // namespace mcd
