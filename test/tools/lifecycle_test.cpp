// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Whole lifecycles through the real binaries, a real mcd-serve and a real redis-server, on host
// memory (device cpu), so they run on machines without a GPU.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "lifecycle_fixture.h"
#include "memcuda/client.h"
#include "memcuda/keys.h"
#include "memcuda/memcuda.h"
#include "memcuda/private_redis.h"
#include "test_support.h"

namespace mcd {
namespace {

TEST_F(Lifecycle, CreateListGetRemove) {
  auto created = Tool("mcd-create", {"w", "--dtype", "f32", "--shape", "2,3", "--device", "cpu"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_NE(created.out.find("created w f32[2x3] on cpu"), std::string::npos) << created.out;
  EXPECT_EQ(HashField("w", "state"), "ready");
  EXPECT_EQ(HashField("w", "refcount"), "1");
  EXPECT_EQ(HashField("w", "device"), "-1");
  EXPECT_EQ(HashField("w", "shape"), "[2,3]");
  EXPECT_EQ(ShmCount(), 1u);

  auto ls = Tool("mcd-ls", {});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("NAME"), std::string::npos);
  EXPECT_NE(ls.out.find("w "), std::string::npos);
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "w\n");
  EXPECT_EQ(Tool("mcd-ls", {"nomatch*", "-q"}).out, "");
  auto ls_json = json::parse(Tool("mcd-ls", {"--json"}).out);
  ASSERT_EQ(ls_json.size(), 1u);
  EXPECT_EQ(ls_json[0]["bytes"], 24);

  auto got = Tool("mcd-get", {"w", "--print", "6", "--json"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  auto got_json = json::parse(got.out);
  EXPECT_EQ(got_json["refcount"], 2);
  EXPECT_EQ(got_json["values"], json::parse("[0,0,0,0,0,0]"));  // zeroed
  EXPECT_EQ(Tool("mcd-get", {"w", "--no-ref", "-q"}).exit_code, 0);
  EXPECT_EQ(HashField("w", "refcount"), "2");

  auto rm1 = Tool("mcd-rm", {"w"});
  EXPECT_EQ(rm1.out, "w: refcount 1\n");
  auto rm2 = Tool("mcd-rm", {"w"});
  EXPECT_EQ(rm2.out, "w: freed\n");
  EXPECT_TRUE(TensorKeys().empty());
  EXPECT_TRUE(ShmFreedSoon());
  EXPECT_EQ(Tool("mcd-rm", {"w"}).exit_code, 1);
  EXPECT_EQ(Tool("mcd-rm", {"w", "--ignore-missing"}).exit_code, 0);
  EXPECT_EQ(Tool("mcd-get", {"w"}).exit_code, 1);
}

TEST_F(Lifecycle, ContentsSurviveAcrossProcessesAndNpyRoundTrips) {
  // A .npy written by hand: int32 [2,3] = 0..5.
  std::string path = dir_.path() + "/in.npy";
  {
    std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }";
    header += std::string(64 - (10 + header.size() + 1) % 64, ' ') + "\n";
    std::ofstream out(path, std::ios::binary);
    out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size()) << '\x00' << header;
    for (int32_t i = 0; i < 6; ++i) out.write(reinterpret_cast<const char*>(&i), 4);
  }
  auto created = Tool("mcd-create", {"arr", "--from", path, "--device", "cpu"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  auto printed = Tool("mcd-get", {"arr", "--no-ref", "--print", "6"});
  EXPECT_NE(printed.out.find("values:    0,1,2,3,4,5"), std::string::npos) << printed.out;
  std::string out_path = dir_.path() + "/out.npy";
  ASSERT_EQ(Tool("mcd-get", {"arr", "--no-ref", "-o", out_path}).exit_code, 0);
  EXPECT_EQ(test::ReadFile(out_path), test::ReadFile(path));
  // A second process writes through its own mapping; a third sees it.
  ClientOptions opt;
  opt.redis_url = redis_.parsed_url();
  opt.node = node_;
  auto client = Client::Connect(opt);
  ASSERT_TRUE(client.ok());
  auto view = client.value()->Get("arr");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  static_cast<int32_t*>(view->data)[5] = 77;
  auto again = Tool("mcd-get", {"arr", "--no-ref", "--print", "6"});
  EXPECT_NE(again.out.find("0,1,2,3,4,77"), std::string::npos) << again.out;
  ASSERT_TRUE(client.value()->Release("arr").ok());
}

TEST_F(Lifecycle, CAbiFromPlainC) {
  auto run = test::Run({test::ToolPath("mcd-example-c"), "cabi", node_}, Env());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  // 0^2 + ... + 15^2 = 1240, seen through a second mapping; refcount 2 while held.
  EXPECT_EQ(run.out, "cabi refcount=2 sum=1240 listed=1\nafter release: not_found\n");
  EXPECT_TRUE(TensorKeys().empty());
  EXPECT_TRUE(ShmFreedSoon());
}

TEST_F(Lifecycle, MinimalRedisCliFormWorks) {
  std::string body =
      R"({"op":"create","name":"X","dtype":"f32","shape":[2,3],"device":-1,"pid":1,"node":")" +
      node_ + "\"}";
  auto pushed = test::Run({"redis-cli", "-u", redis_.url(), "LPUSH", "tensor_lifecycle", body});
  if (redis_.url().rfind("unix://", 0) == 0) {
    pushed =
        test::Run({"redis-cli", "-s", redis_.url().substr(7), "LPUSH", "tensor_lifecycle", body});
  }
  ASSERT_EQ(pushed.exit_code, 0) << pushed.err;
  ASSERT_TRUE(test::WaitFor([&] { return HashField("X", "state") == "ready"; }, 5000))
      << ServeLog();
  EXPECT_EQ(HashField("X", "bytes"), "24");
  EXPECT_EQ(HashField("X", "ipc_kind"), "host_shm");
  EXPECT_EQ(HashField("X", "creator_pid"), "1");
}

TEST_F(Lifecycle, CommandsThatDependOnEachOtherKeepTheirOrderAcrossBatches) {
  // Fire-and-forget commands that each depend on the one before: create, get, delete of one name,
  // for many names, all on the queue at once. The server takes them in batches of up to 64, so
  // batch boundaries fall after every position of a group of three, and it handles a batch
  // while the previous batch's commits may still be on their way: a command naming a tensor
  // whose commit is not back yet must wait for it. A command handled too early fails (counted).
  constexpr int kNames = 400;
  ASSERT_NO_FATAL_FAILURE(PushCreateGetDelete("d", kNames));
  auto conn = redis_.Connect();
  // A last command with a req: its reply means every command before it was handled.
  json last =
      Raw(R"({"op":"create","name":"end","dtype":"u8","shape":[1],"device":"cpu","req":"end-1"})",
          "end-1");
  ASSERT_EQ(last["ok"], true) << last.dump();
  // The heartbeat's counters, once it has been written after the last command.
  auto counters = [&] {
    auto reply = conn->Command({"HMGET", keys_.Server(node_), "commands_ok", "commands_failed"});
    return std::make_pair(std::atoll(reply->elements[0].str.c_str()),
                          std::atoll(reply->elements[1].str.c_str()));
  };
  ASSERT_TRUE(
      test::WaitFor([&] { return counters().first + counters().second >= 3 * kNames + 1; }, 10000))
      << ServeLog();
  EXPECT_EQ(counters(), std::make_pair(3LL * kNames + 1, 0LL));
  // Each name was created, got and given back once: one reference left.
  for (int i = 0; i < kNames; ++i)
    ASSERT_EQ(HashField("d" + std::to_string(i), "refcount"), "1") << i;
  EXPECT_EQ(ShmCount(), static_cast<size_t>(kNames) + 1);
}

TEST_F(Lifecycle, ABusyServerGetsThroughScriptFlushesWithoutLosingOrRepeatingCommands) {
  // As above, but Redis forgets the scripts (SCRIPT FLUSH) several times while the server works
  // through the queue: takes and commits answered NOSCRIPT are retried, none is lost or applied
  // twice (a repeated get would leave a refcount above 1).
  constexpr int kNames = 400;
  ASSERT_NO_FATAL_FAILURE(PushCreateGetDelete("s", kNames));
  ASSERT_NO_FATAL_FAILURE(FlushScripts(8, std::chrono::milliseconds(40)));
  ASSERT_NO_FATAL_FAILURE(ExpectBacklogAppliedOnce("s", kNames, "end-2"));
}

TEST_F(Lifecycle, ABacklogOfCreatesSurvivesScriptFlushesInQuickSuccession) {
  // Independent creates are handled a whole batch at a time, with the next take sent ahead, so
  // a SCRIPT FLUSH lands between a take and its batch's commits, and Redis can lose the scripts
  // again while the server is running those commits once more. Every command must still be
  // applied exactly once and answered; none may be left in the processing list.
  constexpr int kNames = 1200;
  std::vector<std::string> args = {"LPUSH", keys_.queue};
  for (int i = 0; i < kNames; ++i) {
    args.push_back(R"({"op":"create","name":"b)" + std::to_string(i) +
                   R"(","dtype":"u8","shape":[8],"device":"cpu","req":"b-)" + std::to_string(i) +
                   R"("})");
  }
  ASSERT_TRUE(
      redis_.Connect()->Command(std::vector<std::string_view>(args.begin(), args.end())).ok());
  ASSERT_NO_FATAL_FAILURE(FlushScripts(20, std::chrono::milliseconds(5)));
  ASSERT_NO_FATAL_FAILURE(ExpectBacklogAppliedOnce("b", kNames, "end-3"));
  EXPECT_EQ(ServeLog().find("outcome=redis_error"), std::string::npos) << ServeLog();
}

TEST_F(Lifecycle, ReleasesTakeOneRoundTripAndSurviveAScriptFlush) {
  auto connected = ConnectClient();
  ASSERT_NE(connected, nullptr);
  Client& client = *connected;
  ASSERT_TRUE(client.Create(HostSpec("rel")).ok());
  ASSERT_TRUE(client.Get("rel").ok());  // two references now
  auto conn = redis_.Connect();
  auto reply_lists = [&] {
    return conn->Command({"KEYS", keys_.Reply("*")})->elements.size();
  };  // test only

  // Not the last: answered by the script, with a marker its own BLPOP takes at once.
  auto released = client.Release("rel");
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->refcount, 1);
  EXPECT_EQ(reply_lists(), 0u) << "a marker was left behind";

  // Errors come at once too, not after the 5 s reply timeout.
  auto t0 = std::chrono::steady_clock::now();
  auto missing = client.Release("no.such");
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(reply_lists(), 0u);

  // After SCRIPT FLUSH (as after a Redis restart) the script is loaded again; the last release
  // is queued as a delete by the script and answered by the server, which frees the memory. (A
  // second client makes it: this one saw the count at 1 and would send the delete itself.)
  auto other = ConnectClient();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(conn->Command({"SCRIPT", "FLUSH"}).ok());
  t0 = std::chrono::steady_clock::now();
  auto last = other->Release("rel");
  ASSERT_TRUE(last.ok()) << last.status().ToString() << ServeLog();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_TRUE(TensorKeys().empty());
  EXPECT_TRUE(ShmFreedSoon());
  EXPECT_EQ(reply_lists(), 0u);
}

// A client that created a tensor and last saw it at refcount 1 sends its release to the server
// as the delete command, without the reference script; the server's delete is right whatever
// the count is by then: a reference another process took in between survives it.
TEST_F(Lifecycle, ACreatorsReleaseGoesStraightToTheServerAndSparesOtherReferences) {
  auto connected = ConnectClient();
  ASSERT_NE(connected, nullptr);
  Client& client = *connected;
  auto conn = redis_.Connect();
  auto script_calls = [&] {
    std::string stats = conn->Command({"INFO", "commandstats"})->str;
    size_t at = stats.find("cmdstat_evalsha:calls=");
    return at == std::string::npos ? 0L : std::strtol(stats.c_str() + at + 22, nullptr, 10);
  };
  // Its own create, then its release: one script call in all, the server's commit of the delete.
  ASSERT_TRUE(client.Create(HostSpec("own")).ok());
  ASSERT_TRUE(conn->Command({"CONFIG", "RESETSTAT"}).ok());
  auto freed = client.Release("own");
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_EQ(freed->refcount, 0);
  EXPECT_EQ(script_calls(), 1);
  EXPECT_TRUE(TensorKeys().empty());

  // Another process takes a reference after the create: the creator's release, sent the same
  // way, gives back only its own.
  ASSERT_TRUE(client.Create(HostSpec("shared")).ok());
  ASSERT_EQ(Tool("mcd-get", {"shared", "-q"}).exit_code, 0);
  auto left = client.Release("shared");
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_EQ(left->refcount, 1);
  EXPECT_EQ(HashField("shared", "refcount"), "1");
  // The one left is mcd-get's, bound to its parent (this process): the creator's went.
  EXPECT_EQ(HashField("shared", "bound"), "1");
  EXPECT_EQ(HashField("shared", "state"), "ready");
  EXPECT_EQ(ShmCount(), 1u);
  EXPECT_EQ(Tool("mcd-rm", {"shared"}).out, "shared: freed\n");

  // A client that holds two references releases the first through the script, which leaves the
  // other, and the second through the server, which frees.
  ASSERT_TRUE(client.Create(HostSpec("twice")).ok());
  ASSERT_TRUE(client.Get("twice").ok());
  ASSERT_TRUE(conn->Command({"CONFIG", "RESETSTAT"}).ok());
  auto first = client.ReleaseReference("twice");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->refcount, 1);
  EXPECT_EQ(script_calls(), 1);  // the reference script, no server
  auto second = client.Release("twice");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->refcount, 0);
  EXPECT_EQ(script_calls(), 2);  // and the server's commit
  EXPECT_TRUE(TensorKeys().empty());
  EXPECT_TRUE(ShmFreedSoon());

  // A name it released is not its own any more: a second release is the script's not_found.
  auto again = client.Release("own");
  EXPECT_EQ(again.status().code(), ErrorCode::kNotFound) << again.status().ToString();
}

