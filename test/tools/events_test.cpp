// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Shell pipelines: mcd-get --wait, mcd-rm --wait-free and mcd-ls --watch, with real processes
// against a real Redis and mcd-serve. The events come from the scripts that make each change
// (memcuda(7), EVENTS), so a watcher sees exactly the changes made, in order.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <sstream>

#include "lifecycle_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

class Events : public Lifecycle {
 protected:
  std::string Log(const std::string& log) { return test::ReadFile(dir_.path() + "/" + log); }

  // The newest event's id now: a watcher started with --since it sees what happens from here,
  // however long it takes to start.
  std::string NewestId() {
    auto last = redis_.Connect()->Command({"XREVRANGE", keys_.Events(), "+", "-", "COUNT", "1"});
    EXPECT_TRUE(last.ok());
    return last.ok() && !last->elements.empty() ? last->elements[0].elements[0].str : "0-0";
  }
  // A watcher of every event after now, as JSON lines, exiting after `count` (0: until stopped).
  std::unique_ptr<test::Background> Watch(int count, const std::string& log,
                                          const std::string& glob = "*") {
    std::vector<std::string> args = {"--watch", glob, "--json", "--since", NewestId()};
    if (count > 0) args.insert(args.end(), {"--count", std::to_string(count)});
    return Start("mcd-ls", args, log);
  }
  // "event name refcount [reason]" of each JSON line of a watcher's log.
  std::vector<std::string> Summary(const std::string& log) {
    std::vector<std::string> out;
    std::istringstream lines(Log(log));
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] != '{') continue;
      json e = json::parse(line);
      std::string s = e["event"].get<std::string>() + " " + e["name"].get<std::string>() + " " +
                      std::to_string(e["refcount"].get<int64_t>());
      if (!e["reason"].get<std::string>().empty()) s += " " + e["reason"].get<std::string>();
      out.push_back(s);
    }
    return out;
  }
  std::vector<json> JsonLines(const std::string& log) {
    std::vector<json> out;
    std::istringstream lines(Log(log));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line[0] == '{') out.push_back(json::parse(line));
    }
    return out;
  }
  void Create(const std::string& name, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {name, "--dtype",  "u8",  "--shape",
                                     "16", "--device", "cpu", "-q"};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_EQ(Tool("mcd-create", args).exit_code, 0);
  }
  // hold_client: a process holding one reference to each of `names` until killed.
  std::unique_ptr<test::Background> Hold(const std::vector<std::string>& names,
                                         const std::string& log) {
    std::vector<std::string> argv = {test::ToolPath("hold_client"), redis_.url(), node_};
    argv.insert(argv.end(), names.begin(), names.end());
    auto holder = std::make_unique<test::Background>(argv, Env(), dir_.path() + "/" + log);
    EXPECT_TRUE(test::WaitFor([&] { return Log(log).find("held") != std::string::npos; }, 10000))
        << Log(log);
    return holder;
  }
  long long XLen() { return redis_.Connect()->Command({"XLEN", keys_.Events()})->integer; }
  test::StreamInfo Counts() { return test::StreamInfoOf(*redis_.Connect(), keys_.Events()); }
  // 600 events (a create, a get and a release of 200 names), then a create of "end" once the
  // server has applied them.
  void Flood() {
    PushCreateGetDelete("h", 200);
    json last = Raw(
        R"({"op":"create","name":"end","dtype":"u8","shape":[1],"device":"cpu","req":"end-req"})",
        "end-req");
    ASSERT_EQ(last["ok"], true) << last.dump() << ServeLog();
  }
  long long DbSize() { return redis_.Connect()->Command({"DBSIZE"})->integer; }
  void RestartServer(const std::vector<std::string>& extra) {
    ASSERT_EQ(server_->Stop(SIGTERM), 0) << ServeLog();
    StartServer(extra);
  }
};

