// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Redis restarts under a serving mcd-serve: what the server had taken is resumed once Redis has
// loaded its data, creates whose outcome was unknown are settled, and clients meeting a Redis
// that is loading wait for it within their timeout, or say "try again" (exit 75).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

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
  bool LoadingSoon() {
    return test::WaitFor([&] { return Loading(); }, 5000);
  }
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
                       R"(","dtype":"u8","shape":[8],"device":"cpu","req":"taken)" +
                       std::to_string(i) + R"("})";
    ASSERT_TRUE(conn->Command({"LPUSH", keys_.Processing(node_), body}).ok());
  }
  conn.reset();
  RestartLoadingSlowly();
  ASSERT_TRUE(LoadingSoon());
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  ASSERT_TRUE(test::WaitFor([&] { return !Loading(); }, 60000));
  ASSERT_TRUE(test::WaitFor([&] { return HashField("taken2", "state") == "ready"; }, 10000))
      << ServeLog();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(HashField("taken" + std::to_string(i), "refcount"), "1") << i;
  EXPECT_EQ(redis_.Connect()->Command({"LLEN", keys_.Processing(node_)})->integer, 0);
  EXPECT_EQ(ShmCount(), 3u);
  EXPECT_NE(ServeLog().find("resuming 3 unfinished command(s)"), std::string::npos) << ServeLog();
}