// A request that gets no reply in time is taken back off the queue when no server has taken it
// yet, so a failure reported to the caller never takes effect later, when a server gets to it;
// one that a server took is reported as possibly still taking effect.
TEST_F(Lifecycle, AnUnansweredCommandIsWithdrawnAndNeverAppliedLater) {
  via_queue_ = true;
  auto connected = ConnectClient(300);
  ASSERT_NE(connected, nullptr);
  Client& client = *connected;
  ASSERT_TRUE(client.Create(HostSpec("own")).ok());
  ASSERT_EQ(
      Tool("mcd-create", {"kept", "--dtype", "u8", "--shape", "16", "--device", "cpu"}).exit_code,
      0);
  auto conn = redis_.Connect();
  auto queued = [&] { return conn->Command({"LLEN", keys_.NodeQueue(node_)})->integer; };

  // The server stopped, its heartbeat kept alive: every request times out. A blocking take the
  // server sent before it stopped is still served by Redis, so a first command goes to it (or,
  // when there was none, is removed here) before the requests under test.
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  ASSERT_EQ(conn->Command({"PERSIST", keys_.Server(node_)})->integer, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(
      conn->Command({"LPUSH", keys_.NodeQueue(node_),
                     R"({"op":"create","name":"first","dtype":"u8","shape":[1],"device":"cpu"})"})
          .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(conn->Command({"DEL", keys_.NodeQueue(node_)}).ok());
  const std::string withdrawn = " was withdrawn from the queue, nothing changed";
  auto late = Tool("mcd-create", {"late", "--dtype", "u8", "--shape", "16", "--device", "cpu",
                                  "--timeout-ms", "300"});
  EXPECT_EQ(late.exit_code, 75) << late.err;
  EXPECT_NE(late.err.find("the create of 'late'" + withdrawn), std::string::npos) << late.err;
  // The release of another process's last reference: the script queues its delete.
  auto rm = Tool("mcd-rm", {"kept", "--timeout-ms", "300"});
  EXPECT_EQ(rm.exit_code, 75) << rm.err;
  EXPECT_NE(rm.err.find("the delete of 'kept'" + withdrawn), std::string::npos) << rm.err;
  // The creator's release, which pushes its delete itself.
  auto released = client.Release("own");
  EXPECT_EQ(released.status().code(), ErrorCode::kTimeout) << released.status().ToString();
  EXPECT_NE(released.status().message().find("the delete of 'own'" + withdrawn), std::string::npos)
      << released.status().ToString();
  EXPECT_EQ(queued(), 0);

  // The heartbeat gone while a request waits: no server, and the command withdrawn just the same.
  test::Background gone({test::ToolPath("mcd-create"), "gone", "--dtype", "u8", "--shape", "16",
                         "--device", "cpu", "--timeout-ms", "2000", "--node", node_},
                        Env(), dir_.path() + "/gone.log");
  ASSERT_TRUE(test::WaitFor([&] { return queued() == 1; }, 5000));
  ASSERT_EQ(conn->Command({"DEL", keys_.Server(node_)})->integer, 1);
  EXPECT_EQ(gone.Stop(0), 69);
  std::string gone_err = test::ReadFile(dir_.path() + "/gone.log");
  EXPECT_NE(gone_err.find("no mcd-serve is running"), std::string::npos) << gone_err;
  EXPECT_NE(gone_err.find("the create of 'gone'" + withdrawn), std::string::npos) << gone_err;
  EXPECT_EQ(queued(), 0);

  // The server goes on; a command sent now is answered, so none before it is left to apply.
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  ASSERT_TRUE(test::WaitFor([&] { return Heartbeat(); }, 5000)) << ServeLog();
  json end =
      Raw(R"({"op":"create","name":"end","dtype":"u8","shape":[1],"device":"cpu","req":"end-1"})",
          "end-1");
  ASSERT_EQ(end["ok"], true) << end.dump() << ServeLog();
  EXPECT_EQ(HashField("late", "state"), "");
  EXPECT_EQ(HashField("gone", "state"), "");
  EXPECT_EQ(HashField("kept", "refcount"), "1");
  EXPECT_EQ(HashField("own", "refcount"), "1");
  EXPECT_EQ(ShmCount(), 3u + (HashField("first", "state").empty() ? 0u : 1u));  // own, kept, end

  // A consumer took the command and did not answer: it may still take effect, and says so.
  ASSERT_TRUE(conn->Command({"HSET", keys_.Server("stuck"), "pid", "1"}).ok());
  test::Background stuck(
      {test::ToolPath("mcd-create"), "a", "--dtype", "u8", "--shape", "1", "--device", "cpu",
       "--node", "stuck", "--queue", "stuck-queue", "--timeout-ms", "1000"},
      Env(), dir_.path() + "/stuck.log");
  auto taken = conn->Command({"BLMOVE", "stuck-queue", "stuck-taken", "RIGHT", "LEFT", "10"});
  ASSERT_TRUE(taken.ok() && taken->type == RedisValue::Type::kString);
  EXPECT_EQ(stuck.Stop(0), 75);
  std::string stuck_err = test::ReadFile(dir_.path() + "/stuck.log");
  EXPECT_NE(stuck_err.find("the server had taken the create of 'a', which may still take effect"),
            std::string::npos)
      << stuck_err;
}

// Tools and clients send creates and a creator's releases to the server's command socket, past
// the queue: no push, no reply list, no blocking pop in Redis; the tensor is the same. With
// MCD_VIA_QUEUE=1 they use the queue.
TEST_F(Lifecycle, ToolsSendTheirCommandsStraightToTheServerPastTheQueue) {
  auto conn = redis_.Connect();
  auto calls = [&](const std::string& command) {
    std::string info = conn->Command({"INFO", "commandstats"})->str;
    size_t at = info.find("cmdstat_" + command + ":calls=");
    return at == std::string::npos ? 0 : std::stoi(info.substr(at + command.size() + 15));
  };
  ASSERT_TRUE(conn->Command({"CONFIG", "RESETSTAT"}).ok());
  ASSERT_EQ(Tool("mcd-create", {"direct", "--dtype", "f32", "--shape", "2,3", "--device", "cpu"})
                .exit_code,
            0)
      << ServeLog();
  EXPECT_EQ(HashField("direct", "state"), "ready");
  EXPECT_EQ(HashField("direct", "shape"), "[2,3]");
  EXPECT_EQ(HashField("direct", "refcount"), "1");
  auto connected = ConnectClient();
  ASSERT_NE(connected, nullptr);
  ASSERT_TRUE(connected->Create(HostSpec("mine")).ok());
  auto released = connected->Release("mine");
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->refcount, 0);
  EXPECT_EQ(HashField("mine", "state"), "");
  EXPECT_EQ(calls("lpush"), 0);
  EXPECT_EQ(calls("blpop"), 0);
  EXPECT_EQ(calls("set"), 0) << "a first result was kept for a command that is never sent again";

  via_queue_ = true;
  ASSERT_EQ(
      Tool("mcd-create", {"queued", "--dtype", "f32", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  EXPECT_EQ(calls("lpush"), 1);
  EXPECT_EQ(calls("blpop"), 1);
  EXPECT_EQ(HashField("queued", "state"), "ready");
  EXPECT_EQ(Tool("mcd-rm", {"direct"}).exit_code, 0);
  EXPECT_EQ(Tool("mcd-rm", {"queued"}).exit_code, 0);
  EXPECT_TRUE(TensorKeys().empty());
}

// A client that gets no reply in time closes its connection, which withdraws its command from a
// server that has not read it: a stopped server that resumes drops it. A server that dies while a
// client waits is noticed at once, not after the timeout.
TEST_F(Lifecycle, ACommandGivenUpOnTheSocketIsNeverAppliedLater) {
  auto conn = redis_.Connect();
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  ASSERT_EQ(conn->Command({"PERSIST", keys_.Server(node_)})->integer, 1);
  auto late = Tool("mcd-create", {"late", "--dtype", "u8", "--shape", "16", "--device", "cpu",
                                  "--timeout-ms", "300"});
  EXPECT_EQ(late.exit_code, 75) << late.err;
  EXPECT_NE(late.err.find("the create of 'late' was withdrawn"), std::string::npos) << late.err;
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  ASSERT_EQ(
      Tool("mcd-create", {"after", "--dtype", "u8", "--shape", "16", "--device", "cpu"}).exit_code,
      0)
      << ServeLog();
  EXPECT_EQ(HashField("late", "state"), "") << "a withdrawn create was applied";
  EXPECT_EQ(HashField("after", "state"), "ready");

  // Killed while a client waits on its socket.
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  test::Background waiting({test::ToolPath("mcd-create"), "orphan", "--dtype", "u8", "--shape",
                            "16", "--device", "cpu", "--timeout-ms", "20000", "--node", node_},
                           Env(), dir_.path() + "/waiting.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(server_->pid(), SIGKILL), 0);
  server_->Stop(0);
  int code = waiting.Stop(0);
  auto waited = std::chrono::steady_clock::now() - t0;
  std::string err = test::ReadFile(dir_.path() + "/waiting.log");
  EXPECT_EQ(code, 69) << err;
  EXPECT_NE(err.find("closed its command socket before answering the create of 'orphan'"),
            std::string::npos)
      << err;
  EXPECT_LT(waited, std::chrono::seconds(5)) << "the client waited out its timeout";
  StartServer();
  EXPECT_EQ(HashField("orphan", "state"), "");
}

TEST_F(Lifecycle, ListingSpansManyPipelinedWindows) {
  // More tensors than one window of pipelined reads (the listing reads 1,000 at a time), made by
  // the server from commands pushed in one go.
  constexpr int kCount = 3000;
  auto conn = redis_.Connect();
  for (int i = 0; i < kCount; ++i) {
    std::string body = R"({"op":"create","name":"m)" + std::to_string(i) +
                       R"(","dtype":"i32","shape":[)" + std::to_string(i % 7 + 1) +
                       R"(],"device":"cpu","pid":1})";
    ASSERT_TRUE(conn->Append({"LPUSH", keys_.queue, body}).ok());
  }
  for (int i = 0; i < kCount; ++i) ASSERT_TRUE(conn->ReadReply().ok());
  ASSERT_TRUE(test::WaitFor(
      [&] { return HashField("m" + std::to_string(kCount - 1), "state") == "ready"; }, 60000))
      << ServeLog();
  ClientOptions opt;
  opt.redis_url = redis_.parsed_url();
  opt.node = node_;
  auto client = Client::Connect(opt);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto all = client.value()->List("m*");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), static_cast<size_t>(kCount));
  std::vector<std::string> expected;
  for (int i = 0; i < kCount; ++i) expected.push_back("m" + std::to_string(i));
  std::sort(expected.begin(), expected.end());
  for (size_t i = 0; i < all->size(); ++i) {
    const TensorRecord& r = (*all)[i];
    ASSERT_EQ(r.name, expected[i]);
    int n = std::stoi(r.name.substr(1));
    EXPECT_EQ(r.shape, std::vector<int64_t>{n % 7 + 1}) << r.name;  // each record is its own
    EXPECT_EQ(r.bytes, static_cast<uint64_t>(4 * (n % 7 + 1))) << r.name;
    EXPECT_EQ(r.state, "ready");
  }
  // A glob narrows it; the table lists every one of them.
  EXPECT_EQ(client.value()->List("m1*")->size(), 1111u);
  auto table = Tool("mcd-ls", {"m*", "--no-headers"});
  EXPECT_EQ(std::count(table.out.begin(), table.out.end(), '\n'), kCount) << table.err;
}

TEST_F(Lifecycle, RepeatedReqIsAppliedOnce) {
  ASSERT_EQ(Tool("mcd-create", {"r", "--dtype", "u8", "--shape", "8", "--device", "cpu"}).exit_code,
            0);
  std::string body = R"({"op":"get","name":"r","req":"same-1"})";
  json first = Raw(body, "same-1");
  json second = Raw(body, "same-1");
  EXPECT_EQ(first, second);
  EXPECT_EQ(first["tensor"]["refcount"], 2);
  EXPECT_EQ(HashField("r", "refcount"), "2");
}

TEST_F(Lifecycle, AReqIsRecognisedForReqTtlSeconds) {
  // By default the first reply is kept as long as the reply list (60 s).
  ASSERT_EQ(Tool("mcd-create", {"t", "--dtype", "u8", "--shape", "8", "--device", "cpu"}).exit_code,
            0);
  json first = Raw(R"({"op":"get","name":"t","req":"ttl-1"})", "ttl-1");
  ASSERT_EQ(first["ok"], true) << first.dump();
  auto conn = redis_.Connect();
  long long ttl = conn->Command({"TTL", keys_.Done("ttl-1")})->integer;
  EXPECT_GT(ttl, 50);
  EXPECT_LE(ttl, 60);

  // --req-ttl 1: a repeat after that is a new command, applied again.
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  StartServer({"--req-ttl", "1"});
  ASSERT_EQ(Tool("mcd-create", {"u", "--dtype", "u8", "--shape", "8", "--device", "cpu"}).exit_code,
            0);
  std::string body = R"({"op":"get","name":"u","req":"ttl-2"})";
  EXPECT_EQ(Raw(body, "ttl-2")["tensor"]["refcount"], 2);
  EXPECT_LE(conn->Command({"TTL", keys_.Done("ttl-2")})->integer, 1);
  EXPECT_EQ(Raw(body, "ttl-2")["tensor"]["refcount"], 2);  // within the second: the first reply
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return conn->Command({"EXISTS", keys_.Done("ttl-2")})->integer == 0;
      },
      3000));
  EXPECT_EQ(Raw(body, "ttl-2")["tensor"]["refcount"], 3);  // expired: applied again
  EXPECT_EQ(HashField("u", "refcount"), "3");
}

TEST_F(Lifecycle, ServerLoadsItsScriptsAgainAfterAScriptFlush) {
  ASSERT_EQ(Tool("mcd-create", {"f", "--dtype", "u8", "--shape", "8", "--device", "cpu"}).exit_code,
            0);
  ASSERT_TRUE(redis_.Connect()->Command({"SCRIPT", "FLUSH"}).ok());
  json reply = Raw(R"({"op":"get","name":"f","req":"after-flush-1"})", "after-flush-1");
  EXPECT_EQ(reply["ok"], true) << reply.dump() << ServeLog();
  EXPECT_EQ(HashField("f", "refcount"), "2");
}