TEST_F(Events, AConsumerStartedBeforeItsProducerGetsTheTensorWhenItIsMade) {
  auto consumer = Start("mcd-get", {"batch.7", "--wait", "20", "--json"}, "consumer.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(test::Running(consumer->pid())) << Log("consumer.log");
  auto t0 = Clock::now();
  Create("batch.7");
  EXPECT_EQ(consumer->Wait(20), 0) << Log("consumer.log");
  EXPECT_LT(MsSince(t0), 2000) << "woken by the create's event, not by a late poll";
  json record = json::parse(Log("consumer.log"));
  EXPECT_EQ(record["name"], "batch.7");
  EXPECT_EQ(record["refcount"], 2);
  EXPECT_EQ(HashField("batch.7", "refcount"), "2");  // the reference is the caller's (this test)
}

// The create lands at any moment of the consumer's start: before its first look, between the
// look and the block, or during the block. None may be missed (a miss would run to the timeout).
TEST_F(Events, ATensorMadeWhileTheWaitBeginsIsNeverMissed) {
  for (int i = 0; i < 12; ++i) {
    std::string name = "race." + std::to_string(i);
    auto consumer = Start("mcd-get", {name, "--wait", "8", "-q"}, name + ".log");
    std::this_thread::sleep_for(std::chrono::milliseconds(i * 3));
    auto t0 = Clock::now();
    Create(name);
    EXPECT_EQ(consumer->Wait(20), 0) << name << ": " << Log(name + ".log");
    EXPECT_LT(MsSince(t0), 3000) << name;
  }
}

TEST_F(Events, EightConsumersWaitingOnOneNameAllTakeAReference) {
  std::vector<std::unique_ptr<test::Background>> consumers;
  for (int i = 0; i < 8; ++i) {
    consumers.push_back(
        Start("mcd-get", {"shared", "--wait", "0", "-q"}, "c" + std::to_string(i) + ".log"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  for (auto& c : consumers) ASSERT_TRUE(test::Running(c->pid()));
  auto t0 = Clock::now();
  Create("shared");
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(consumers[i]->Wait(20), 0) << Log("c" + std::to_string(i) + ".log");
  EXPECT_LT(MsSince(t0), 3000);
  EXPECT_EQ(HashField("shared", "refcount"), "9");
}

TEST_F(Events, AWaitThatTimesOutExits75AndChangesNothing) {
  Create("other");
  long long events = XLen(), keys = DbSize();
  auto t0 = Clock::now();
  auto got = Tool("mcd-get", {"ghost", "--wait", "1.5"});
  int64_t took = MsSince(t0);
  EXPECT_EQ(got.exit_code, 75) << got.err;
  EXPECT_NE(got.err.find("'ghost' was not ready within 1.5 s"), std::string::npos) << got.err;
  EXPECT_GE(took, 1500);
  EXPECT_LT(took, 4000);
  EXPECT_EQ(XLen(), events);
  EXPECT_EQ(DbSize(), keys);
  EXPECT_EQ(HashField("other", "refcount"), "1");
  // --no-ref waits the same way, and a bad value is a usage error.
  EXPECT_EQ(Tool("mcd-get", {"ghost", "--wait", "0.2", "--no-ref"}).exit_code, 75);
  EXPECT_EQ(Tool("mcd-get", {"ghost", "--wait", "-1"}).exit_code, 64);
}

TEST_F(Events, AWatcherSeesExactlyTheEventsOfAScriptedLifecycleInOrder) {
  auto watcher = Watch(11, "watch.log");
  Create("a");
  auto holder = Hold({"a"}, "hold.log");
  pid_t held_by = holder->pid();
  holder->Stop(SIGKILL);  // the server gives its reference back
  ASSERT_TRUE(test::WaitFor([&] { return HashField("a", "refcount") == "1"; }, 5000)) << ServeLog();
  ASSERT_EQ(Tool("mcd-get", {"a", "-q"}).exit_code, 0);
  ASSERT_EQ(Tool("mcd-rm", {"a", "-q"}).exit_code, 0);
  ASSERT_EQ(Tool("mcd-rm", {"a", "-q"}).exit_code, 0);
  // What fails changes nothing, and says nothing.
  EXPECT_EQ(Tool("mcd-get", {"a"}).exit_code, 1);
  EXPECT_EQ(Tool("mcd-rm", {"a"}).exit_code, 1);
  Create("b");
  EXPECT_EQ(
      Tool("mcd-create", {"b", "--dtype", "u8", "--shape", "16", "--device", "cpu"}).exit_code, 1);
  ASSERT_EQ(Tool("mcd-rm", {"b", "-q"}).exit_code, 0);
  // A stack tensor goes with its owner.
  test::Background owner({"/bin/sleep", "60"}, {}, dir_.path() + "/owner.log");
  Create("s", {"--lifetime", "stack", "--owner-pid", std::to_string(owner.pid())});
  pid_t owner_pid = owner.pid();
  owner.Stop(SIGKILL);
  ASSERT_TRUE(test::WaitFor([&] { return HashField("s", "refcount").empty(); }, 5000))
      << ServeLog();
  Create("z");  // had anything else come in between, the sequence below would be off by it
  ASSERT_EQ(watcher->Wait(20), 0) << Log("watch.log");
  EXPECT_EQ(
      Summary("watch.log"),
      (std::vector<std::string>{"create a 1", "get a 2", "reclaim a 1 holder_exited", "get a 2",
                                "release a 1", "delete a 0", "create b 1", "delete b 0",
                                "create s 1", "reclaim s 0 owner_exited", "create z 1"}));
  auto lines = JsonLines("watch.log");
  ASSERT_EQ(lines.size(), 11u);
  EXPECT_EQ(lines[1]["pid"], held_by);
  EXPECT_EQ(lines[2]["pid"], held_by);
  EXPECT_EQ(lines[3]["pid"], getpid()) << "mcd-get's reference is its caller's";
  EXPECT_EQ(lines[9]["pid"], owner_pid);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["node"], node_);
    if (i > 0)
      EXPECT_LE(lines[i - 1]["time_ms"].get<int64_t>(), lines[i]["time_ms"].get<int64_t>());
  }
}

TEST_F(Events, AWatcherCarriesOnAcrossAServerRestartAndAKill) {
  auto watcher = Watch(7, "watch.log");
  Create("c");
  RestartServer({});
  Create("d");
  kill(server_->pid(), SIGKILL);
  server_->Wait(10);
  StartServer();
  ASSERT_EQ(watcher->Wait(30), 0) << Log("watch.log") << ServeLog();
  EXPECT_EQ(Summary("watch.log"),
            (std::vector<std::string>{"create c 1", "reclaim c 0 server_stopped", "server_stop  0",
                                      "server_start  0", "create d 1", "server_start  0 took_over",
                                      "reclaim d 0 server_lost"}))
      << Log("watch.log");
}

// A tensor still being filled was never announced: when its server stops, or a new server removes
// what a killed one left, it goes without an event, while a ready tensor beside it gets its
// reclaim.
TEST_F(Events, ATensorBeingFilledGoesWithoutAnEventWhenItsServerStopsOrIsLost) {
  test::Background filler({"/bin/sleep", "600"}, {}, dir_.path() + "/filler.log");
  auto create_filled = [&](const std::string& name) {
    json created = Raw(R"({"op":"create","name":")" + name +
                           R"(","dtype":"u8","shape":[64],"device":"cpu","fill":true,"pid":)" +
                           std::to_string(filler.pid()) + R"(,"req":"fill-)" + name + R"("})",
                       "fill-" + name);
    ASSERT_EQ(created["ok"], true) << created.dump() << ServeLog();
    ASSERT_EQ(HashField(name, "state"), "creating");
  };
  auto watcher = Watch(0, "watch.log");
  create_filled("stopped");
  Create("ready1");
  RestartServer({});
  EXPECT_TRUE(HashField("stopped", "state").empty()) << "its hash goes with its server";
  create_filled("lost");
  Create("ready2");
  kill(server_->pid(), SIGKILL);
  server_->Wait(10);
  StartServer();
  EXPECT_TRUE(HashField("lost", "state").empty())
      << "the new server removes what the dead one left";
  Create("end");
  ASSERT_TRUE(
      test::WaitFor([&] { return Log("watch.log").find("\"end\"") != std::string::npos; }, 20000))
      << Log("watch.log");
  watcher->Stop(SIGTERM);
  EXPECT_EQ(Summary("watch.log"),
            (std::vector<std::string>{"create ready1 1", "reclaim ready1 0 server_stopped",
                                      "server_stop  0", "server_start  0", "create ready2 1",
                                      "server_start  0 took_over", "reclaim ready2 0 server_lost",
                                      "create end 1"}))
      << Log("watch.log");
}