// A tool meeting a Redis that is loading waits for it within its timeout; past the timeout it
// exits 75 ("try again"), with nothing changed.
TEST_F(RedisRestart, ToolsWaitForALoadingRedisOrSayTryAgain) {
  ASSERT_EQ(
      Tool("mcd-create", {"kept", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
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
  EXPECT_EQ(json::parse(patient.out)["refcount"], 1)
      << patient.out;  // the hurried rm changed nothing
}

// A create whose commit never reached Redis (it was killed with the commit on the wire) is
// settled after the reconnect: no hash landed, so its memory is freed.
TEST_F(RedisRestart, ACreateWhoseCommitWasLostIsFreedAfterTheReconnect) {
  int fd = ConnectCommandSocket();
  ASSERT_GE(fd, 0);
  // The serving loop blocked in its take first: a look at the queue that it sends while it
  // spins (after startup, or a command) would wait out the pause instead of the take's call-off.
  ASSERT_TRUE(test::WaitFor(
      [&] {
        auto clients = redis_.Connect()->Command({"CLIENT", "LIST"});
        if (!clients.ok()) return false;
        std::istringstream lines(clients->str);
        for (std::string client; std::getline(lines, client);) {
          size_t flags = client.find(" flags=");
          if (flags == std::string::npos || client.find(" cmd=blmove") == std::string::npos)
            continue;
          std::string value = client.substr(flags + 7, client.find(' ', flags + 7) - flags - 7);
          if (value.find('b') != std::string::npos) return true;  // blocked
        }
        return false;
      },
      10000));
  // Writes are held, so that the server's commit waits in Redis, which then dies.
  ASSERT_TRUE(redis_.Connect()->Command({"CLIENT", "PAUSE", "20000", "WRITE"}).ok());
  std::string line = R"({"op":"create","name":"lost","dtype":"u8","shape":[4],"device":"cpu"})"
                     "\n";
  ASSERT_EQ(send(fd, line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));
  // The server allocated and sent the commit, which Redis holds. Under the pause, its call-off
  // of the blocking take waits out the Waker's 2 s timeout and the take's own second first.
  ASSERT_TRUE(test::WaitFor([&] { return ShmCount() == 1; }, 15000)) << ServeLog();
  redis_.Restart();  // the commit is lost with the process; no persistence
  std::string reply;
  char c = 0;
  while (recv(fd, &c, 1, 0) == 1 && c != '\n') reply.push_back(c);
  close(fd);
  EXPECT_NE(reply.find("may or may not have taken effect"), std::string::npos) << reply;
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return ServeLog().find("create of 'lost' whose outcome was unknown: it did not; freed") !=
               std::string::npos;
      },
      10000))
      << ServeLog();
  EXPECT_TRUE(ShmFreedSoon());
  EXPECT_EQ(HashField("lost", "state"), "");
  ASSERT_TRUE(test::WaitFor([&] { return Heartbeat(); }, 5000));
  EXPECT_EQ(
      Tool("mcd-create", {"lost", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code, 0)
      << ServeLog();
}

// A Redis restarted from an AOF that lost its last second may bring back the hash of a tensor
// the server has freed: after the reconnect, a hash of this instance that names nothing it holds
// is removed, and one it holds that Redis lost is put back.
TEST_F(RedisRestart, AfterAReconnectPhantomHashesGoAndLostOnesComeBack) {
  ASSERT_EQ(
      Tool("mcd-create", {"kept", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  ASSERT_EQ(
      Tool("mcd-create", {"lost", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  auto conn = redis_.Connect();
  auto kept = conn->Command({"HGETALL", keys_.Tensor("kept")});
  std::vector<std::string> ghost = {"HSET", keys_.Tensor("ghost")};
  for (auto& e : kept->elements) ghost.push_back(e.str);
  ASSERT_TRUE(conn->Command(std::vector<std::string_view>(ghost.begin(), ghost.end())).ok());
  ASSERT_TRUE(conn->Command({"DEL", keys_.Tensor("lost")}).ok());
  // Every connection but this one dropped: the server reconnects and settles.
  ASSERT_TRUE(conn->Command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}).ok());
  // The server logs each repair just after it is made: the wait is for the log lines too.
  const std::string removed = "removed the hash of tensor 'ghost', which Redis brought back";
  const std::string put_back = "tensor 'lost' lost its hash with Redis; put it back";
  ASSERT_TRUE(test::WaitFor(
      [&] {
        std::string log = ServeLog();
        return log.find(removed) != std::string::npos && log.find(put_back) != std::string::npos;
      },
      10000))
      << ServeLog();
  EXPECT_EQ(HashField("ghost", "state"), "");
  EXPECT_EQ(HashField("lost", "state"), "ready");
  EXPECT_EQ(HashField("kept", "refcount"), "1");
  EXPECT_EQ(ShmCount(), 2u);
}

// Between Redis coming back and the server putting its hashes back (held open here by stopping
// the server), a get or rm of a tensor that lives is "try again" (75), never "not found" (1),
// which would make a program forget a tensor that nobody then removes. Once the server has
// settled, the tensor is there, and a name never made is "not found" again.
TEST_F(RedisRestart, ALiveTensorIsTryAgainNotNotFoundUntilItsServerPutsItBack) {
  ASSERT_EQ(
      Tool("mcd-create", {"kept", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  auto conn = redis_.Connect();
  std::vector<std::string> heartbeat = {"HSET", keys_.Server(node_)};
  auto fields = conn->Command({"HGETALL", keys_.Server(node_)});
  ASSERT_TRUE(fields.ok());
  for (auto& e : fields->elements) heartbeat.push_back(e.str);
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  redis_.Restart();  // no persistence: every hash is gone
  // The heartbeat as the server's heartbeat thread writes it first, before the main thread has
  // put the hashes back.
  conn = redis_.Connect();
  ASSERT_TRUE(
      conn->Command(std::vector<std::string_view>(heartbeat.begin(), heartbeat.end())).ok());
  ASSERT_TRUE(conn->Command({"EXPIRE", keys_.Server(node_), "60"}).ok());
  const std::vector<std::vector<std::string>> commands = {{"mcd-get", "kept", "-q"},
                                                          {"mcd-get", "kept", "--no-ref", "-q"},
                                                          {"mcd-rm", "kept"},
                                                          {"mcd-get", "never.made", "-q"}};
  for (const std::vector<std::string>& args : commands) {
    std::vector<std::string> rest(args.begin() + 1, args.end());
    rest.insert(rest.end(), {"--timeout-ms", "300"});
    auto hurried = Tool(args[0], rest);
    EXPECT_EQ(hurried.exit_code, 75) << args[0] << " " << args[1] << ": " << hurried.err;
    EXPECT_NE(hurried.err.find("has not put its tensors back yet"), std::string::npos)
        << hurried.err;
  }
  // A get through the queue meanwhile is taken only once the server has settled: it finds the
  // tensor.
  ASSERT_TRUE(
      conn->Command({"LPUSH", keys_.queue, R"({"op":"get","name":"kept","req":"queued-get"})"})
          .ok());
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  auto queued = test::BlockingPop(*conn, keys_.Reply("queued-get"), 20);
  ASSERT_TRUE(queued.ok() && queued->elements.size() == 2) << ServeLog();
  EXPECT_EQ(json::parse(queued->elements[1].str)["ok"], true) << queued->elements[1].str;
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return Tool("mcd-get", {"never.made", "-q"}).exit_code == 1;
      },
      20000))
      << ServeLog();
  auto patient = Tool("mcd-get", {"kept", "--no-ref", "--json"});
  ASSERT_EQ(patient.exit_code, 0) << patient.err;
  // The queued get's reference; the hurried rm changed nothing.
  EXPECT_EQ(json::parse(patient.out)["refcount"], 2) << patient.out;
}

// The same after a restart from an AOF that lost a hash's write (its last second): the
// heartbeat came back with the data, but the server has not yet put back what Redis lost.
TEST_F(RedisRestart, AHashAnAofLostIsTryAgainUntilItsServerPutsItBack) {
  ASSERT_EQ(
      Tool("mcd-create", {"kept", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  ASSERT_EQ(
      Tool("mcd-create", {"lost", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  PersistWithFiller(0);
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  redis_.Restart({"--appendonly", "yes", "--appendfsync", "always"});
  ASSERT_TRUE(test::WaitFor([&] { return !Loading(); }, 20000));
  auto conn = redis_.Connect();
  ASSERT_EQ(conn->Command({"DEL", keys_.Tensor("lost")})->integer, 1);     // the write the AOF lost
  ASSERT_TRUE(conn->Command({"EXPIRE", keys_.Server(node_), "60"}).ok());  // the server is stopped
  auto hurried = Tool("mcd-get", {"lost", "-q", "--timeout-ms", "300"});
  EXPECT_EQ(hurried.exit_code, 75) << hurried.err;
  hurried = Tool("mcd-rm", {"lost", "--timeout-ms", "300"});
  EXPECT_EQ(hurried.exit_code, 75) << hurried.err;
  EXPECT_EQ(Tool("mcd-get", {"kept", "--no-ref", "-q"}).exit_code, 0);  // what Redis kept is served
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  auto patient = Tool("mcd-get", {"lost", "--no-ref", "--json", "--timeout-ms", "20000"});
  ASSERT_EQ(patient.exit_code, 0) << patient.err << ServeLog();
  EXPECT_EQ(json::parse(patient.out)["refcount"], 1) << patient.out;
}

// A consumer waiting for a tensor outlasts a Redis that restarts and loads its data for longer
// than the tool's --timeout-ms: Redis away, and "try again" while the server puts its tensors
// back, are "not yet" to the wait's own end. It then gets every byte of the tensor made after.
TEST_F(RedisRestart, AWaitOutlastsARestartLongerThanTheToolsTimeout) {
  // A heartbeat that outlives the load: a lapsed one would be "no server" (69), not this test.
  ASSERT_EQ(server_->Stop(SIGTERM), 0) << ServeLog();
  heartbeat_ttl_ = "60";
  StartServer();
  PersistWithFiller(150000);  // loaded at --key-load-delay 20: 3 s at the least
  std::string out = dir_.path() + "/late.bin";
  test::Background waiter({test::ToolPath("mcd-get"), "late", "--wait", "120", "--timeout-ms",
                           "1000", "--no-ref", "-q", "-o", out, "--node", node_},
                          Env(), dir_.path() + "/waiter.log");
  auto blocked = [&] { return test::BlockedClients(*redis_.Connect(), "xread") == 1; };
  ASSERT_TRUE(test::WaitFor(blocked, 20000)) << test::ReadFile(dir_.path() + "/waiter.log");
  RestartLoadingSlowly();
  ASSERT_TRUE(LoadingSoon());
  auto began = std::chrono::steady_clock::now();
  ASSERT_TRUE(test::WaitFor([&] { return !Loading(); }, 120000));
  EXPECT_GT(std::chrono::steady_clock::now() - began, std::chrono::milliseconds(1000))
      << "the load did not outlast the waiter's --timeout-ms: nothing was tested";
  ASSERT_TRUE(test::Running(waiter.pid())) << test::ReadFile(dir_.path() + "/waiter.log");
  std::string data = test::RandomBytes(1 << 20, 20240610);
  std::ofstream(dir_.path() + "/late.npy", std::ios::binary) << test::U8Npy(data);
  auto created = Tool("mcd-create", {"late", "--from", dir_.path() + "/late.npy", "--device", "cpu",
                                     "-q", "--timeout-ms", "60000"});
  ASSERT_EQ(created.exit_code, 0) << created.err << ServeLog();
  ASSERT_EQ(waiter.Wait(60), 0) << test::ReadFile(dir_.path() + "/waiter.log");
  std::string got = test::ReadFile(out);
  EXPECT_TRUE(got == data) << got.size() << " of " << data.size() << " bytes, or others";
}

// Redis forgetting the server's scripts without a restart (SCRIPT FLUSH) does not leave every
// missing name "try again" for ever: the server notices at its next heartbeat and marks itself
// settled again, and a name never made is "not found" within seconds.
TEST_F(RedisRestart, AfterScriptFlushAMissingNameIsNotFoundAgainWithinSeconds) {
  ASSERT_EQ(Tool("mcd-get", {"never.made", "-q"}).exit_code, 1);
  ASSERT_TRUE(redis_.Connect()->Command({"SCRIPT", "FLUSH"}).ok());
  auto not_found = [&] {
    return Tool("mcd-get", {"never.made", "-q", "--timeout-ms", "200"}).exit_code == 1;
  };
  EXPECT_TRUE(test::WaitFor(not_found, 10000)) << ServeLog();
  EXPECT_NE(ServeLog().find("Redis lost the server's settled marker"), std::string::npos)
      << ServeLog();
  ASSERT_EQ(
      Tool("mcd-create", {"made", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  EXPECT_EQ(Tool("mcd-get", {"made", "--no-ref", "-q"}).exit_code, 0);
}

// Gets of live tensors, with a reference and without, and rms, in loops while Redis restarts
// under a serving server, twice from its AOF and twice empty: every answer is the tensor, "try
// again" (75), or "no server" (69: the moments after an empty restart before the heartbeat is
// back), never "not found". The loops' timeout is short, so that a get meeting the server still
// putting its tensors back answers 75 rather than wait it out unseen.
TEST_F(RedisRestart, UnderRestartsNoGetOfALiveTensorIsToldNotFound) {
  constexpr int kLoops = 5, kGetOnly = 3;  // loops 3 and 4 also rm
  // Many tensors, so that the server takes a while to put them back; the loops' come last.
  auto client = ConnectClient();
  ASSERT_TRUE(client);
  for (int i = 0; i < 300; ++i)
    ASSERT_TRUE(client->Create(HostSpec("bulk." + std::to_string(i))).ok());
  for (int l = 0; l < kLoops; ++l)
    ASSERT_TRUE(client->Create(HostSpec("live." + std::to_string(l))).ok());
  PersistWithFiller(0);
  std::string stop = dir_.path() + "/stop";
  std::vector<std::unique_ptr<test::Background>> loops;
  for (int l = 0; l < kLoops; ++l) {
    std::string args = " live." + std::to_string(l) + " --node " + node_ + " --timeout-ms 300";
    std::string get = test::ToolPath("mcd-get") + args + " -q",
                rm = test::ToolPath("mcd-rm") + args;
    // The rm gives back the get's reference; once an empty restart lost that one, it gives back
    // the creator's and frees the tensor, and the loop ends (so does one whose rm failed).
    std::string then_rm =
        l < kGetOnly ? ""
                     : "out=$(" + rm + "); rc=$?; echo \"rm $rc\"; " +
                           "case \"$out\" in *freed*) exit 0;; esac; [ $rc -eq 0 ] || exit 0; ";
    // Each answer with "settling" when it was the server's not having put its tensors back.
    auto answer = [](const std::string& command, const std::string& label) {
      return "err=$(" + command +
             " 2>&1); rc=$?; case \"$err\" in *'has not put its tensors back'*) " + "echo \"" +
             label + " $rc settling\";; *) echo \"" + label + " $rc\";; esac; ";
    };
    std::string script = "while [ ! -e " + stop + " ]; do " + answer(get, "get") +
                         answer(get + " --no-ref", "noref") + then_rm + "done";
    loops.push_back(
        std::make_unique<test::Background>(std::vector<std::string>{"/bin/sh", "-c", script}, Env(),
                                           dir_.path() + "/loop" + std::to_string(l) + ".log"));
  }
  // Served again: the heartbeat is back (69 before) and the hashes too (75 before).
  auto served = [&] {
    return test::WaitFor(
        [&] {
          return Tool("mcd-get", {"bulk.299", "--no-ref", "-q"}).exit_code == 0;
        },
        30000);
  };
  const std::vector<std::vector<std::string>> restarts = {
      {"--appendonly", "yes", "--appendfsync", "always"},
      {"--appendonly", "yes", "--appendfsync", "always"},
      {},
      {}};
  for (const auto& args : restarts) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    redis_.Restart(args);
    ASSERT_TRUE(served()) << ServeLog();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  std::ofstream(stop).put('\n');
  std::map<std::string, int> answers;  // "get 0": how often
  for (int l = 0; l < kLoops; ++l) {
    EXPECT_EQ(loops[l]->Wait(60), 0);
    std::istringstream lines(test::ReadFile(dir_.path() + "/loop" + std::to_string(l) + ".log"));
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("get ", 0) == 0 || line.rfind("noref ", 0) == 0 || line.rfind("rm ", 0) == 0)
        ++answers[line];
    }
  }
  std::string seen;
  int settling = 0;  // answers of the window between the heartbeat and the hashes coming back
  for (const auto& [answer, n] : answers) {
    seen += " " + answer + ": " + std::to_string(n);
    if (answer.find(" settling") != std::string::npos) settling += n;
  }
  // The window itself is short (a few ms to put back 305 hashes here) and seldom met by a loop's
  // answer, so it is counted, not required; what is required is that the loops' tensors did lose
  // their hashes, which the server put back while the loops asked for them.
  std::cout << "answers:" << seen << " (settling: " << settling << ")\n";
  RecordProperty("settling", settling);
  EXPECT_NE(ServeLog().find("tensor 'live.0' lost its hash with Redis; put it back"),
            std::string::npos)
      << ServeLog();
  for (const auto& [answer, n] : answers) {
    std::string code = answer.substr(answer.find(' ') + 1);
    code = code.substr(0, code.find(' '));
    EXPECT_TRUE(code == "0" || code == "75" || code == "69")
        << answer << " (" << n << " times); all:" << seen;
  }
  EXPECT_GT(answers["get 0"], 0) << seen;
  RecordProperty("answers", seen);
}

// A reference taken before Redis lost its data is not counted by the hash the server puts back
// (refcount 1: its creator's), so its release gives back nothing: it must not take the
// creator's reference, which would free the tensor under its creator. The creator's remove
// then frees it, and the bytes stay the creator's until then.
TEST_F(RedisRestart, AReferenceTakenBeforeRedisLostItsDataGivesBackNothing) {
  const std::string data = test::RandomBytes(4096, 51);
  const std::string file = dir_.path() + "/kept.npy";
  std::ofstream(file, std::ios::binary) << test::U8Npy(data);
  ASSERT_EQ(Tool("mcd-create", {"kept", "--from", file, "--device", "cpu", "-q"}).exit_code, 0);
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  auto held = client->Get("kept");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->record.refcount, 2);
  redis_.Restart();  // no persistence: the hash and its holders are gone
  ASSERT_TRUE(test::WaitFor([&] { return !HashField("kept", "epoch").empty(); }, 10000))
      << ServeLog();
  EXPECT_EQ(HashField("kept", "refcount"), "1");
  // At once: the connection Redis dropped is known dead before the release is sent, so the
  // release goes on a fresh one rather than being called ambiguous.
  auto released = client->Release("kept");
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->refcount, 1);
  EXPECT_EQ(HashField("kept", "refcount"), "1") << ServeLog();
  // A reference taken since counts, and goes back.
  ASSERT_TRUE(client->Get("kept").ok());
  EXPECT_EQ(HashField("kept", "refcount"), "2");
  ASSERT_TRUE(client->Release("kept").ok());
  EXPECT_EQ(HashField("kept", "refcount"), "1");
  const std::string out = dir_.path() + "/out.bin";
  ASSERT_EQ(Tool("mcd-get", {"kept", "--no-ref", "-q", "-o", out}).exit_code, 0);
  EXPECT_TRUE(test::ReadFile(out) == data) << "the bytes read back differ from the creator's";
  auto rm = Tool("mcd-rm", {"kept"});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_TRUE(HashField("kept", "state").empty());
  EXPECT_TRUE(test::WaitFor([&] { return ShmCount() == 0u; }, 5000));
}

// A Redis back from a slow load may hold no heartbeat (it expired while Redis loaded, with the
// server unable to write it) until the server writes it again: a tool that waited through the
// load waits for that too, within its timeout, rather than saying no server runs.
TEST_F(RedisRestart, AToolThatWaitedThroughALoadWaitsForTheHeartbeatToo) {
  ASSERT_EQ(
      Tool("mcd-create", {"kept", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  PersistWithFiller(50000);
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  RestartLoadingSlowly();
  ASSERT_TRUE(LoadingSoon());
  test::Background patient({test::ToolPath("mcd-get"), "kept", "--no-ref", "-q", "--timeout-ms",
                            "60000", "--node", node_},
                           Env(), dir_.path() + "/patient.log");
  // Loaded, and the heartbeat expired: only the stopped server can write it again.
  auto conn = redis_.Connect();
  bool gone = test::WaitFor(
      [&] {
        auto exists = conn->Command({"EXISTS", keys_.Server(node_)});
        return !Loading() && exists.ok() && exists->integer == 0;
      },
      30000);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  ASSERT_TRUE(gone) << "the heartbeat outlived the load";
  EXPECT_EQ(patient.Wait(60), 0) << test::ReadFile(dir_.path() + "/patient.log");
}

}  // namespace
}  // namespace mcd