TEST_F(Lifecycle, AChangeRedisRefusesIsAnsweredAndNotLeftBehind) {
  ASSERT_EQ(Tool("mcd-create", {"z", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
            0);
  auto conn = redis_.Connect();
  // Someone replaced the tensor's hash with a string: the delete's commit fails inside Redis.
  ASSERT_TRUE(conn->Command({"DEL", keys_.Tensor("z")}).ok());
  ASSERT_TRUE(conn->Command({"SET", keys_.Tensor("z"), "junk"}).ok());
  json reply = Raw(R"({"op":"delete","name":"z","req":"refused-1"})", "refused-1");
  EXPECT_EQ(reply["ok"], false) << reply.dump() << ServeLog();
  EXPECT_EQ(reply["error"]["code"], "redis_error") << reply.dump();
  std::string message = reply["error"]["message"].get<std::string>();
  EXPECT_NE(message.find("WRONGTYPE"), std::string::npos) << message;
  EXPECT_EQ(message.find("script"), std::string::npos)
      << message;  // Redis's words, not the script's
  // Not left in the processing list to be run again after the next reconnect.
  EXPECT_EQ(conn->Command({"LLEN", keys_.Processing(node_)})->integer, 0);
  EXPECT_EQ(conn->Command({"GET", keys_.Tensor("z")})->str, "junk");
  EXPECT_EQ(
      Tool("mcd-create", {"after", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0)
      << ServeLog();
}

TEST_F(Lifecycle, AHandEditedRefcountReadsAsHincrbyReadsIt) {
  ASSERT_EQ(Tool("mcd-create", {"a", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
            0);
  ASSERT_EQ(Tool("mcd-create", {"b", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
            0);
  auto conn = redis_.Connect();
  ASSERT_TRUE(conn->Command({"HDEL", keys_.Tensor("a"), "refcount"}).ok());
  ASSERT_TRUE(conn->Command({"HSET", keys_.Tensor("b"), "refcount", "abc"}).ok());
  json missing =
      Raw(R"({"op":"get","name":"a","req":"edit-1"})", "edit-1");  // a missing count is 0
  EXPECT_EQ(missing["ok"], true) << missing.dump();
  EXPECT_EQ(missing["tensor"]["refcount"], 1) << missing.dump();
  EXPECT_EQ(HashField("a", "refcount"), "1");
  json garbled = Raw(R"({"op":"get","name":"b","req":"edit-2"})", "edit-2");
  EXPECT_EQ(garbled["error"]["code"], "redis_error") << garbled.dump();
  EXPECT_EQ(garbled["error"]["message"],
            "Redis refused the change: ERR hash value is not an integer")
      << garbled.dump();
  EXPECT_EQ(HashField("b", "refcount"), "abc");  // untouched
}

// A reader trusts shape and dtype to index the memory it maps: a hash whose fields disagree or
// are malformed is refused, and a get that fails after taking its reference gives it back.
TEST_F(Lifecycle, AHandEditedHashIsRefusedAndAFailedGetGivesItsReferenceBack) {
  ASSERT_EQ(
      Tool("mcd-create", {"t", "--dtype", "f32", "--shape", "4,4", "--device", "cpu"}).exit_code,
      0);
  auto conn = redis_.Connect();
  struct Edit {
    const char* field;
    const char* value;
    const char* says;
  };
  for (const Edit& edit :
       {Edit{"shape", "[4,4,4]", "says \"bytes\" 64, which its shape and dtype do not make (256)"},
        Edit{"shape", "[4611686018427387904,4]", "which its shape and dtype do not make"},
        Edit{"dtype", "f64", "do not make (128)"}, Edit{"bytes", "65", "says \"bytes\" 65"},
        Edit{"offset", "-1", "malformed \"offset\""},
        Edit{"ctime", "yesterday", "malformed \"ctime\""}}) {
    SCOPED_TRACE(std::string(edit.field) + "=" + edit.value);
    std::string before = HashField("t", edit.field);
    ASSERT_TRUE(conn->Command({"HSET", keys_.Tensor("t"), edit.field, edit.value}).ok());
    auto got = Tool("mcd-get", {"t", "--print", "2"});
    EXPECT_EQ(got.exit_code, 76) << got.out;
    EXPECT_NE(got.err.find(edit.says), std::string::npos) << got.err;
    EXPECT_EQ(HashField("t", "refcount"), "1");
    auto listed = Tool("mcd-ls", {});
    EXPECT_NE(listed.err.find("t: tensor hash of 't'"), std::string::npos) << listed.err;
    ASSERT_TRUE(conn->Command({"HSET", keys_.Tensor("t"), edit.field, before}).ok());
  }
  // A get whose output cannot be written: the error, and the reference back.
  auto unwritable = Tool("mcd-get", {"t", "-o", dir_.path() + "/missing/t.npy"});
  EXPECT_EQ(unwritable.exit_code, 74) << unwritable.err;
  EXPECT_EQ(HashField("t", "refcount"), "1");
  auto fine = Tool("mcd-get", {"t", "-o", dir_.path() + "/t.npy"});
  EXPECT_EQ(fine.exit_code, 0) << fine.err;
  EXPECT_EQ(HashField("t", "refcount"), "2");
}

// A release that took effect is reported as one even when the hash it read back fails
// validation (edited since the get): an error would have a caller that retries give back a
// second reference.
TEST_F(Lifecycle, AReleaseOfAHandEditedHashSucceedsAndGivesBackOneReference) {
  ASSERT_EQ(
      Tool("mcd-create", {"t", "--dtype", "f32", "--shape", "4,4", "--device", "cpu"}).exit_code,
      0);
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(client->Get("t").ok()) << i;
  EXPECT_EQ(HashField("t", "refcount"), "5");
  auto conn = redis_.Connect();
  ASSERT_TRUE(conn->Command({"HSET", keys_.Tensor("t"), "dtype", "f64"}).ok());
  auto released = client->Release("t");
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->name, "t");
  EXPECT_EQ(released->refcount, 4);
  EXPECT_EQ(HashField("t", "refcount"), "4");
  ASSERT_TRUE(conn->Command({"HSET", keys_.Tensor("t"), "ctime", "yesterday"}).ok());
  released = client->Release("t");
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->refcount, 3);
  EXPECT_EQ(HashField("t", "refcount"), "3");
}

// An output that cannot be written whole (here past the file-size limit, as on a full disk)
// leaves the file it would have replaced as it was and nothing beside it, says why, and gives
// the reference back; one that can replaces it whole, keeping its permission bits.
TEST_F(Lifecycle, AnOutputIsWrittenWholeOrNotAtAll) {
  std::mt19937 random(20240607);
  std::string data = test::RandomBytes(64 << 10, 20240606);
  std::string npy = test::U8Npy(data);
  std::string in = dir_.path() + "/in.npy";
  std::ofstream(in, std::ios::binary) << npy;
  ASSERT_EQ(Tool("mcd-create", {"t", "--from", in, "--device", "cpu", "-q"}).exit_code, 0);
  std::string out_dir = dir_.path() + "/out";
  ASSERT_EQ(mkdir(out_dir.c_str(), 0755), 0);
  auto files = [&] {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(out_dir))
      names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  };
  for (const std::string& name : {"t.npy", "t.bin"}) {
    SCOPED_TRACE(name);
    std::string target = out_dir + "/" + name;
    std::string before(1000, '\0');
    for (char& c : before) c = static_cast<char>(random());
    std::ofstream(target, std::ios::binary) << before;
    ASSERT_EQ(chmod(target.c_str(), 0640), 0);
    auto limited =
        test::Run({test::ToolPath("mcd-get"), "t", "-o", target, "--node", node_}, Env(), 60, [] {
          rlimit limit{16 << 10, 16 << 10};
          setrlimit(RLIMIT_FSIZE, &limit);
        });
    EXPECT_EQ(limited.exit_code, 74) << limited.err;
    EXPECT_NE(limited.err.find("cannot write " + target + ": " + std::strerror(EFBIG)),
              std::string::npos)
        << limited.err;
    // (Compared as a whole: a failure prints sizes, not 64 KiB of bytes.)
    std::string left = test::ReadFile(target);
    EXPECT_TRUE(left == before) << "the old file is now " << left.size() << " bytes";
    EXPECT_EQ(files(), std::vector<std::string>{name});
    EXPECT_EQ(HashField("t", "refcount"), "1");

    auto got = Tool("mcd-get", {"t", "--no-ref", "-o", target, "-q"});
    ASSERT_EQ(got.exit_code, 0) << got.err;
    std::string written = test::ReadFile(target);
    EXPECT_TRUE(written == (name == "t.npy" ? npy : data)) << written.size() << " bytes written";
    EXPECT_EQ(files(), std::vector<std::string>{name});
    struct stat st {};
    ASSERT_EQ(stat(target.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    ASSERT_EQ(unlink(target.c_str()), 0);
  }
}

// An output that is a FIFO is written into, not replaced by a plain file: its reader gets every
// byte and an end of file, and the FIFO stays one.
TEST_F(Lifecycle, AnOutputThatIsAFifoIsWrittenIntoNotReplaced) {
  std::string data = test::RandomBytes(256 << 10, 20240608);  // more than a pipe holds
  std::string in = dir_.path() + "/in.npy";
  std::ofstream(in, std::ios::binary) << test::U8Npy(data);
  ASSERT_EQ(Tool("mcd-create", {"t", "--from", in, "--device", "cpu", "-q"}).exit_code, 0);
  std::string fifo = dir_.path() + "/pipe.bin";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  test::Background reader({"/bin/cat", fifo}, {}, dir_.path() + "/received");
  auto got = Tool("mcd-get", {"t", "--no-ref", "-q", "-o", fifo});
  EXPECT_EQ(got.exit_code, 0) << got.err;
  struct stat st {};
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a plain file";
  // A replaced FIFO never gets its writer: its reader would wait for ever.
  ASSERT_EQ(reader.Wait(S_ISFIFO(st.st_mode) ? 30 : 1), 0) << "the reader got no end of file";
  std::string received = test::ReadFile(dir_.path() + "/received");
  EXPECT_TRUE(received == data) << received.size() << " of " << data.size() << " bytes received";
}

// An output that links to a device is written into: the device stays a device, the link a link,
// and no temporary file is left beside it. The device is a null device of the test's own, so
// that a failure replaces nothing of the system's.
TEST_F(Lifecycle, AnOutputLinkedToADeviceIsWrittenIntoNotReplaced) {
  if (geteuid() != 0) GTEST_SKIP() << "making a device node needs root";
  std::string device = dir_.path() + "/null";
  if (mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "cannot make a device node: " << std::strerror(errno);
  }
  int probe = open(device.c_str(), O_WRONLY | O_CLOEXEC);
  if (probe < 0) GTEST_SKIP() << "a device node cannot be opened here: " << std::strerror(errno);
  close(probe);
  std::string in = dir_.path() + "/in.npy";
  std::ofstream(in, std::ios::binary) << test::U8Npy(test::RandomBytes(64 << 10, 20240609));
  ASSERT_EQ(Tool("mcd-create", {"t", "--from", in, "--device", "cpu", "-q"}).exit_code, 0);
  std::string out_dir = dir_.path() + "/out";
  ASSERT_EQ(mkdir(out_dir.c_str(), 0755), 0);
  for (const std::string name : {"null.bin", "null.npy"}) {
    SCOPED_TRACE(name);
    std::string link = out_dir + "/" + name;
    ASSERT_EQ(symlink(device.c_str(), link.c_str()), 0);
    auto got = Tool("mcd-get", {"t", "--no-ref", "-q", "-o", link});
    EXPECT_EQ(got.exit_code, 0) << got.err;
    struct stat st {};
    ASSERT_EQ(lstat(device.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device was replaced by a plain file";
    ASSERT_EQ(lstat(link.c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(out_dir))
      names.push_back(entry.path().filename());
    EXPECT_EQ(names, std::vector<std::string>{name});
    ASSERT_EQ(unlink(link.c_str()), 0);
  }
}

TEST_F(Lifecycle, ACreateWhoseReplyRedisRefusesChangesNothing) {
  // The reply list of this req is a string: the commit cannot write the reply, and must then
  // not have written the hash either (Redis keeps a script's writes made before an error).
  auto conn = redis_.Connect();
  ASSERT_TRUE(conn->Command({"SET", keys_.Reply("taken-1"), "not a list"}).ok());
  ASSERT_TRUE(
      conn->Command(
              {"LPUSH", keys_.queue,
               R"({"op":"create","name":"c","dtype":"u8","shape":[8],"device":"cpu","req":"taken-1"})"})
          .ok());
  ASSERT_TRUE(
      test::WaitFor([&] { return ServeLog().find("got no reply") != std::string::npos; }, 5000))
      << ServeLog();
  EXPECT_EQ(conn->Command({"EXISTS", keys_.Tensor("c")})->integer, 0) << ServeLog();
  EXPECT_EQ(conn->Command({"LLEN", keys_.Processing(node_)})->integer, 0);
  EXPECT_TRUE(test::WaitFor([&] { return ShmCount() == 0; }, 2000));  // its memory went back
  EXPECT_EQ(Tool("mcd-create", {"c", "--dtype", "u8", "--shape", "8", "--device", "cpu"}).exit_code,
            0)
      << ServeLog();
  EXPECT_EQ(HashField("c", "refcount"), "1");
}

TEST_F(Lifecycle, ACommitRefusedForAWhileIsAppliedOnceRedisAllowsIt) {
  auto conn = redis_.Connect();
  // An operator takes script calls away from the server's user, then gives them back: the take
  // still works, the commit is refused with NOPERM, which may pass.
  ASSERT_TRUE(conn->Command({"ACL", "SETUSER", "default", "-evalsha"}).ok());
  ASSERT_TRUE(
      conn->Command(
              {"LPUSH", keys_.queue,
               R"({"op":"create","name":"late","dtype":"u8","shape":[8],"device":"cpu","req":"late-1"})"})
          .ok());
  ASSERT_TRUE(test::WaitFor(
      [&] { return ServeLog().find("name=late outcome=redis_error") != std::string::npos; }, 5000))
      << ServeLog();
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(conn->Command({"LLEN", keys_.Processing(node_)})->integer, 1);  // kept, not dropped
  EXPECT_EQ(conn->Command({"EXISTS", keys_.Tensor("late")})->integer, 0);
  std::string log = ServeLog();
  size_t tries = 0;
  for (size_t at = log.find("name=late outcome=redis_error"); at != std::string::npos;
       at = log.find("name=late outcome=redis_error", at + 1)) {
    ++tries;
  }
  EXPECT_GE(tries, 2u) << log;  // tried again...
  EXPECT_LE(tries, 5u) << log;  // ...about once a second, not in a tight loop
  ASSERT_TRUE(conn->Command({"ACL", "SETUSER", "default", "+evalsha"}).ok());
  auto reply = test::BlockingPop(*conn, keys_.Reply("late-1"), 20);
  ASSERT_TRUE(reply.ok() && reply->elements.size() == 2) << ServeLog();
  EXPECT_EQ(json::parse(reply->elements[1].str)["ok"], true) << reply->elements[1].str;
  EXPECT_EQ(HashField("late", "refcount"), "1");
  EXPECT_EQ(conn->Command({"LLEN", keys_.Processing(node_)})->integer, 0);
  EXPECT_EQ(ShmCount(), 1u);  // the failed tries gave their memory back
}

TEST_F(Lifecycle, RedisOutOfMemoryPausesTheServerWhichResumesAfter) {
  auto conn = redis_.Connect();
  ASSERT_TRUE(conn->Command({"CONFIG", "SET", "maxmemory", "1"}).ok());
  auto refused = Tool("mcd-create", {"m", "--dtype", "u8", "--shape", "4", "--device", "cpu",
                                     "--timeout-ms", "1000"});
  EXPECT_EQ(refused.exit_code, 76) << refused.err;
  EXPECT_NE(refused.err.find("OOM"), std::string::npos) << refused.err;
  // Commands on the socket come while the server waits between refused takes: each is refused,
  // and none counts as Redis handing out commands again.
  int fd = ConnectCommandSocket();
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::string line = R"({"op":"create","name":"s)" + std::to_string(i) +
                       R"(","dtype":"u8","shape":[4],"device":"cpu","req":"oom-)" +
                       std::to_string(i) + "\"}\n";
    ASSERT_EQ(send(fd, line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));
    std::string reply;
    char c = 0;
    while (recv(fd, &c, 1, 0) == 1 && c != '\n') reply.push_back(c);
    EXPECT_NE(reply.find("OOM"), std::string::npos) << reply;
    EXPECT_EQ(json::parse(reply)["ok"], false) << reply;
  }
  close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  std::string log = ServeLog();
  // Said once, not at every retry, and no reconnect loop.
  size_t said = 0;
  for (size_t at = log.find("refuses to hand out commands"); at != std::string::npos;
       at = log.find("refuses to hand out commands", at + 1)) {
    ++said;
  }
  EXPECT_EQ(said, 1u) << log;
  EXPECT_EQ(log.find("hands out commands again"), std::string::npos) << log;
  EXPECT_EQ(log.find("reconnecting"), std::string::npos) << log;
  // The heartbeat (every 0.75 s here) failed at least twice by now, and said so once.
  size_t first = log.find("heartbeat: ");
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("heartbeat: ", first + 1), std::string::npos) << log;
  ASSERT_TRUE(conn->Command({"CONFIG", "SET", "maxmemory", "0"}).ok());
  // On a loaded machine the heartbeat may have expired meanwhile (its TTL is 3 s here): a tool
  // finds the server again once it is written again.
  EXPECT_TRUE(test::WaitFor(
      [&] { return ServeLog().find("heartbeat written again") != std::string::npos; }, 10000))
      << ServeLog();
  EXPECT_EQ(Tool("mcd-create", {"m", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
            0)
      << ServeLog();
  EXPECT_NE(ServeLog().find("hands out commands again"), std::string::npos) << ServeLog();
}

TEST_F(Lifecycle, ListingSaysWhichKeysHoldNoReadableTensor) {
  ASSERT_EQ(
      Tool("mcd-create", {"good", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  auto conn = redis_.Connect();
  ASSERT_TRUE(conn->Command({"HSET", keys_.Tensor("by-hand"), "state", "ready"}).ok());
  ASSERT_TRUE(conn->Command({"SET", keys_.Tensor("a-string"), "x"}).ok());
  auto ls = Tool("mcd-ls", {"--no-headers"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_EQ(ls.out.find("by-hand"), std::string::npos) << ls.out;  // the table keeps its shape
  EXPECT_NE(ls.out.find("good"), std::string::npos) << ls.out;
  EXPECT_NE(ls.err.find("2 key(s)"), std::string::npos) << ls.err;
  EXPECT_NE(ls.err.find("a-string: not a hash"), std::string::npos) << ls.err;
  EXPECT_NE(ls.err.find("by-hand: tensor hash of 'by-hand' has a missing or malformed \"dtype\""),
            std::string::npos)
      << ls.err;
  auto listed = json::parse(Tool("mcd-ls", {"--json"}).out);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["name"], "good");
  // Names alone: every key; with --node, that node's readable tensors only (a key that holds no
  // tensor names no node).
  EXPECT_EQ(test::Run({test::ToolPath("mcd-ls"), "-q"}, Env()).out, "a-string\nby-hand\ngood\n");
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "good\n");
  ASSERT_TRUE(conn->Command({"DEL", keys_.Tensor("by-hand"), keys_.Tensor("a-string")}).ok());
}

TEST_F(Lifecycle, EveryBadInputClassCostsNothing) {
  ASSERT_EQ(
      Tool("mcd-create", {"keep", "--dtype", "f32", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  // A tensor another writer is still creating.
  ASSERT_TRUE(redis_.Connect()
                  ->Command({"HSET", keys_.Tensor("half"), "dtype", "f32", "shape", "[1]", "device",
                             "-1", "bytes", "4", "refcount", "0", "state", "creating", "node",
                             node_, "owner", "someone"})
                  .ok());
  std::string n = node_;
  struct Case {
    std::string body;
    const char* code;
    bool with_req;  // false: the command cannot carry a readable req; it is only logged
  };
  std::vector<Case> cases = {
      {"{not json", "invalid_argument", false},
      {"[1,2,3]", "invalid_argument", false},
      {R"({"op":"get","name":")" + std::string(6000, 'a') + "\"}", "too_large", false},
      {std::string(100, '[') + std::string(100, ']'), "invalid_argument", false},
      {R"({"op":"get","op":"delete","name":"keep")", "invalid_argument", true},
      {R"({"op":"frobnicate","name":"keep")", "invalid_argument", true},
      {R"({"op":"create","dtype":"f32","shape":[1],"device":-1)", "invalid_argument", true},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":"x")", "invalid_argument",
       true},
      {R"({"op":"create","name":"a","dtype":"q7","shape":[1],"device":-1)", "invalid_argument",
       true},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[-2],"device":-1)", "invalid_argument",
       true},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[0],"device":-1)", "invalid_argument",
       true},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1.5],"device":-1)", "invalid_argument",
       true},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1,1,1,1,1,1,1,1,1,1],"device":-1)",
       "invalid_argument", true},
      {R"({"op":"create","name":"a","dtype":"f64","shape":[4294967296,4294967296],"device":-1)",
       "too_large", true},
      {R"({"op":"create","name":"","dtype":"f32","shape":[1],"device":-1)", "invalid_argument",
       true},
      {R"({"op":"create","name":")" + std::string(300, 'x') +
           R"(","dtype":"f32","shape":[1],"device":-1)",
       "invalid_argument", true},
      {R"({"op":"create","name":"a\nb","dtype":"f32","shape":[1],"device":-1)", "invalid_argument",
       true},
      {R"({"op":"create","name":"a\u0000","dtype":"f32","shape":[1],"device":-1)",
       "invalid_argument", true},
      {R"({"op":"create","name":"a*","dtype":"f32","shape":[1],"device":-1)", "invalid_argument",
       true},
      {R"({"op":"create","name":"{a}","dtype":"f32","shape":[1],"device":-1)", "invalid_argument",
       true},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":7)", "no_device", true},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":-1,"node":"elsewhere")",
       "wrong_node", true},
      {R"({"op":"get","name":"missing")", "not_found", true},
      {R"({"op":"delete","name":"missing")", "not_found", true},
      {R"({"op":"get","name":"half")", "not_ready", true},
      {R"({"op":"delete","name":"half")", "not_ready", true},
      {R"({"op":"create","name":"keep","dtype":"f32","shape":[1],"device":-1)", "already_exists",
       true},
      {R"({"op":"create","name":"huge","dtype":"u8","shape":[1125899906842624],"device":-1)",
       "out_of_memory", true},
  };
  size_t shm_before = ShmCount();
  int i = 0;
  for (const Case& c : cases) {
    // The command socket answers every line, with a req or without one.
    std::string body =
        c.with_req ? c.body + R"(,"req":"sock-)" + std::to_string(i) + "\"}" : c.body;
    std::string line = OnSocket(body);
    json on_socket = json::parse(line, nullptr, false);
    ASSERT_TRUE(on_socket.is_object()) << c.body << " -> " << line << ServeLog();
    EXPECT_EQ(on_socket["ok"], false) << c.body;
    EXPECT_EQ(on_socket["error"]["code"], c.code) << c.body << " -> " << line;
    if (!c.with_req) {
      ASSERT_TRUE(redis_.Connect()->Command({"LPUSH", keys_.queue, c.body}).ok());
      continue;
    }
    std::string req = "bad-" + std::to_string(i++);
    json reply = Raw(c.body + R"(,"req":")" + req + "\"}", req);
    EXPECT_EQ(reply["ok"], false) << c.body;
    EXPECT_EQ(reply["error"]["code"], c.code) << c.body << " -> " << reply.dump();
    EXPECT_FALSE(reply["error"]["message"].get<std::string>().empty());
  }
  // Nothing changed, nothing allocated, and the server still serves.
  ASSERT_EQ(
      Tool("mcd-create", {"after", "--dtype", "f32", "--shape", "4", "--device", "cpu"}).exit_code,
      0)
      << ServeLog();
  auto keys = TensorKeys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{keys_.Tensor("after"), keys_.Tensor("half"),
                                            keys_.Tensor("keep")}));
  EXPECT_EQ(HashField("keep", "refcount"), "1");
  EXPECT_EQ(HashField("half", "state"), "creating");
  EXPECT_EQ(ShmCount(), shm_before + 1);
  auto processing = redis_.Connect()->Command({"LLEN", keys_.Processing(node_)});
  EXPECT_EQ(processing->integer, 0);
  // Counters are published in the heartbeat.
  ASSERT_TRUE(test::WaitFor(
      [&] {
        auto f = redis_.Connect()->Command({"HGET", keys_.Server(node_), "commands_failed"});
        return f.ok() && !f->is_nil() && std::stoi(f->str) >= static_cast<int>(2 * cases.size());
      },
      5000));
  std::string log = ServeLog();
  EXPECT_NE(log.find("outcome=wrong_node"), std::string::npos);
  EXPECT_NE(log.find("outcome=out_of_memory"), std::string::npos);
}