TEST_F(Events, RmWaitFreeReturnsOnceTheOtherHoldersLetGo) {
  Create("e");
  auto holder = Hold({"e"}, "hold.log");
  auto rm = Start("mcd-rm", {"e", "--wait-free", "20"}, "rm.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(test::Running(rm->pid())) << Log("rm.log");
  EXPECT_EQ(HashField("e", "refcount"), "1") << "its own reference is given back first";
  auto t0 = Clock::now();
  holder->Stop(SIGKILL);
  EXPECT_EQ(rm->Wait(20), 0) << Log("rm.log");
  EXPECT_LT(MsSince(t0), 4000);
  EXPECT_EQ(Log("rm.log"), "e: freed\n");
  EXPECT_TRUE(TensorKeys().empty());
  EXPECT_TRUE(ShmFreedSoon());

  // Still held when the time runs out: 75, and only its own reference went.
  Create("f");
  auto other = Hold({"f"}, "hold2.log");
  auto timed_out = Tool("mcd-rm", {"f", "--wait-free", "1", "--json"});
  EXPECT_EQ(timed_out.exit_code, 75) << timed_out.err;
  EXPECT_NE(timed_out.err.find("'f' still had 1 reference(s) after 1 s"), std::string::npos)
      << timed_out.err;
  EXPECT_NE(timed_out.err.find("gave back the reference of 'f'"), std::string::npos)
      << timed_out.err;
  EXPECT_EQ(HashField("f", "refcount"), "1");
}

TEST_F(Events, TheHistoryIsCappedAndALateWatcherReadsWhatIsKept) {
  RestartServer({"--event-history", "100"});
  PushCreateGetDelete("h", 200);  // 600 events
  ExpectBacklogAppliedOnce("h", 200, "end-req");
  long long kept = XLen();
  // MAXLEN ~ trims whole stream nodes (100 entries each by default), never below the cap.
  EXPECT_GE(kept, 100);
  EXPECT_LE(kept, 200);
  auto bytes = redis_.Connect()->Command({"MEMORY", "USAGE", keys_.Events(), "SAMPLES", "0"});
  ASSERT_TRUE(bytes.ok());
  EXPECT_LT(bytes->integer / kept, 100) << "the documented cost per kept event";
  // A late watcher asking for everything gets the kept history, oldest first, and goes on from
  // an event's id without repeating it.
  auto all =
      Tool("mcd-ls", {"--watch", "--json", "--since", "all", "--count", std::to_string(kept)});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(static_cast<long long>(Count(all.out, "\n")), kept);
  json last = json::parse(all.out.substr(all.out.rfind('{')));
  EXPECT_EQ(last["event"], "create");
  EXPECT_EQ(last["name"], "end");
  std::vector<std::string> lines;
  std::istringstream split(all.out);
  for (std::string line; std::getline(split, line);) lines.push_back(line);
  auto resumed =
      Tool("mcd-ls", {"--watch", "--json", "--since", json::parse(lines[0])["id"], "--count", "1"});
  EXPECT_EQ(resumed.out, lines[1] + "\n");
  // A table line on request too, with its header.
  auto table = Tool("mcd-ls", {"--watch", "--since", "all", "--count", "1"});
  EXPECT_EQ(table.out.rfind("TIME ", 0), 0u) << table.out;
  EXPECT_NE(table.out.find(node_), std::string::npos) << table.out;
  EXPECT_EQ(Tool("mcd-ls", {"--watch", "--since", "yesterday"}).exit_code, 64);
}

// --since takes a duration ago: 0 (or 0s) is now, and the watch shows only what comes after.
TEST_F(Events, SinceZeroStartsNow) {
  Create("before");
  for (const std::string zero : {"0", "0s"}) {
    SCOPED_TRACE(zero);
    std::string log = "zero" + zero + ".log";
    auto watcher = Start("mcd-ls", {"--watch", "--json", "--since", zero, "--count", "1"}, log);
    ASSERT_TRUE(test::WaitFor([&] { return BlockedReaders(1); }, 10000)) << Log(log);
    Create("after" + zero);
    ASSERT_EQ(watcher->Wait(30), 0) << Log(log);
    auto lines = JsonLines(log);
    ASSERT_EQ(lines.size(), 1u) << Log(log);
    EXPECT_EQ(lines[0]["name"], "after" + zero) << Log(log);
  }
}

// Two watchers stopped while the capped stream moves on past them: each says, once it runs
// again, how many events it lost (a table line and a JSON event), and goes on with the oldest
// kept. A watch that resumes from an id whose events were trimmed says that some were.
TEST_F(Events, AWatcherLeftBehindByTheCapSaysHowManyEventsItMissed) {
  RestartServer({"--event-history", "100"});
  std::string from = NewestId();
  auto json_watch = Start("mcd-ls", {"--watch", "--json", "--since", from}, "json.log");
  auto table_watch = Start("mcd-ls", {"--watch", "--since", from}, "table.log");
  Create("first");
  ASSERT_TRUE(test::WaitFor(
      [&] { return Count(Log("json.log"), "first") == 1 && Count(Log("table.log"), "first") == 1; },
      10000))
      << Log("json.log") << Log("table.log");
  test::StreamInfo at_first = Counts();
  std::string first_id = JsonLines("json.log").back()["id"];
  ASSERT_EQ(at_first.last_id, first_id) << "no other event came";
  ASSERT_TRUE(test::WaitFor([&] { return BlockedReaders(2); }, 10000));
  kill(json_watch->pid(), SIGSTOP);
  kill(table_watch->pid(), SIGSTOP);
  Flood();
  test::StreamInfo end = Counts();
  long long missed = end.added - end.length - at_first.added;
  ASSERT_GT(missed, 0) << "the cap trimmed events the watchers had not read";
  kill(json_watch->pid(), SIGCONT);
  kill(table_watch->pid(), SIGCONT);
  auto ended = [&](const std::string& log) {
    return Log(log).find("end ") != std::string::npos ||
           Log(log).find("\"end\"") != std::string::npos;
  };
  ASSERT_TRUE(test::WaitFor([&] { return ended("json.log") && ended("table.log"); }, 20000))
      << Log("json.log") << Log("table.log");
  json_watch->Stop(SIGTERM);
  table_watch->Stop(SIGTERM);

  auto lines = JsonLines("json.log");
  ASSERT_EQ(lines.size(), 2 + static_cast<size_t>(end.length))
      << "every kept event once, after the gap";
  EXPECT_EQ(lines[0]["name"], "first");
  EXPECT_EQ(lines[1]["event"], "gap");
  EXPECT_EQ(lines[1]["id"], first_id) << "where the watch was";
  EXPECT_EQ(lines[1]["missed"], missed);
  EXPECT_EQ(lines[1]["reason"], "trimmed");
  EXPECT_EQ(lines[2]["id"], end.first_id);
  EXPECT_EQ(lines[1]["time_ms"], lines[2]["time_ms"]);
  EXPECT_EQ(lines.back()["name"], "end");
  std::string table = Log("table.log");
  EXPECT_EQ(Count(table, " gap "), 1u) << table;
  EXPECT_NE(table.find(std::to_string(missed) + " event(s) trimmed before this watch read them"),
            std::string::npos)
      << table;
  EXPECT_LT(table.find(" gap "), table.find(" end ")) << table;

  // Resumed from an id that was trimmed: how many came after it is no longer known.
  auto resumed = Tool("mcd-ls", {"--watch", "--json", "--since", first_id, "--count", "1"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  std::istringstream split(resumed.out);
  std::string gap, next;
  std::getline(split, gap);
  std::getline(split, next);
  EXPECT_EQ(json::parse(gap)["event"], "gap") << resumed.out;
  EXPECT_TRUE(json::parse(gap)["missed"].is_null()) << resumed.out;
  EXPECT_EQ(json::parse(next)["id"], end.first_id) << resumed.out;
  // From the oldest kept (all), nothing is missed.
  auto all = Tool("mcd-ls", {"--watch", "--json", "--since", "all", "--count", "1"});
  EXPECT_EQ(json::parse(all.out)["id"], end.first_id) << all.out;
}

// A wait whose event was trimmed before it read it looks again at once, though events keep
// coming (its quiet-stream check never runs): it does not wait out its time.
TEST_F(Events, AWaitWhoseEventWasTrimmedLooksAgainAtOnce) {
  RestartServer({"--event-history", "100"});
  auto consumer = Start("mcd-get", {"late", "--wait", "60", "-q"}, "consumer.log");
  ASSERT_TRUE(test::WaitFor([&] { return BlockedReaders(1); }, 10000)) << Log("consumer.log");
  kill(consumer->pid(), SIGSTOP);
  Create("other");  // answers the consumer's blocked read, with an event not its own
  Create("late");
  Flood();
  auto kept = redis_.Connect()->Command({"XRANGE", keys_.Events(), "-", "+"});
  ASSERT_TRUE(kept.ok());
  for (const RedisValue& entry : kept->elements) {
    for (const RedisValue& value : entry.elements[1].elements)
      ASSERT_NE(value.str, "late") << "not trimmed";
  }
  // Events keep coming while it runs again.
  std::atomic<bool> done{false};
  std::thread noise([&] {
    auto conn = redis_.Connect();
    for (int i = 0; !done && i < 200; ++i) {
      std::string name = "noise" + std::to_string(i);
      (void)conn->Command({"LPUSH", keys_.queue,
                           R"({"op":"create","name":")" + name +
                               R"(","dtype":"u8","shape":[1],"device":"cpu","pid":1})"});
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  auto t0 = Clock::now();
  kill(consumer->pid(), SIGCONT);
  int code = consumer->Wait(40);
  int64_t took = MsSince(t0);
  done = true;
  noise.join();
  EXPECT_EQ(code, 0) << Log("consumer.log");
  EXPECT_LT(took, 10000) << "woken by the gap, not by the end of its time (or 20 s of events)";
  EXPECT_EQ(HashField("late", "refcount"), "2");
}

TEST_F(Events, WithoutEventsTheWaitsSayWhyAtOnce) {
  RestartServer({"--event-history", "0"});
  long long before = XLen();
  Create("n");
  EXPECT_EQ(XLen(), before);
  auto got = Tool("mcd-get", {"n", "--wait", "5"});
  EXPECT_EQ(got.exit_code, 69) << got.err;
  EXPECT_NE(got.err.find("keeps no lifecycle events"), std::string::npos) << got.err;
  EXPECT_EQ(HashField("n", "refcount"), "1");
  // A wait that cannot run gives nothing back first.
  ASSERT_EQ(Tool("mcd-get", {"n", "--detached", "-q"}).exit_code, 0);
  auto rm = Tool("mcd-rm", {"n", "--wait-free", "5"});
  EXPECT_EQ(rm.exit_code, 69) << rm.err;
  EXPECT_NE(rm.err.find("keeps no lifecycle events"), std::string::npos) << rm.err;
  EXPECT_EQ(HashField("n", "refcount"), "2");
}

// Four pipelines at once, each a create, a get and two releases of names of its own, with
// failures in between: the stream holds exactly the changes, each name's in order. The watcher
// reads up to an event made after the pipelines, not a number of events: a machine that stalls
// for longer than the heartbeat's TTL (a loaded VM) finds the server's heartbeat expired when it
// resumes, and the server's next write claims the node again (server_start, reclaimed), a
// server event the glob does not filter out.
TEST_F(Events, UnderConcurrentPipelinesEveryChangeIsOneEventInOrder) {
  constexpr int kLoops = 4, kRounds = 12;
  auto watcher = Watch(0, "watch.log", "p*");
  std::vector<std::unique_ptr<test::Background>> loops;
  for (int l = 0; l < kLoops; ++l) {
    std::string bin = test::ToolPath("");
    std::string flags = " --node " + node_ + " -q";
    std::string script =
        "for i in $(seq " + std::to_string(kRounds) + "); do n=p" + std::to_string(l) + ".$i; " +
        bin + "mcd-create $n --dtype u8 --shape 8 --device cpu" + flags + " && " + bin +
        "mcd-get $n" + flags + " && " + bin + "mcd-get missing.$n" + flags + "; " + bin +
        "mcd-rm $n" + flags + " && " + bin + "mcd-rm $n" + flags + " || exit 1; done";
    loops.push_back(
        std::make_unique<test::Background>(std::vector<std::string>{"/bin/sh", "-c", script}, Env(),
                                           dir_.path() + "/loop" + std::to_string(l) + ".log"));
  }
  for (int l = 0; l < kLoops; ++l)
    EXPECT_EQ(loops[l]->Wait(120), 0) << Log("loop" + std::to_string(l) + ".log");
  Create("pz.end");
  ASSERT_TRUE(test::WaitFor(
      [&] { return Log("watch.log").find("\"pz.end\"") != std::string::npos; }, 30000))
      << Log("watch.log");
  watcher->Stop(SIGTERM);
  std::map<std::string, std::vector<std::string>> by_name;
  for (const json& e : JsonLines("watch.log")) {
    if (e["name"] == "pz.end") continue;
    std::string what =
        e["event"].get<std::string>() + " " + std::to_string(e["refcount"].get<int>());
    if (e["name"] == "") {
      // The server, which runs throughout, may only have claimed its node again.
      EXPECT_EQ(e["event"].get<std::string>() + " " + e["reason"].get<std::string>(),
                "server_start reclaimed");
      continue;
    }
    by_name[e["name"]].push_back(what);
  }
  EXPECT_EQ(by_name.size(), static_cast<size_t>(kLoops * kRounds));
  for (const auto& [name, events] : by_name) {
    EXPECT_EQ(events, (std::vector<std::string>{"create 1", "get 2", "release 1", "delete 0"}))
        << name;
  }
}

// A server whose heartbeat expired while it went on running (its machine stalled for longer than
// the TTL) writes it again: one server_start, reason "reclaimed", naming its own pid, no stop,
// and its tensors are served as before.
TEST_F(Events, AServerWhoseHeartbeatLapsedReclaimsItsNode) {
  Create("kept");
  std::string since = NewestId();
  long long before = XLen();
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  ASSERT_TRUE(test::WaitFor([&] { return !Heartbeat(); }, 20000));  // --heartbeat-ttl 3
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  ASSERT_TRUE(test::WaitFor([&] { return Heartbeat(); }, 10000)) << ServeLog();
  auto watcher =
      Start("mcd-ls", {"--watch", "--json", "--since", since, "--count", "1"}, "lapse.log");
  ASSERT_EQ(watcher->Wait(30), 0) << Log("lapse.log");
  std::vector<json> events = JsonLines("lapse.log");
  ASSERT_EQ(events.size(), 1u) << Log("lapse.log");
  EXPECT_EQ(events[0]["event"], "server_start");
  EXPECT_EQ(events[0]["reason"], "reclaimed");
  EXPECT_EQ(events[0]["pid"], server_->pid());
  EXPECT_EQ(XLen(), before + 1) << "no stop, nothing else";
  EXPECT_EQ(Tool("mcd-get", {"kept", "--no-ref", "-q"}).exit_code, 0);
}

// A hand-written event whose numbers are not numbers shows them as -1, not as a count of 0.
TEST_F(Events, AnEventNumberThatIsNoNumberShowsAsMinusOne) {
  ASSERT_TRUE(redis_.Connect()
                  ->Command({"XADD", keys_.Events(), "*", "event", "create", "name", "odd", "node",
                             node_, "refcount", "abc", "pid", "99999999999999999999", "reason", ""})
                  .ok());
  auto watch = Tool("mcd-ls", {"--watch", "odd", "--json", "--since", "all", "--count", "2"});
  ASSERT_EQ(watch.exit_code, 0) << watch.err;
  json e = json::parse(watch.out.substr(watch.out.find('\n') + 1));
  EXPECT_EQ(e["name"], "odd") << watch.out;
  EXPECT_EQ(e["refcount"], -1) << watch.out;
  EXPECT_EQ(e["pid"], -1) << watch.out;
}

}  // namespace
}  // namespace mcd