// Every malformed command that carries a recognisable req is answered on its reply list, on the
// queue, whatever is wrong with it: its sender hears why instead of waiting out its timeout.
TEST_F(Lifecycle, EveryMalformedCommandWithAReqIsAnswered) {
  struct Form {
    std::string body;  // "REQ" stands for the req
    const char* code;
  };
  const std::vector<Form> forms = {
      {R"({"req":"REQ","op":"create",)", "invalid_argument"},
      {R"({"req":"REQ","op":"get","name":"a"} trailing)", "invalid_argument"},
      {R"([{"req":"REQ","op":"get","name":"a"}])", "invalid_argument"},
      {R"({"req":"REQ","op":"get","name":")" + std::string(6000, 'a') + "\"}", "too_large"},
      {R"({"req":"REQ","op":"get","name":"a","x":[[[[[[[[1]]]]]]]]})", "invalid_argument"},
      {"{\"req\":\"REQ\",\"op\":\"get\",\"name\":\"\xff\xfe\"}", "invalid_argument"},
      {R"({ "req" : "REQ" , "op":"get", "name": })", "invalid_argument"},
      {R"({"req":"REQ"})", "invalid_argument"},
      {R"({"req":"REQ","op":"get"})", "invalid_argument"},
      {R"({"req":"REQ","op":42,"name":"a"})", "invalid_argument"},
      {R"({"req":"REQ","op":"get","name":["a"]})", "invalid_argument"},
      {R"({"req":"REQ","op":"zap","name":"a"})", "invalid_argument"},
      {R"({"req":"REQ","op":"create","name":"a","dtype":"f32","shape":"[1]","device":-1})",
       "invalid_argument"},
      {R"({"req":"REQ","op":"get","name":"a","bogus":1})", "invalid_argument"},
      {R"({"op":"get","name":"a","req":"REQ","name":"b"})", "invalid_argument"},
      {R"({"op":"get","name":"a","pid":"x","req":"REQ")", "invalid_argument"},
  };
  auto started = std::chrono::steady_clock::now();
  int i = 0;
  for (const Form& form : forms) {
    std::string req = "malformed-" + std::to_string(i++);
    std::string body = form.body;
    body.replace(body.find("REQ"), 3, req);
    json reply = Raw(body, req);
    ASSERT_TRUE(reply.is_object()) << body << ServeLog();
    EXPECT_EQ(reply["ok"], false) << body;
    EXPECT_EQ(reply["req"], req) << body << " -> " << reply.dump();
    EXPECT_EQ(reply["error"]["code"], form.code) << body << " -> " << reply.dump();
  }
  // Answered, not timed out: all of them within a few seconds even on a loaded machine.
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  EXPECT_EQ(TensorKeys().size(), 0u);
}

// A hash's strings reach the operator's terminal escaped: no control character of a planted
// field moves the cursor, clears the screen or forges a line; --json keeps them exact.
TEST_F(Lifecycle, HumanOutputEscapesControlCharactersAndJsonKeepsThemExact) {
  ASSERT_EQ(
      Tool("mcd-create", {"plain", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  std::string shm = HashField("plain", "ipc_handle");
  const std::string node = "n\x1b[2J\x1b[H\nFORGED 1\tx\r\x7f\xc2\x9b";
  const std::string name = "evil\x1b]0;t\x07\nline";
  ASSERT_TRUE(redis_.Connect()
                  ->Command({"HSET",       keys_.Tensor(name),
                             "dtype",      "u8",
                             "shape",      "[4]",
                             "device",     "-1",
                             "bytes",      "4",
                             "refcount",   "1",
                             "state",      "ready\x1b[31m",
                             "node",       node,
                             "ipc_kind",   "host_shm",
                             "ipc_handle", shm,
                             "owner",      "x"})
                  .ok());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{}, {"-l"}, {"-q"}}) {
    auto ls = test::Run(
        [&] {
          std::vector<std::string> argv = {test::ToolPath("mcd-ls")};
          argv.insert(argv.end(), args.begin(), args.end());
          return argv;
        }(),
        Env());
    SCOPED_TRACE(args.empty() ? "table" : args[0]);
    EXPECT_EQ(ls.exit_code, 0) << ls.err;
    for (char c : ls.out) {
      auto u = static_cast<unsigned char>(c);
      EXPECT_TRUE((u >= 0x20 && u != 0x7f && u != 0x9b) || c == '\n')
          << "raw byte " << int(u) << " in:\n"
          << ls.out;
    }
    EXPECT_EQ(std::count(ls.out.begin(), ls.out.end(), '\n'),
              args.empty() || args[0] == "-l" ? 3 : 2)
        << ls.out;
    EXPECT_NE(ls.out.find("evil\\x1b]0;t\\x07\\nline"), std::string::npos) << ls.out;
    if (args.empty())
      EXPECT_NE(ls.out.find("n\\x1b[2J\\x1b[H\\nFORGED 1\\tx\\r\\x7f\\u009b"), std::string::npos)
          << ls.out;
  }
  auto json_ls = test::Run({test::ToolPath("mcd-ls"), "--json"}, Env());
  ASSERT_EQ(json_ls.exit_code, 0) << json_ls.err;
  json listed = json::parse(json_ls.out);
  bool found = false;
  for (const json& t : listed) {
    if (t["name"] != name) continue;
    found = true;
    EXPECT_EQ(t["node"], node);
    EXPECT_EQ(t["state"], "ready\x1b[31m");
  }
  EXPECT_TRUE(found) << json_ls.out;
  ASSERT_TRUE(redis_.Connect()->Command({"DEL", keys_.Tensor(name)}).ok());
}

// Hashes written by hand without a tensor's fields are named on stderr, five at most, by the
// table, -l and --json alike, and left out of what they print.
TEST_F(Lifecycle, ListNamesHashesWithoutTensorFields) {
  ASSERT_EQ(
      Tool("mcd-create", {"real", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  auto conn = redis_.Connect();
  for (int i = 1; i <= 6; ++i) {
    ASSERT_TRUE(
        conn->Command({"HSET", keys_.Tensor("junk" + std::to_string(i)), "foo", "bar"}).ok());
  }
  for (const std::string& flag : {"--no-headers", "-l", "--json"}) {
    SCOPED_TRACE(flag);
    auto ls = test::Run({test::ToolPath("mcd-ls"), flag}, Env());
    EXPECT_EQ(ls.exit_code, 0) << ls.err;
    EXPECT_NE(ls.err.find("6 key(s) under the tensor prefix hold no readable tensor"),
              std::string::npos)
        << ls.err;
    for (int i = 1; i <= 5; ++i)
      EXPECT_NE(ls.err.find("\n  junk" + std::to_string(i) + ": "), std::string::npos) << ls.err;
    EXPECT_NE(ls.err.find("... and 1 more"), std::string::npos) << ls.err;
    EXPECT_EQ(ls.out.find("junk"), std::string::npos) << ls.out;
    EXPECT_NE(ls.out.find("real"), std::string::npos) << ls.out;
  }
}

// Errors and records quote what a hash holds (a state, a node) on stdout and stderr: every tool
// shows it escaped, whatever path prints it.
TEST_F(Lifecycle, ToolErrorsAndRecordsEscapePlantedFields) {
  ASSERT_EQ(
      Tool("mcd-create", {"src", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code, 0);
  auto conn = redis_.Connect();
  auto plant = [&](const std::string& field, const std::string& value) {
    std::vector<std::string> hset = {"HSET", keys_.Tensor("planted")};
    auto fields = conn->Command({"HGETALL", keys_.Tensor("src")});
    for (const auto& e : fields->elements) hset.push_back(e.str);
    hset.insert(hset.end(), {"holder:1:1", "0", field, value});
    ASSERT_TRUE(conn->Command(std::vector<std::string_view>(hset.begin(), hset.end())).ok());
  };
  auto expect_escaped = [](const test::ProcessResult& r, const std::string& shown) {
    std::string all = r.out + r.err;
    for (char c : all) {
      auto u = static_cast<unsigned char>(c);
      EXPECT_TRUE((u >= 0x20 && u < 0x7f) || c == '\n') << "raw byte " << int(u) << " in:\n" << all;
    }
    EXPECT_NE(all.find(shown), std::string::npos) << all;
  };
  const std::vector<std::vector<std::string>> runs = {{"mcd-get", "planted"},
                                                      {"mcd-get", "planted", "--wait", "1"},
                                                      {"mcd-rm", "planted"},
                                                      {"mcd-get", "planted", "--no-ref"}};
  plant("state", "bad\x1b]0;pwned\x07\x1b[2J\xc2\x9b\x9b");
  for (const auto& run : runs) {
    SCOPED_TRACE(run[0] + " " + run[1] + (run.size() > 2 ? " " + run[2] : ""));
    expect_escaped(Tool(run[0], {run.begin() + 1, run.end()}),
                   "bad\\x1b]0;pwned\\x07\\x1b[2J\\u009b\\x9b");
  }
  plant("state", "ready");
  plant("node", "vm\x1b[2J");
  for (const auto& run : runs) {
    SCOPED_TRACE(run[0] + " " + run[1] + (run.size() > 2 ? " " + run[2] : ""));
    expect_escaped(Tool(run[0], {run.begin() + 1, run.end()}), "vm\\x1b[2J");
  }
  ASSERT_TRUE(conn->Command({"DEL", keys_.Tensor("planted")}).ok());
}

// The same for the two other human outputs that print what Redis holds: a watch line of a
// planted event, and a --servers row of a planted heartbeat.
TEST_F(Lifecycle, WatchLinesAndServerRowsEscapeControlCharacters) {
  auto raw_bytes = [](const std::string& out) {
    std::string found;
    for (char c : out) {
      auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\n') || u == 0x7f || u == 0x9b) found += std::to_string(u) + " ";
    }
    return found;
  };
  const std::string evil = "e\x1b[2J\x1b[H\nFORGED\r\x7f\xc2\x9b";
  auto conn = redis_.Connect();
  ASSERT_TRUE(conn->Command({"XADD", keys_.Events(), "*", "event", "create", "name", evil, "node",
                             evil, "refcount", "1", "pid", "1", "reason", evil})
                  .ok());
  // Events without a name (the server's start) pass any glob: the planted one is the second.
  // Not Tool(), whose --node would leave out the planted event of another node.
  auto watch = test::Run(
      {test::ToolPath("mcd-ls"), "--watch", "e*", "--since", "all", "--count", "2"}, Env());
  EXPECT_EQ(watch.exit_code, 0) << watch.err;
  EXPECT_EQ(raw_bytes(watch.out), "") << watch.out;
  EXPECT_NE(watch.out.find("e\\x1b[2J\\x1b[H\\nFORGED\\r\\x7f\\u009b"), std::string::npos)
      << watch.out;
  auto watch_json = test::Run(
      {test::ToolPath("mcd-ls"), "--watch", "e*", "--json", "--since", "all", "--count", "2"},
      Env());
  ASSERT_EQ(watch_json.exit_code, 0) << watch_json.err;
  EXPECT_EQ(json::parse(watch_json.out.substr(watch_json.out.find('\n') + 1))["name"], evil)
      << watch_json.out;

  std::vector<std::string> heartbeat = {"HSET", keys_.Server(evil)};
  auto fields = conn->Command({"HGETALL", keys_.Server(node_)});
  for (const auto& e : fields->elements) heartbeat.push_back(e.str);
  heartbeat.insert(heartbeat.end(), {"node", evil, "instance", "i\x1b[31m", "version", evil});
  ASSERT_TRUE(
      conn->Command(std::vector<std::string_view>(heartbeat.begin(), heartbeat.end())).ok());
  auto servers = test::Run({test::ToolPath("mcd-ls"), "--servers"}, Env());
  EXPECT_EQ(raw_bytes(servers.out + servers.err), "") << servers.out << servers.err;
  EXPECT_NE(servers.out.find("FORGED"), std::string::npos) << "the planted row is shown:\n"
                                                           << servers.out;
  ASSERT_TRUE(conn->Command({"DEL", keys_.Server(evil)}).ok());
}

// A heartbeat with a malformed field (crafted, or damaged) names no server: mcd-ls --servers
// says which and why on stderr and still lists the good ones, and a client of that node is
// refused naming the field (exit 76).
TEST_F(Lifecycle, AMalformedHeartbeatIsShownUnreadableAndRefusedNamingItsField) {
  auto conn = redis_.Connect();
  const std::string bad = keys_.Server("crafted");
  ASSERT_TRUE(conn->Command({"HSET", bad, "instance", "i", "node", "crafted", "pid", "12x"}).ok());
  auto servers = test::Run({test::ToolPath("mcd-ls"), "--servers", "-q"}, Env());
  EXPECT_EQ(servers.exit_code, 0) << servers.err;
  EXPECT_EQ(servers.out, node_ + "\n");
  EXPECT_NE(servers.err.find("note: unreadable heartbeat " + bad +
                             ": the heartbeat's field 'pid' is '12x', not a number of its kind"),
            std::string::npos)
      << servers.err;
  auto got = test::Run({test::ToolPath("mcd-get"), "x", "-q", "--node", "crafted"}, Env());
  EXPECT_EQ(got.exit_code, 76) << got.err;
  EXPECT_NE(got.err.find("the heartbeat of node 'crafted' at " + bad +
                         ": the heartbeat's field 'pid' is '12x'"),
            std::string::npos)
      << got.err;
  ASSERT_TRUE(conn->Command({"DEL", bad}).ok());
}

// Thousands of commands mutated from valid ones (values swapped for odd ones, fields dropped or
// repeated, bytes changed, cut short), pushed while a client works: the server keeps serving,
// answers every well-formed one that names a req with a JSON reply, leaves none in its
// processing list, and creates only tensors whose names the tools can show; everything it made
// is freed again.
TEST_F(Lifecycle, MutatedCommandsNeverBreakTheServerNorLeaveUnlistableTensors) {
  const std::vector<json> bases = {
      json::parse(
          R"({"op":"create","name":"m1","dtype":"f32","shape":[2,3],"device":"cpu","pid":1})"),
      json::parse(R"({"op":"get","name":"m1"})"),
      json::parse(R"({"op":"delete","name":"m1"})"),
      json::parse(
          R"({"op":"create","name":"m2","dtype":"i8","shape":[4],"device":-1,"lifetime":"stack","pid":1})"),
  };
  const std::vector<json> odd = {nullptr,
                                 true,
                                 -1,
                                 0,
                                 1,
                                 1.5,
                                 18446744073709551615ull,
                                 -9223372036854775807ll,
                                 "",
                                 std::string(1, '\0'),
                                 std::string("a\0b", 3),
                                 "a{b}",
                                 "*",
                                 "x\ny",
                                 std::string(300, 'n'),
                                 json::array(),
                                 json::object(),
                                 json::array({1, json::array({2})}),
                                 "cpu",
                                 "f32",
                                 "create",
                                 "delete",
                                 "m1",
                                 "m2",
                                 "heap",
                                 "stack",
                                 "none"};
  const std::vector<std::string> fields = {"op",        "name",  "dtype", "shape",    "device",
                                           "pid",       "node",  "req",   "lifetime", "init",
                                           "owner_pid", "bytes", "extra"};
  std::mt19937 rng(20261122);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<std::string> bodies;
  std::vector<bool> must_answer;  // JSON objects whose req is ours
  for (int i = 0; i < 3000; ++i) {
    json cmd = bases[pick(bases.size())];
    for (size_t m = 1 + pick(3); m > 0; --m) {
      size_t what = pick(10);
      if (what < 2) {
        cmd["name"] = odd[pick(odd.size())];
      } else if (what < 5) {
        cmd[fields[pick(fields.size())]] = odd[pick(odd.size())];
      } else if (what < 7 && !cmd.empty()) {
        auto it = cmd.begin();
        std::advance(it, static_cast<long>(pick(cmd.size())));
        cmd.erase(it);
      } else {
        cmd["name"] = "m" + std::to_string(pick(4));
      }
    }
    bool with_req = pick(2) == 0;
    if (with_req) cmd["req"] = "mut-" + std::to_string(i);
    std::string body = cmd.dump(-1, ' ', false, json::error_handler_t::replace);
    bool intact = false;
    switch (pick(8)) {
      case 0:
        body[pick(body.size())] = static_cast<char>(rng());
        break;  // any byte
      case 1:
        body.resize(pick(body.size()));
        break;  // cut short
      case 2:
        body.insert(body.size() - 1, R"(,"op":"get")");
        break;  // a repeated key
      default:
        intact = true;
        break;
    }
    bodies.push_back(body);
    must_answer.push_back(with_req && intact);
  }
  ASSERT_EQ(
      Tool("mcd-create", {"shared", "--dtype", "f32", "--shape", "8", "--device", "cpu"}).exit_code,
      0);
  test::Background client(
      {std::string(MCD_TEST_BIN_DIR) + "/stress_client", redis_.url(), node_, "0", "200", "shared"},
      {}, dir_.path() + "/client.log");
  auto conn = redis_.Connect();
  for (size_t at = 0; at < bodies.size(); at += 100) {
    std::vector<std::string_view> args = {"LPUSH", keys_.queue};
    for (size_t i = at; i < std::min(bodies.size(), at + 100); ++i) args.push_back(bodies[i]);
    ASSERT_TRUE(conn->Command(args).ok());
  }
  // A last command behind them all: once it is answered, every one before it was handled.
  json last = Raw(
      R"({"op":"create","name":"last","dtype":"u8","shape":[1],"device":"cpu","req":"mut-last"})",
      "mut-last");
  ASSERT_EQ(last["ok"], true) << last.dump() << ServeLog();
  EXPECT_EQ(client.Stop(0, 60), 0)
      << test::ReadFile(dir_.path() + "/client.log");  // signal 0: waits
  EXPECT_EQ(HashField("shared", "refcount"), "1");
  EXPECT_EQ(conn->Command({"LLEN", keys_.Processing(node_)})->integer, 0);
  // The replies are JSON saying ok or why not.
  size_t answered = 0;
  for (size_t i = 0; i < bodies.size(); ++i) {
    auto reply = conn->Command({"LPOP", keys_.Reply("mut-" + std::to_string(i))});
    ASSERT_TRUE(reply.ok());
    EXPECT_TRUE(!must_answer[i] || !reply->is_nil()) << json(bodies[i]).dump();
    if (reply->is_nil()) continue;
    ++answered;
    json parsed = json::parse(reply->str, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << reply->str;
    EXPECT_TRUE(parsed["ok"] == true || parsed["error"]["code"].is_string()) << reply->str;
  }
  EXPECT_GT(answered, 500u);
  // What was created has a name the tools can show, and mcd-ls lists each of them.
  const std::string allowed =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/@+=,-";
  auto keys = TensorKeys();
  for (const std::string& key : keys) {
    std::string name =
        key.substr(keys_.Tensor("").size() - 1, key.size() - keys_.Tensor("").size());
    EXPECT_EQ(name.find_first_not_of(allowed), std::string::npos) << json(key).dump();
  }
  auto listed = Tool("mcd-ls", {"--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  json tensors = json::parse(listed.out);
  EXPECT_EQ(tensors.size(), keys.size()) << listed.out;
  EXPECT_EQ(listed.err, "");
  // Everything is given back: the memory with it.
  for (const json& tensor : tensors) {
    for (int64_t held = tensor["refcount"]; held > 0; --held) {
      auto removed = Tool("mcd-rm", {tensor["name"], "-q"});
      ASSERT_EQ(removed.exit_code, 0) << tensor.dump() << " " << removed.err << ServeLog();
    }
  }
  EXPECT_EQ(TensorKeys(), std::vector<std::string>{}) << ServeLog();
  EXPECT_TRUE(ShmFreedSoon());
}

// mcd-bench against a live server gives back every tensor it made: after a run that went
// through, and after one stopped by SIGTERM halfway, with its own tensors, its child processes'
// references and those processes themselves.
TEST_F(Lifecycle, ABenchGivesBackEveryTensorItMadeEvenWhenStopped) {
  auto run = Tool("mcd-bench", {"--cpu", "--sizes", "4KiB", "--iterations", "20", "--max-seconds",
                                "0.3", "--fresh", "1", "--clients", "1", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err.find("warning"), std::string::npos) << run.err;
  EXPECT_EQ(TensorKeys(), std::vector<std::string>{});
  EXPECT_TRUE(ShmFreedSoon());

  test::Background bench(
      {test::ToolPath("mcd-bench"), "--cpu", "--sizes", "4KiB,1MiB", "--iterations", "200",
       "--max-seconds", "2", "--fresh", "20", "--clients", "2", "--node", node_},
      Env(), dir_.path() + "/bench.log");
  std::vector<pid_t> children;
  ASSERT_TRUE(test::WaitFor(
      [&] {
        children = test::ChildrenOf(bench.pid());
        return !children.empty() && !TensorKeys().empty();
      },
      20000))
      << test::ReadFile(dir_.path() + "/bench.log");
  EXPECT_EQ(bench.Stop(SIGTERM), 128 + SIGTERM);
  std::string log = test::ReadFile(dir_.path() + "/bench.log");
  EXPECT_NE(log.find("mcd-bench: stopped by SIGTERM; the run's tensors are given back"),
            std::string::npos)
      << log;
  EXPECT_EQ(TensorKeys(), std::vector<std::string>{});
  EXPECT_TRUE(ShmFreedSoon());
  for (pid_t child : children) EXPECT_FALSE(test::Running(child)) << child;
}

// mcd-ls fits the shell: each value of the table one field (awk counts as many in a row as in
// the header), rows ordered by --sort (-r reverses), columns chosen by --columns; -q and --json
// exclude each other in every tool; a name that would read as an option cannot be made.
TEST_F(Lifecycle, ListingsFitTheShell) {
  const std::vector<std::pair<std::string, std::string>> made = {
      {"small", "4"}, {"large", "4096"}, {"middle", "256"}};
  for (const auto& [name, n] : made) {
    ASSERT_EQ(Tool("mcd-create", {name, "--dtype", "f32", "--shape", n, "--device", "cpu", "-q"})
                  .exit_code,
              0);
  }
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  auto table = Tool("mcd-ls", {});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  std::vector<std::string> rows = lines(table.out);
  ASSERT_EQ(rows.size(), 4u) << table.out;
  for (const std::string& row : rows)
    EXPECT_EQ(test::FieldCount(row), test::FieldCount(rows[0])) << table.out;
  EXPECT_NE(table.out.find(" 16KiB "), std::string::npos) << table.out;

  auto by_bytes = Tool("mcd-ls", {"--sort", "bytes", "--columns", "name,bytes", "--no-headers"});
  ASSERT_EQ(by_bytes.exit_code, 0) << by_bytes.err;
  EXPECT_EQ(lines(by_bytes.out),
            (std::vector<std::string>{"small   16B", "middle  1.0KiB", "large   16KiB"}))
      << by_bytes.out;
  auto reversed = Tool("mcd-ls", {"--sort", "bytes", "-r", "-q"});
  EXPECT_EQ(reversed.out, "large\nmiddle\nsmall\n") << reversed.err;
  auto by_name = Tool("mcd-ls", {"-q"});
  EXPECT_EQ(by_name.out, "large\nmiddle\nsmall\n") << by_name.err;
  auto unknown = Tool("mcd-ls", {"--columns", "name,colour"});
  EXPECT_EQ(unknown.exit_code, 64);
  EXPECT_NE(unknown.err.find("no column 'colour'"), std::string::npos) << unknown.err;
  EXPECT_EQ(Tool("mcd-ls", {"--sort", "colour"}).exit_code, 64);

  for (const std::string& tool : {"mcd-ls", "mcd-get", "mcd-rm", "mcd-create"}) {
    auto both = Tool(tool, {"small", "--json", "-q"});
    EXPECT_EQ(both.exit_code, 64) << tool << ": " << both.out;
    EXPECT_NE(both.err.find("excludes"), std::string::npos) << tool << ": " << both.err;
  }
  auto dashed = test::Run({test::ToolPath("mcd-create"), "--node", node_, "--dtype", "u8",
                           "--shape", "4", "--device", "cpu", "--", "-rf"},
                          Env());
  EXPECT_EQ(dashed.exit_code, 64) << dashed.out;
  EXPECT_NE(dashed.err.find("starts with '-'"), std::string::npos) << dashed.err;
  EXPECT_EQ(HashField("-rf", "state"), "");
  for (const auto& [name, n] : made) ASSERT_EQ(Tool("mcd-rm", {name, "-q"}).exit_code, 0);
}

TEST_F(Lifecycle, ToolExitCodes) {
  EXPECT_EQ(Tool("mcd-create", {"a", "--dtype", "f32"}).exit_code, 64);
  EXPECT_EQ(Tool("mcd-create", {"a", "--dtype", "f99", "--shape", "1"}).exit_code, 64);
  EXPECT_EQ(Tool("mcd-create", {"--bogus"}).exit_code, 64);
  auto stock = test::Run({test::ToolPath("mcd-serve"), "--ready-max", "lots"}, Env());
  EXPECT_EQ(stock.exit_code, 64);
  EXPECT_NE(stock.err.find("--ready-max: bad size 'lots'"), std::string::npos) << stock.err;
  // A share of the device, or a size: out of range, malformed or past 2^64, refused before the
  // server starts (no heartbeat written).
  for (const char* bad : {"150%", "0%", "-5%", "10%%", "25 %", "0x10", "1e9", "17000000TiB"}) {
    auto refused = test::Run(
        {test::ToolPath("mcd-serve"), "--devices", "cpu", "--ready-max", bad, "--node", "refused"},
        Env());
    EXPECT_EQ(refused.exit_code, 64) << bad << ": " << refused.err;
    EXPECT_NE(refused.err.find("--ready-max"), std::string::npos) << bad << ": " << refused.err;
  }
  auto pool = test::Run({test::ToolPath("mcd-serve"), "--pool-max", "101%"}, Env());
  EXPECT_EQ(pool.exit_code, 64) << pool.err;
  EXPECT_EQ(redis_.Connect()->Command({"EXISTS", keys_.Server("refused")})->integer, 0);
  auto help = Tool("mcd-ls", {"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("MCD_REDIS_URL"), std::string::npos);
  // No server for that node: 69 at once.
  auto none = test::Run({test::ToolPath("mcd-create"), "a", "--dtype", "f32", "--shape", "1",
                         "--device", "cpu", "--node", "nobody-here"},
                        Env());
  EXPECT_EQ(none.exit_code, 69);
  EXPECT_NE(none.err.find("no mcd-serve is running for node 'nobody-here'"), std::string::npos)
      << none.err;
  // A heartbeat but nobody consuming that queue: 75 after the timeout.
  ASSERT_TRUE(redis_.Connect()->Command({"HSET", keys_.Server("stuck"), "pid", "1"}).ok());
  auto stuck =
      test::Run({test::ToolPath("mcd-create"), "a", "--dtype", "f32", "--shape", "1", "--device",
                 "cpu", "--node", "stuck", "--queue", "stuck-queue", "--timeout-ms", "300"},
                Env());
  EXPECT_EQ(stuck.exit_code, 75) << stuck.err;
  // Redis not there: 69 at once, naming it (RedisAbsent tries more forms).
  auto down = test::Run({test::ToolPath("mcd-get"), "a", "--no-ref", "--timeout-ms", "300",
                         "--redis-url", "unix:///nonexistent.sock"});
  EXPECT_EQ(down.exit_code, 69) << down.err;
  EXPECT_NE(down.err.find("cannot connect to Redis at unix:///nonexistent.sock"), std::string::npos)
      << down.err;
  EXPECT_NE(down.err.find("is Redis running?"), std::string::npos) << down.err;
}

TEST_F(Lifecycle, ConcurrentClientsKeepExactCounts) {
  ASSERT_EQ(
      Tool("mcd-create", {"shared", "--dtype", "f32", "--shape", "8", "--device", "cpu"}).exit_code,
      0);
  std::vector<std::unique_ptr<test::Background>> clients;
  for (int p = 0; p < 8; ++p) {
    clients.push_back(std::make_unique<test::Background>(
        std::vector<std::string>{std::string(MCD_TEST_BIN_DIR) + "/stress_client", redis_.url(),
                                 node_, std::to_string(p), "200", "shared"},
        std::map<std::string, std::string>{},
        dir_.path() + "/client" + std::to_string(p) + ".log"));
  }
  for (int p = 0; p < 8; ++p) {
    EXPECT_EQ(clients[static_cast<size_t>(p)]->Stop(0, 300), 0)
        << test::ReadFile(dir_.path() + "/client" + std::to_string(p) + ".log");
  }
  EXPECT_EQ(TensorKeys(), std::vector<std::string>{keys_.Tensor("shared")});
  EXPECT_EQ(HashField("shared", "refcount"), "1");
  EXPECT_EQ(ShmCount(), 1u);
}

TEST_F(Lifecycle, SigtermFreesEverything) {
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_EQ(
        Tool("mcd-create", {name, "--dtype", "f32", "--shape", "16", "--device", "cpu"}).exit_code,
        0);
  }
  EXPECT_EQ(ShmCount(), 3u);
  EXPECT_EQ(server_->Stop(SIGTERM), 0) << ServeLog();
  EXPECT_TRUE(TensorKeys().empty());
  EXPECT_FALSE(Heartbeat());
  EXPECT_EQ(ShmCount(), 0u);
  EXPECT_NE(ServeLog().find("freed 3 of 3"), std::string::npos) << ServeLog();
}

// After a command on the socket the serving loop spins for the next one (1 ms where the host
// polls; set here, since machines of fewer than 4 CPUs do not), looking at the queue meanwhile: a
// queue command pushed during the spin is taken by a non-blocking LMOVE and applied once beside
// the socket's, and neither the processing list nor the queue keeps anything after.
TEST_F(Lifecycle, ASpinningLoopTakesQueueCommandsMeanwhile) {
  ASSERT_EQ(server_->Stop(SIGTERM), 0) << ServeLog();
  setenv("MCD_SERVER_SPIN_US", "1000", 1);
  StartServer();
  unsetenv("MCD_SERVER_SPIN_US");
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 100; ++i) {
    std::string n = std::to_string(i);
    ASSERT_TRUE(client->Create(HostSpec("s" + n)).ok());
    json reply = Raw(R"({"op":"create","name":"q)" + n +
                         R"(","dtype":"u8","shape":[8],"device":"cpu","req":"rq)" + n + R"("})",
                     "rq" + n);
    ASSERT_EQ(reply["ok"], true) << reply.dump() << ServeLog();
  }
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(HashField("s" + std::to_string(i), "refcount"), "1");
    EXPECT_EQ(HashField("q" + std::to_string(i), "refcount"), "1") << "applied once";
  }
  auto conn = redis_.Connect();
  EXPECT_EQ(conn->Command({"LLEN", keys_.Processing(node_)})->integer, 0);
  EXPECT_TRUE(test::WaitFor(
      [&] {
        return conn->Command({"LLEN", keys_.NodeQueue(node_)})->integer == 0;
      },
      5000))
      << "no wake marker left in the queue";
  EXPECT_EQ(TensorKeys().size(), 200u);
  // Each straight from its take, none left behind and picked up later.
  EXPECT_EQ(ServeLog().find("] info: resuming "), std::string::npos) << ServeLog();
}

TEST_F(Lifecycle, RestartRemovesWhatADeadInstanceLeft) {
  for (const char* name : {"a", "b"}) {
    ASSERT_EQ(
        Tool("mcd-create", {name, "--dtype", "f32", "--shape", "16", "--device", "cpu"}).exit_code,
        0);
  }
  EXPECT_EQ(server_->Stop(SIGKILL), -SIGKILL);
  EXPECT_EQ(TensorKeys().size(), 2u);
  // A command pushed while no server runs is kept and served by the next instance.
  ASSERT_TRUE(
      redis_.Connect()
          ->Command({"LPUSH", keys_.queue,
                     R"({"op":"create","name":"later","dtype":"u8","shape":[4],"device":-1})"})
          .ok());
  ASSERT_TRUE(test::WaitFor([&] { return !Heartbeat(); }, 6000));
  StartServer();
  ASSERT_TRUE(test::WaitFor([&] { return HashField("later", "state") == "ready"; }, 5000))
      << ServeLog();
  EXPECT_EQ(TensorKeys(), std::vector<std::string>{keys_.Tensor("later")});
  EXPECT_EQ(ShmCount(), 1u);
  EXPECT_NE(ServeLog().find("removed 2 stale tensor(s)"), std::string::npos) << ServeLog();
}

// A SIGKILLed server's heartbeat lingers until its TTL runs out. The tools on its host see that
// the process it names is gone, and say "no server" (69) at once instead of waiting out their
// timeout; no get or release of its tensors counts (their memory died with it), and no create is
// left in a queue nobody takes. A library client connected before the kill is told the same, and
// goes on with the server that takes the node over.
TEST_F(Lifecycle, ADeadServerIsDeadAtOnceForTheToolsOnItsHost) {
  ASSERT_EQ(Tool("mcd-create", {"a", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
            0);
  auto client = ConnectClient();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Get("a").ok());
  // Killed, and not reaped yet by its parent (this test): a zombie is dead all the same.
  ASSERT_EQ(kill(server_->pid(), SIGKILL), 0);
  ASSERT_TRUE(test::WaitFor([&] { return !test::Running(server_->pid()); }, 5000));
  // Lingering for as long as the test needs, as a longer --heartbeat-ttl would keep it.
  auto conn = redis_.Connect();
  ASSERT_EQ(conn->Command({"EXPIRE", keys_.Server(node_), "60"})->integer, 1);
  // Not live for mcd-ls --servers either: not listed, not counted, not ready, and said so.
  auto listed = Tool("mcd-ls", {"--servers"});
  EXPECT_EQ(listed.exit_code, 69) << listed.out << listed.err;
  EXPECT_EQ(listed.out.find(node_), std::string::npos) << listed.out;
  EXPECT_NE(listed.err.find("mcd-serve of node '" + node_ + "' (pid " +
                            std::to_string(server_->pid()) + ") is not running"),
            std::string::npos)
      << listed.err;
  auto quiet = Tool("mcd-ls", {"--servers", "-q"});
  EXPECT_EQ(quiet.exit_code, 69);
  EXPECT_EQ(quiet.out, "");
  auto metrics = Tool("mcd-ls", {"--servers", "--prometheus"});
  EXPECT_NE(metrics.out.find("mcd_servers_live 0\n"), std::string::npos) << metrics.out;
  const std::vector<std::vector<std::string>> commands = {
      {"mcd-get", "a", "-q"},
      {"mcd-get", "a", "--detached", "-q"},
      {"mcd-get", "a", "--no-ref", "-q"},
      {"mcd-rm", "a"},
      {"mcd-create", "b", "--dtype", "u8", "--shape", "4", "--device", "cpu"}};
  for (const std::vector<std::string>& args : commands) {
    std::vector<std::string> rest(args.begin() + 1, args.end());
    rest.insert(rest.end(), {"--timeout-ms", "10000"});
    auto t0 = std::chrono::steady_clock::now();
    auto dead = Tool(args[0], rest);
    auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_EQ(dead.exit_code, 69) << args[0] << " " << args[1] << ": " << dead.err;
    EXPECT_NE(dead.err.find("is not running"), std::string::npos) << dead.err;
    EXPECT_LT(ms, 5000) << args[0] << " " << args[1] << " waited for a dead server";
  }
  auto got = client->Get("a");
  EXPECT_EQ(got.status().code(), ErrorCode::kUnavailable) << got.status().ToString();
  auto released = client->Release("a");
  EXPECT_EQ(released.status().code(), ErrorCode::kUnavailable) << released.status().ToString();
  EXPECT_EQ(HashField("a", "refcount"), "2");  // nothing counted
  EXPECT_TRUE(HashField("b", "state").empty());
  EXPECT_EQ(conn->Command({"LLEN", keys_.NodeQueue(node_)})->integer, 0);
  EXPECT_TRUE(Heartbeat());  // all of the above met the lingering heartbeat

  EXPECT_EQ(server_->Stop(SIGKILL), -SIGKILL);  // reaped
  StartServer();  // takes the node over at once: the heartbeat names a dead process
  EXPECT_TRUE(HashField("a", "state").empty());  // removed as a dead instance's
  ASSERT_TRUE(client->Create(HostSpec("a")).ok());
  ASSERT_TRUE(client->Get("a").ok());
  EXPECT_EQ(HashField("a", "refcount"), "2");
  EXPECT_TRUE(client->Release("a").ok());
  EXPECT_TRUE(client->Release("a").ok());
  EXPECT_TRUE(ShmFreedSoon());
}

// A SIGKILLed server cannot remove its sockets: the next instance of the node removes those of
// dead instances from the runtime folder, and only those: a socket someone listens on (a live
// server of another Redis whose node has the same name) and another node's stay.
TEST_F(Lifecycle, ADeadInstancesSocketsAreRemovedByTheNextAndLiveOnesStay) {
  std::string old_socket =
      redis_.Connect()->Command({"HGET", keys_.Server(node_), "command_socket"})->str;
  ASSERT_EQ(access(old_socket.c_str(), F_OK), 0) << old_socket;
  const std::string folder = old_socket.substr(0, old_socket.rfind('/'));
  std::string tag = node_;
  for (char& c : tag) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  auto bound = [](const std::string& path, bool listening) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
    if (listening) EXPECT_EQ(listen(fd, 4), 0);
    return fd;
  };
  const std::string stale = folder + "/pool-" + tag + "-00112233445566aa.sock";
  const std::string live = folder + "/cmd-" + tag + "-00112233445566bb.sock";
  const std::string other = folder + "/cmd-" + tag + "x-00112233445566cc.sock";
  close(bound(stale, false));  // left behind: nobody listens
  int live_fd = bound(live, true);
  close(bound(other, false));
  ASSERT_EQ(kill(server_->pid(), SIGKILL), 0);
  EXPECT_EQ(server_->Stop(SIGKILL), -SIGKILL);
  ASSERT_EQ(access(old_socket.c_str(), F_OK), 0) << "a SIGKILLed server removed its socket";
  StartServer();
  std::string new_socket =
      redis_.Connect()->Command({"HGET", keys_.Server(node_), "command_socket"})->str;
  EXPECT_NE(new_socket, old_socket);
  EXPECT_EQ(access(new_socket.c_str(), F_OK), 0) << new_socket;
  EXPECT_NE(access(old_socket.c_str(), F_OK), 0) << "the dead instance's socket was left";
  EXPECT_NE(access(stale.c_str(), F_OK), 0) << "a dead instance's pool socket was left";
  EXPECT_EQ(access(live.c_str(), F_OK), 0) << "a socket someone listens on was removed";
  EXPECT_EQ(access(other.c_str(), F_OK), 0) << "another node's socket was removed";
  EXPECT_NE(ServeLog().find("2 dead instances' socket(s)"), std::string::npos) << ServeLog();
  close(live_fd);
  unlink(live.c_str());
  unlink(other.c_str());
}

// A pid means something only where it was taken: a heartbeat written on another host (or in
// another PID namespace) whose pid runs nothing here is not judged dead, by the tools nor by a
// server starting for the node, which waits for its TTL instead. The same heartbeat with this
// host's pid_space is dead at once.
TEST_F(Lifecycle, AHeartbeatOfAnotherHostIsNotJudgedByItsPid) {
  ASSERT_EQ(Tool("mcd-create", {"a", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
            0);
  auto conn = redis_.Connect();
  std::string here = conn->Command({"HGET", keys_.Server(node_), "pid_space"})->str;
  ASSERT_NE(here.find('/'), std::string::npos) << "the heartbeat says where its pid is: " << here;
  test::Background brief({"/bin/true"}, {}, dir_.path() + "/brief.log");
  pid_t gone = brief.pid();
  ASSERT_EQ(brief.Wait(10), 0);                 // its pid now runs nothing
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);  // its heartbeat thread would write its own pid back
  ASSERT_TRUE(conn->Command({"HSET", keys_.Server(node_), "pid", std::to_string(gone), "pid_ino",
                             "", "pid_space", "00000000-0000-0000-0000-000000000000/4026531836"})
                  .ok());
  ASSERT_EQ(conn->Command({"EXPIRE", keys_.Server(node_), "60"})->integer, 1);
  auto foreign = Tool("mcd-get", {"a", "--detached", "-q", "--timeout-ms", "2000"});
  EXPECT_EQ(foreign.exit_code, 0) << foreign.err;
  auto second =
      test::Run({test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", node_}, Env(), 10);
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_NE(second.err.find("already serves node"), std::string::npos) << second.err;
  ASSERT_TRUE(conn->Command({"HSET", keys_.Server(node_), "pid_space", here}).ok());
  auto local = Tool("mcd-get", {"a", "--detached", "-q", "--timeout-ms", "2000"});
  EXPECT_EQ(local.exit_code, 69) << local.err;
  EXPECT_EQ(HashField("a", "refcount"), "2");
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);  // writes its own heartbeat again
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return Tool("mcd-get", {"a", "--detached", "-q"}).exit_code == 0;
      },
      10000))
      << ServeLog();
}

// A Redis restarted without persistence lost every hash: the server, the authority on what it
// holds, puts back those of its tensors, which live on and are removed as any other.
TEST_F(Lifecycle, KeepsServingAcrossARedisRestartAndPutsBackLostHashes) {
  ASSERT_EQ(Tool("mcd-create", {"before", "--dtype", "f32", "--shape", "16", "--device", "cpu"})
                .exit_code,
            0);
  redis_.Restart();  // no persistence: every hash and the heartbeat are gone
  ASSERT_TRUE(test::WaitFor([&] { return Heartbeat(); }, 10000)) << ServeLog();
  auto created =
      Tool("mcd-create", {"after", "--dtype", "f32", "--shape", "16", "--device", "cpu"});
  ASSERT_EQ(created.exit_code, 0) << created.err << ServeLog();
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return ServeLog().find("'before' lost its hash with Redis; put it back") !=
               std::string::npos;
      },
      5000))
      << ServeLog();
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "after\nbefore\n");
  EXPECT_EQ(HashField("before", "refcount"), "1");
  EXPECT_EQ(Tool("mcd-get", {"before", "--print", "2", "-q", "--detached"}).exit_code, 0);
  EXPECT_EQ(ShmCount(), 2u);
  EXPECT_EQ(Tool("mcd-rm", {"before"}).out, "before: refcount 1\n");
  EXPECT_EQ(Tool("mcd-rm", {"before"}).out, "before: freed\n");
  EXPECT_TRUE(test::WaitFor([&] { return ShmCount() == 1; }, 2000));
}

TEST_F(Lifecycle, AServerWarnsOfARedisThatEvictsKeys) {
  const std::string warning =
      "Redis's maxmemory-policy is 'allkeys-lru': at its maxmemory (1073741824 bytes)";
  EXPECT_EQ(ServeLog().find("maxmemory-policy"), std::string::npos) << ServeLog();  // noeviction
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  auto conn = redis_.Connect();
  ASSERT_TRUE(conn->Command({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}).ok());
  ASSERT_TRUE(conn->Command({"CONFIG", "SET", "maxmemory", "1073741824"}).ok());
  StartServer();
  EXPECT_NE(ServeLog().find(warning), std::string::npos) << ServeLog();
  EXPECT_NE(ServeLog().find("set maxmemory-policy noeviction"), std::string::npos) << ServeLog();
  // A warning only: the server serves.
  EXPECT_EQ(Tool("mcd-create", {"a", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
            0);
  ASSERT_TRUE(conn->Command({"CONFIG", "SET", "maxmemory", "0"}).ok());
}

TEST_F(Lifecycle, AServerStartingOnARedisOutOfMemorySaysSo) {
  auto conn = redis_.Connect();
  ASSERT_TRUE(conn->Command({"CONFIG", "SET", "maxmemory", "1"}).ok());
  auto other = test::Run(
      {test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", node_ + "-other"}, Env(), 10);
  ASSERT_TRUE(conn->Command({"CONFIG", "SET", "maxmemory", "0"}).ok());
  EXPECT_EQ(other.exit_code, 76) << other.err;
  EXPECT_NE(other.err.find("cannot write the heartbeat: Redis: OOM"), std::string::npos)
      << other.err;
  EXPECT_EQ(conn->Command({"EXISTS", keys_.Server(node_ + "-other")})->integer, 0);
}

TEST_F(Lifecycle, SecondServerForTheSameNodeIsRefused) {
  auto second =
      test::Run({test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", node_}, Env(), 10);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("already serves node"), std::string::npos) << second.err;
  EXPECT_TRUE(Heartbeat());  // the first one is untouched
}

// Two servers started at the same moment for one node: the heartbeat is claimed in one atomic
// step, so exactly one serves and the other says why it does not.
TEST_F(Lifecycle, TwoServersStartedAtOnceForOneNodeLeaveOneServing) {
  for (int round = 0; round < 8; ++round) {
    std::string node = node_ + "-race" + std::to_string(round);
    std::vector<std::string> argv = {test::ToolPath("mcd-serve"), "--devices", "cpu", "--node",
                                     node};
    std::string log_a = dir_.path() + "/race-a" + std::to_string(round) + ".log";
    std::string log_b = dir_.path() + "/race-b" + std::to_string(round) + ".log";
    test::Background a(argv, Env(), log_a);
    test::Background b(argv, Env(), log_b);
    ASSERT_TRUE(
        test::WaitFor([&] { return !test::Running(a.pid()) || !test::Running(b.pid()); }, 10000))
        << "both serve node " << node << "\n"
        << test::ReadFile(log_a) << test::ReadFile(log_b);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    bool a_serves = test::Running(a.pid());
    EXPECT_NE(a_serves, test::Running(b.pid())) << test::ReadFile(log_a) << test::ReadFile(log_b);
    test::Background& winner = a_serves ? a : b;
    test::Background& loser = a_serves ? b : a;
    auto pid = redis_.Connect()->Command({"HGET", keys_.Server(node), "pid"});
    EXPECT_EQ(pid->str, std::to_string(winner.pid()));
    EXPECT_EQ(loser.Stop(0), 1);
    std::string refused = test::ReadFile(a_serves ? log_b : log_a);
    EXPECT_NE(refused.find("already serves node '" + node + "'"), std::string::npos) << refused;
    EXPECT_EQ(winner.Stop(SIGTERM), 0);
  }
}

// A server that was not heard from for longer than its heartbeat TTL (stopped here; a paused
// machine alike) finds another one serving its node when it wakes: it stops, and leaves that
// one's heartbeat and hashes alone, a tensor of a name it had included.
TEST_F(Lifecycle, AServerThatWasGoneTooLongStepsAsideForTheOneThatTookOver) {
  for (const char* name : {"a", "b"}) {
    ASSERT_EQ(
        Tool("mcd-create", {name, "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
        0);
  }
  auto conn = redis_.Connect();
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  // Its blocking take ends in Redis after a second, so that no command goes to it; then its
  // heartbeat goes, as the TTL would have it.
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  ASSERT_EQ(conn->Command({"DEL", keys_.Server(node_)})->integer, 1);
  test::Background other({test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", node_}, Env(),
                         dir_.path() + "/other.log");
  ASSERT_TRUE(test::WaitFor(
      [&] { return Count(test::ReadFile(dir_.path() + "/other.log"), "serving node") == 1; },
      10000))
      << test::ReadFile(dir_.path() + "/other.log");
  std::string other_instance = conn->Command({"HGET", keys_.Server(node_), "instance"})->str;
  EXPECT_TRUE(HashField("a", "state").empty());  // the other one removed them as stale
  ASSERT_EQ(Tool("mcd-create", {"a", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
            0);

  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  EXPECT_EQ(server_->Stop(0), 1) << ServeLog();
  EXPECT_NE(ServeLog().find("took node '" + node_ + "' over"), std::string::npos) << ServeLog();
  EXPECT_EQ(conn->Command({"HGET", keys_.Server(node_), "instance"})->str, other_instance);
  EXPECT_EQ(HashField("a", "owner"), other_instance);
  EXPECT_EQ(HashField("a", "refcount"), "1");
  EXPECT_EQ(Tool("mcd-create", {"c", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
            0);
  EXPECT_EQ(Tool("mcd-rm", {"a"}).out, "a: freed\n");
  EXPECT_EQ(other.Stop(SIGTERM), 0);
  EXPECT_FALSE(Heartbeat());
  EXPECT_TRUE(TensorKeys().empty());
  EXPECT_EQ(ShmCount(), 0u);
}

TEST_F(Lifecycle, StackTensorsDieWithTheirOwner) {
  test::Background owner({"sleep", "60"}, {}, dir_.path() + "/sleep.log");
  ASSERT_EQ(Tool("mcd-create", {"tmp", "--dtype", "f32", "--shape", "4", "--device", "cpu",
                                "--lifetime", "stack", "--owner-pid", std::to_string(owner.pid())})
                .exit_code,
            0);
  ASSERT_EQ(
      Tool("mcd-create", {"kept", "--dtype", "f32", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  ASSERT_EQ(Tool("mcd-get", {"tmp"}).exit_code, 0);  // refcount 2 does not keep it alive
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(HashField("tmp", "state"), "ready");
  owner.Stop(SIGKILL);
  EXPECT_TRUE(test::WaitFor([&] { return HashField("tmp", "state").empty(); }, 5000)) << ServeLog();
  EXPECT_EQ(HashField("kept", "state"), "ready");
  // The reaper removes the hash first (nobody can get it any more), frees the memory, then logs
  // the outcome: wait for the log line rather than read the count between the hash and the free.
  EXPECT_TRUE(test::WaitFor(
      [&] { return ServeLog().find("reclaim name=tmp outcome=ok") != std::string::npos; }, 2000))
      << ServeLog();
  // The log says how many references the tensor still had: the creator's and mcd-get's.
  std::string log = ServeLog();
  std::string line = log.substr(log.find("reclaim name=tmp"));
  line = line.substr(0, line.find('\n'));
  EXPECT_NE(line.find("refcount=2"), std::string::npos) << line;
  EXPECT_EQ(ShmCount(), 1u);
}

// An owner that has exited but is not reaped yet (a zombie: its parent has not waited for it)
// holds nothing: its stack tensors go as they would after the reap.
TEST_F(Lifecycle, AZombieOwnersStackTensorsAreReclaimed) {
  test::Background owner({"sleep", "60"}, {}, dir_.path() + "/sleep.log");
  ASSERT_EQ(Tool("mcd-create", {"z", "--dtype", "u8", "--shape", "4", "--device", "cpu",
                                "--lifetime", "stack", "--owner-pid", std::to_string(owner.pid())})
                .exit_code,
            0);
  ASSERT_EQ(kill(owner.pid(), SIGKILL), 0);  // not waited for: it stays a zombie of this test
  ASSERT_TRUE(test::WaitFor([&] { return !test::Running(owner.pid()); }, 2000));
  EXPECT_TRUE(test::WaitFor([&] { return HashField("z", "state").empty(); }, 5000)) << ServeLog();
  EXPECT_TRUE(test::WaitFor(
      [&] { return ServeLog().find("reclaim name=z outcome=ok") != std::string::npos; }, 2000))
      << ServeLog();
  EXPECT_EQ(ShmCount(), 0u);
}

// A name that a stack tensor had is free for a heap tensor as soon as the stack tensor is gone,
// whether it was deleted or reclaimed: the reaper judges the tensor that has the name now.
TEST_F(Lifecycle, AHeapTensorTakingAStackTensorsNameIsNotReclaimed) {
  auto create = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {name, "--dtype", "u8", "--shape", "4", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Tool("mcd-create", args).exit_code;
  };
  test::Background owner({"sleep", "60"}, {}, dir_.path() + "/sleep.log");
  ASSERT_EQ(create("deleted", {"--lifetime", "stack", "--owner-pid", std::to_string(owner.pid())}),
            0);
  ASSERT_EQ(Tool("mcd-rm", {"deleted"}).out, "deleted: freed\n");
  ASSERT_EQ(create("deleted", {}), 0);

  test::Background brief({"sleep", "60"}, {}, dir_.path() + "/sleep2.log");
  ASSERT_EQ(
      create("reclaimed", {"--lifetime", "stack", "--owner-pid", std::to_string(brief.pid())}), 0);
  brief.Stop(SIGKILL);
  ASSERT_TRUE(test::WaitFor([&] { return HashField("reclaimed", "state").empty(); }, 5000))
      << ServeLog();
  ASSERT_EQ(create("reclaimed", {}), 0);

  // Two passes of the reaper (one a second).
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(HashField("deleted", "lifetime"), "heap") << ServeLog();
  EXPECT_EQ(HashField("reclaimed", "lifetime"), "heap") << ServeLog();
  std::string log = ServeLog();
  EXPECT_EQ(log.find("reclaim name=deleted"), std::string::npos) << log;
  size_t first = log.find("reclaim name=reclaimed");
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("reclaim name=reclaimed", first + 1), std::string::npos) << log;
  EXPECT_EQ(ShmCount(), 2u);
}

}  // namespace
}  // namespace mcd

namespace mcd {
namespace {

// mcd-serve --spawn-redis, each test with a runtime folder of its own (where the private Redis's
// socket goes) and no Redis URL in the environment.
class SpawnRedis : public ::testing::Test {
 protected:
  test::TempDir runtime;
  std::map<std::string, std::string> env = {
      {"XDG_RUNTIME_DIR", runtime.path()}, {"MCD_REDIS_URL", ""}, {"REDIS_URL", ""}};
  std::string socket = runtime.path() + "/memcuda/redis.sock";
};

TEST_F(SpawnRedis, ToolsFindThePrivateRedisWithNoFlagAndItStopsWithTheServer) {
  std::string node = "spawn" + std::to_string(getpid());
  test::Background server(
      {test::ToolPath("mcd-serve"), "--spawn-redis", "--devices", "cpu", "--node", node}, env,
      runtime.path() + "/serve.log");
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return test::ReadFile(runtime.path() + "/serve.log").find("serving node") !=
               std::string::npos;
      },
      10000))
      << test::ReadFile(runtime.path() + "/serve.log");
  auto created = test::Run({test::ToolPath("mcd-create"), "s", "--dtype", "u8", "--shape", "3",
                            "--device", "cpu", "--node", node},
                           env);
  EXPECT_EQ(created.exit_code, 0) << created.err;
  auto listed = test::Run({test::ToolPath("mcd-ls"), "-q"}, env);
  EXPECT_EQ(listed.out, "s\n");
  // A Redis found rather than named, where this host's node has no server: said on stderr.
  EXPECT_NE(listed.err.find("note: no mcd-serve is running for node"), std::string::npos)
      << listed.err;
  EXPECT_NE(listed.err.find("live there: " + node), std::string::npos) << listed.err;
  auto named = env;
  named["MCD_NODE"] = node;
  EXPECT_EQ(test::Run({test::ToolPath("mcd-ls"), "-q"}, named).err, "");
  EXPECT_EQ(server.Stop(SIGTERM), 0);
  EXPECT_TRUE(test::WaitFor([&] { return access(socket.c_str(), F_OK) != 0; }, 5000))
      << "the private redis-server outlived mcd-serve";
}

// A second --spawn-redis server (of another node) uses the private Redis of a live one, and
// leaves it to that one when it stops.
TEST_F(SpawnRedis, TheRedisOfALiveServerIsLeftToIt) {
  std::string node = "left" + std::to_string(getpid());
  auto serve = [&](const std::string& which) {
    return std::make_unique<test::Background>(
        std::vector<std::string>{test::ToolPath("mcd-serve"), "--spawn-redis", "--devices", "cpu",
                                 "--node", node + which},
        env, runtime.path() + "/" + which + ".log");
  };
  auto serving = [&](const std::string& which) {
    return test::WaitFor(
        [&] {
          return Count(test::ReadFile(runtime.path() + "/" + which + ".log"), "serving node") == 1;
        },
        10000);
  };
  auto first = serve("a");
  ASSERT_TRUE(serving("a")) << test::ReadFile(runtime.path() + "/a.log");
  auto second = serve("b");
  ASSERT_TRUE(serving("b")) << test::ReadFile(runtime.path() + "/b.log");
  EXPECT_EQ(second->Stop(SIGTERM), 0);
  EXPECT_EQ(access(socket.c_str(), F_OK), 0) << "the second server stopped the first one's Redis";
  auto created = test::Run({test::ToolPath("mcd-create"), "t", "--dtype", "u8", "--shape", "3",
                            "--device", "cpu", "--node", node + "a"},
                           env);
  EXPECT_EQ(created.exit_code, 0) << created.err;
  EXPECT_EQ(first->Stop(SIGTERM), 0);
  EXPECT_TRUE(test::WaitFor([&] { return access(socket.c_str(), F_OK) != 0; }, 5000));
}

// A killed mcd-serve leaves its private Redis running, for the next server to clean up after
// it: that server uses it and stops it when it stops itself.
TEST_F(SpawnRedis, TheRedisOfAKilledServerIsAdoptedByTheNextAndStopsWithIt) {
  std::string node = "adopt" + std::to_string(getpid());
  std::vector<std::string> argv = {
      test::ToolPath("mcd-serve"), "--spawn-redis", "--devices", "cpu", "--node", node};
  std::string log = runtime.path() + "/serve.log";
  auto serving = [&](size_t times) {
    return test::WaitFor([&] { return Count(test::ReadFile(log), "serving node") >= times; },
                         10000);
  };
  test::Background first(argv, env, log);
  ASSERT_TRUE(serving(1)) << test::ReadFile(log);
  ASSERT_EQ(test::Run({test::ToolPath("mcd-create"), "s", "--dtype", "u8", "--shape", "3",
                       "--device", "cpu", "--node", node},
                      env)
                .exit_code,
            0);
  auto redis = RedisConnection::Connect(RedisUrl::Parse("unix://" + socket).value());
  ASSERT_TRUE(redis.ok());
  pid_t redis_pid = static_cast<pid_t>(
      std::atoll(InfoField(redis.value()->Command({"INFO", "server"})->str, "process_id").c_str()));
  ASSERT_GT(redis_pid, 0);
  EXPECT_EQ(first.Stop(SIGKILL), -SIGKILL);
  EXPECT_TRUE(test::Running(redis_pid));

  test::Background second(argv, env, log);
  ASSERT_TRUE(serving(2)) << test::ReadFile(log);
  EXPECT_NE(test::ReadFile(log).find("removed stale tensor 's'"), std::string::npos)
      << test::ReadFile(log);
  EXPECT_EQ(second.Stop(SIGTERM), 0);
  EXPECT_TRUE(test::WaitFor([&] { return !test::Running(redis_pid); }, 5000))
      << "the adopted Redis still runs";
  EXPECT_NE(access(socket.c_str(), F_OK), 0);
  if (test::Running(redis_pid)) kill(redis_pid, SIGKILL);
}

}  // namespace
}  // namespace mcd

namespace mcd {
namespace {

// The private Redis is supervised: killed, it is reaped (no zombie) and started again, and the
// server puts back the hashes of the tensors it holds; one that keeps dying stops the server
// with a non-zero exit and the reason.
TEST_F(SpawnRedis, ADeadPrivateRedisIsRestartedAndOneThatKeepsDyingStopsTheServer) {
  std::string node = "sup" + std::to_string(getpid());
  std::string log = runtime.path() + "/serve.log";
  test::Background server(
      {test::ToolPath("mcd-serve"), "--spawn-redis", "--devices", "cpu", "--node", node}, env, log);
  ASSERT_TRUE(test::WaitFor(
      [&] { return test::ReadFile(log).find("serving node") != std::string::npos; }, 10000))
      << test::ReadFile(log);
  ASSERT_EQ(test::Run({test::ToolPath("mcd-create"), "kept", "--dtype", "u8", "--shape", "3",
                       "--device", "cpu", "--node", node},
                      env)
                .exit_code,
            0);
  auto redis_pid = [&]() -> pid_t {
    auto children = test::ChildrenOf(server.pid());
    return children.size() == 1 ? children[0] : -1;
  };
  pid_t first = redis_pid();
  ASSERT_GT(first, 0);
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return test::ReadFile(log).find("the private Redis died; restarted it") !=
               std::string::npos;
      },
      5000))
      << test::ReadFile(log);
  EXPECT_NE(redis_pid(), first);
  // Back with the tensor: the server put its hash back.
  EXPECT_TRUE(test::WaitFor(
      [&] {
        return test::Run({test::ToolPath("mcd-ls"), "-q"}, env).out == "kept\n";
      },
      10000))
      << test::ReadFile(log);
  EXPECT_EQ(test::Run({test::ToolPath("mcd-rm"), "kept", "--node", node}, env).out,
            "kept: freed\n");

  for (size_t i = 0; i < PrivateRedis::kMaxRestartsPerMinute; ++i) {
    // Each time once it was started again.
    ASSERT_TRUE(
        test::WaitFor([&] { return Count(test::ReadFile(log), "restarted it") == i + 1; }, 5000))
        << test::ReadFile(log);
    pid_t now = redis_pid();
    ASSERT_GT(now, 0);
    kill(now, SIGKILL);
  }
  EXPECT_EQ(server.Stop(0, 20), 69) << test::ReadFile(log);
  EXPECT_NE(test::ReadFile(log).find("death within a minute: not restarting it"), std::string::npos)
      << test::ReadFile(log);
}

}  // namespace
}  // namespace mcd

namespace mcd {
namespace {

// A runtime folder that another user made, or that others may enter, is never used: neither by
// mcd-serve for its sockets and Redis, nor by a tool looking for the private Redis's socket.
TEST_F(SpawnRedis, ARuntimeFolderOfAnotherUserOrOpenToOthersIsRefused) {
  std::string dir = runtime.path() + "/memcuda";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  auto server = test::Run(
      {test::ToolPath("mcd-serve"), "--spawn-redis", "--devices", "cpu", "--node", "refused"}, env,
      20);
  EXPECT_EQ(server.exit_code, 69) << server.err;
  EXPECT_NE(server.err.find("is open to other users (mode 0777, not 0700)"), std::string::npos)
      << server.err;
  EXPECT_NE(server.err.find("(permission_denied)"), std::string::npos) << server.err;
  EXPECT_NE(access(socket.c_str(), F_OK), 0) << "a Redis was started in the open folder";

  // A socket planted there: the tools refuse it rather than talk to whoever listens on it.
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  auto ls = test::Run({test::ToolPath("mcd-ls")}, env);
  close(fd);
  EXPECT_EQ(ls.exit_code, 69) << ls.err;
  EXPECT_NE(ls.err.find("another user could see and steer what is in it"), std::string::npos)
      << ls.err;

  if (geteuid() == 0) {  // only root can give the folder away to test the owner check
    ASSERT_EQ(chmod(dir.c_str(), 0700), 0);
    ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
    auto given_away = test::Run(
        {test::ToolPath("mcd-serve"), "--spawn-redis", "--devices", "cpu", "--node", "refused"},
        env, 20);
    EXPECT_EQ(given_away.exit_code, 69) << given_away.err;
    EXPECT_NE(given_away.err.find("belongs to uid 65534, not to this user"), std::string::npos)
        << given_away.err;
    ASSERT_EQ(chown(dir.c_str(), 0, 0), 0);
  }
}

}  // namespace
}  // namespace mcd

namespace mcd {
namespace {

// Data that could not all be written to standard output is a failure (74, with the reason),
// not a success with a short file: `mcd-ls --json > state.json && ...` must not go on.
TEST_F(Lifecycle, AToolWhoseOutputCannotBeWrittenFails) {
  ASSERT_EQ(Tool("mcd-create", {"out", "--dtype", "u8", "--shape", "64", "--device", "cpu", "-q"})
                .exit_code,
            0);
  std::vector<std::vector<std::string>> commands = {{"mcd-ls"},
                                                    {"mcd-ls", "--json"},
                                                    {"mcd-get", "out", "--no-ref", "--print", "64"},
                                                    {"mcd-ls", "--servers"}};
  for (auto args : commands) {
    std::string tool = args.front();
    args.erase(args.begin());
    args.insert(args.begin(), test::ToolPath(tool));
    args.push_back("--node");
    args.push_back(node_);
    std::string line = "exec";
    for (const std::string& arg : args) line += " " + arg;
    auto full = test::Run({"/bin/sh", "-c", line + " > /dev/full"}, Env());
    EXPECT_EQ(full.exit_code, 74) << line << ": " << full.err;
    EXPECT_NE(full.err.find("No space left on device"), std::string::npos) << full.err;
    auto fine = test::Run({"/bin/sh", "-c", line + " > /dev/null"}, Env());
    EXPECT_EQ(fine.exit_code, 0) << line << ": " << fine.err;
  }
  EXPECT_EQ(Tool("mcd-rm", {"out", "-q"}).exit_code, 0);
}

// A read without a reference races the tensor's removal, after which its memory is another's:
// the library checks, once the bytes are copied, that the same tensor is still there, and says
// "not found" when it is not, for the C++ API and the C ABI alike. A write cannot be checked
// after the fact, so the C ABI's copy into a tensor holds a reference while it writes.
TEST_F(Lifecycle, AReadWithoutAReferenceOfATensorRemovedMeanwhileIsNotFound) {
  const std::string data = test::RandomBytes(4096, 77);
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  CreateSpec spec = HostSpec("r");
  spec.shape = {static_cast<int64_t>(data.size())};
  spec.contents = data.data();
  spec.contents_bytes = data.size();
  ASSERT_TRUE(client->Create(spec).ok());
  auto view = client->Open("r");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_FALSE(view->referenced);
  std::string read(data.size(), '\0');
  ASSERT_TRUE(client->CopyToHost(*view, read.data(), read.size()).ok());
  EXPECT_TRUE(read == data);

  mcd_client* c = nullptr;
  ASSERT_EQ(mcd_connect(redis_.url().c_str(), node_.c_str(), 5000, &c), MCD_OK);
  std::string other = test::RandomBytes(data.size(), 78);
  auto events = [&] { return redis_.Connect()->Command({"XLEN", keys_.Events()})->integer; };
  long long before = events();
  ASSERT_EQ(mcd_copy_from_host(c, "r", other.data(), other.size()), MCD_OK) << mcd_last_error(c);
  EXPECT_EQ(events() - before, 2) << "the write's own get and release";
  EXPECT_EQ(HashField("r", "refcount"), "1");
  ASSERT_EQ(mcd_copy_to_host(c, "r", read.data(), read.size()), MCD_OK) << mcd_last_error(c);
  EXPECT_TRUE(read == other);

  ASSERT_EQ(Tool("mcd-rm", {"r"}).exit_code, 0);
  auto copied = client->CopyToHost(*view, read.data(), read.size());
  EXPECT_EQ(copied.code(), ErrorCode::kNotFound) << copied.ToString();
  EXPECT_NE(copied.message().find("removed while it was read"), std::string::npos)
      << copied.ToString();
  EXPECT_TRUE(client->Close("r").ok());
  EXPECT_EQ(mcd_copy_to_host(c, "r", read.data(), read.size()), MCD_ERR_NOT_FOUND);
  mcd_disconnect(c);
}

// A read without a reference answers as a get does for a tensor of another node: wrong node,
// not "its server is not running".
TEST_F(Lifecycle, AReadWithoutAReferenceOfAnotherNodesTensorIsWrongNodeAsAGetIs) {
  ASSERT_EQ(
      Tool("mcd-create", {"here", "--dtype", "u8", "--shape", "4", "--device", "cpu"}).exit_code,
      0);
  auto conn = redis_.Connect();
  auto fields = conn->Command({"HGETALL", keys_.Tensor("here")});
  std::vector<std::string> planted = {"HSET", keys_.Tensor("there")};
  for (const auto& e : fields->elements) planted.push_back(e.str);
  planted.insert(planted.end(), {"node", "elsewhere"});
  ASSERT_TRUE(conn->Command(std::vector<std::string_view>(planted.begin(), planted.end())).ok());
  auto got = Tool("mcd-get", {"there", "-q"});
  auto read = Tool("mcd-get", {"there", "--no-ref", "-q"});
  EXPECT_EQ(read.exit_code, got.exit_code) << got.err << read.err;
  EXPECT_NE(read.err.find("lives on node 'elsewhere'"), std::string::npos) << read.err;
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->Open("there").status().code(), ErrorCode::kWrongNode);
  ASSERT_TRUE(conn->Command({"DEL", keys_.Tensor("there")}).ok());
  EXPECT_EQ(HashField("here", "refcount"), "1");
}

}  // namespace
}  // namespace mcd

namespace mcd {
namespace {

using Clock = std::chrono::steady_clock;

// With no Redis named and no private Redis running, every tool, the C ABI and a ClientOptions{}
// say at once how to name one (69), rather than guess one on a default port and send it the
// password.
TEST_F(SpawnRedis, WithNoRedisNamedNorFoundEveryToolSaysHowToNameOneAtOnce) {
  std::map<std::string, std::string> with_password = env;
  with_password["MCD_REDIS_PASSWORD"] = "not-for-strangers";
  const std::vector<std::vector<std::string>> commands = {
      {"mcd-ls"},
      {"mcd-ls", "--servers", "-q"},
      {"mcd-ls", "--watch"},
      {"mcd-create", "x", "--dtype", "u8", "--shape", "4", "--device", "cpu"},
      {"mcd-get", "x", "--wait", "10"},
      {"mcd-rm", "x"},
      {"mcd-serve", "--devices", "cpu"}};
  for (std::vector<std::string> argv : commands) {
    std::string tool = argv[0];
    argv[0] = test::ToolPath(tool);
    auto t0 = Clock::now();
    auto ran = test::Run(argv, with_password, 30);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3)) << tool;
    EXPECT_EQ(ran.exit_code, 69) << tool << ": " << ran.err << ran.out;
    std::string said = ran.err + ran.out;
    EXPECT_NE(said.find("no Redis named"), std::string::npos) << tool << ": " << said;
    EXPECT_NE(said.find("MCD_REDIS_URL"), std::string::npos) << tool << ": " << said;
    EXPECT_NE(said.find("--spawn-redis"), std::string::npos) << tool << ": " << said;
  }
  // The C ABI resolves the URL from this process's environment.
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  mcd_client* c = nullptr;
  EXPECT_EQ(mcd_connect(nullptr, nullptr, 5000, &c), MCD_ERR_UNAVAILABLE);
  EXPECT_NE(std::string(mcd_last_error(nullptr)).find("no Redis named"), std::string::npos)
      << mcd_last_error(nullptr);
  unsetenv("XDG_RUNTIME_DIR");
  auto bare = Client::Connect(ClientOptions{});
  EXPECT_EQ(bare.status().code(), ErrorCode::kUnavailable) << bare.status().ToString();
  EXPECT_NE(bare.status().message().find("no Redis named"), std::string::npos)
      << bare.status().ToString();
}

// The readiness loop of a script that starts `mcd-serve --spawn-redis` beside it: each try
// before the server is up fails at once, and the loop ends against the private Redis, with the
// node served there.
TEST_F(SpawnRedis, AReadinessLoopBesideASpawnedRedisEndsFastAgainstIt) {
  std::string node = "ready" + std::to_string(getpid());
  test::Background server(
      {test::ToolPath("mcd-serve"), "--spawn-redis", "--devices", "cpu", "--node", node}, env,
      runtime.path() + "/serve.log");
  auto began = Clock::now();
  test::ProcessResult ran;
  int tries = 0;
  while (Clock::now() - began < std::chrono::seconds(30)) {
    auto t0 = Clock::now();
    ran = test::Run({test::ToolPath("mcd-ls"), "--servers", "-q"}, env, 30);
    ++tries;
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2)) << "try " << tries << ": " << ran.err;
    if (ran.exit_code == 0) break;
    EXPECT_EQ(ran.exit_code, 69) << ran.err;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(ran.exit_code, 0) << ran.err << test::ReadFile(runtime.path() + "/serve.log");
  EXPECT_EQ(ran.out, node + "\n");
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

// A Redis that is not there (no socket file, a port that refuses) is unavailable at once, with
// its address, not "try again" after --timeout-ms; one whose sentinels name no master yet (a
// failover under way) is still "try again".
TEST(RedisAbsent, NoSocketFileOrARefusedPortIsUnavailableAtOnceNamingTheAddress) {
  test::TempDir dir;
  // A port bound but not listening refuses connections for as long as this test holds it.
  int held = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::string refused = "redis://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  std::string missing = "unix://" + dir.path() + "/no-such.sock";
  for (const std::string& url : {refused, missing}) {
    for (const char* tool : {"mcd-ls", "mcd-create", "mcd-get", "mcd-rm", "mcd-serve"}) {
      std::vector<std::string> argv = {test::ToolPath(tool), "--redis-url", url};
      if (std::string(tool) != "mcd-serve" && std::string(tool) != "mcd-ls")
        argv.insert(argv.end(), {"--timeout-ms", "8000"});
      if (std::string(tool) == "mcd-create")
        argv.insert(argv.end(), {"x", "--dtype", "u8", "--shape", "4"});
      if (std::string(tool) == "mcd-get" || std::string(tool) == "mcd-rm") argv.push_back("x");
      auto t0 = Clock::now();
      auto ran = test::Run(argv, {{"XDG_RUNTIME_DIR", dir.path()}}, 30);
      EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3)) << tool << " " << url;
      EXPECT_EQ(ran.exit_code, 69) << tool << " " << url << ": " << ran.err;
      EXPECT_NE(ran.err.find("cannot connect to Redis at " + url), std::string::npos) << ran.err;
    }
  }
  close(held);

  // One sentinel that knows no master: it answers, so a failover may be under way.
  int port = test::FreePort();
  std::string conf = dir.path() + "/sentinel.conf";
  std::ofstream(conf) << "port " << port << "\nbind 127.0.0.1\ndir " << dir.path() << "\n";
  test::Background sentinel({"redis-server", conf, "--sentinel"}, {}, dir.path() + "/sentinel.log");
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return RedisConnection::Connect(
                   RedisUrl::Parse("redis://127.0.0.1:" + std::to_string(port)).value())
            .ok();
      },
      10000))
      << test::ReadFile(dir.path() + "/sentinel.log");
  auto ran = test::Run({test::ToolPath("mcd-rm"), "x", "--timeout-ms", "500", "--redis-url",
                        "redis-sentinel://127.0.0.1:" + std::to_string(port) + "/nomaster"},
                       {{"XDG_RUNTIME_DIR", dir.path()}}, 30);
  EXPECT_EQ(ran.exit_code, 75) << ran.err;
  EXPECT_NE(ran.err.find("names a master yet"), std::string::npos) << ran.err;
}

}  // namespace
}  // namespace mcd
