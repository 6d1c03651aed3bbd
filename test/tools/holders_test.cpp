// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// References bound to the processes that hold them: a holder that dies has its references given
// back by the server of its node within about a second, freeing a tensor that reaches 0.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <sstream>
#include <thread>

#include "lifecycle_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

class Holders : public Lifecycle {
 protected:
  // A process of hold_client holding one reference to each of `names`, running once it said so.
  std::unique_ptr<test::Background> Hold(const std::vector<std::string>& names,
                                         const std::string& log) {
    std::vector<std::string> argv = {test::ToolPath("hold_client"), redis_.url(), node_};
    argv.insert(argv.end(), names.begin(), names.end());
    std::string path = dir_.path() + "/" + log;
    auto holder = std::make_unique<test::Background>(argv, Env(), path);
    EXPECT_TRUE(test::WaitFor(
        [&] { return test::ReadFile(path).find("held") != std::string::npos; }, 10000))
        << test::ReadFile(path);
    return holder;
  }
  void Create(const std::string& name) {
    ASSERT_EQ(Tool("mcd-create", {name, "--dtype", "u8", "--shape", "16", "--device", "cpu", "-q"})
                  .exit_code,
              0);
  }
  std::string Holder(pid_t pid) {
    return "holder:" + std::to_string(pid) + ":" + std::to_string(StartOf(pid));
  }
  static uint64_t StartOf(pid_t pid) {
    // /proc/PID/stat field 22, after the command name's closing parenthesis.
    std::string stat = test::ReadFile("/proc/" + std::to_string(pid) + "/stat");
    size_t at = stat.rfind(')');
    std::istringstream rest(stat.substr(at + 2));
    std::string field;
    for (int i = 3; i <= 22 && rest >> field; ++i) {
    }
    return std::stoull(field);
  }
  long long SetSize(const std::string& key) {
    return redis_.Connect()->Command({"SCARD", key})->integer;
  }
};

TEST_F(Holders, ADeadProgramsReferencesAreGivenBackWithinASecondOrTwo) {
  Create("a");
  Create("b");
  auto holder = Hold({"a", "b", "b"}, "hold.log");
  pid_t pid = holder->pid();
  std::string field = Holder(pid), id = field.substr(7);
  EXPECT_EQ(HashField("a", "refcount"), "2");
  EXPECT_EQ(HashField("b", "refcount"), "3");
  EXPECT_EQ(HashField("b", field), "2");
  EXPECT_EQ(SetSize(keys_.Held(node_, id)), 2);
  EXPECT_EQ(SetSize(keys_.Holders(node_)), 1);
  auto ls = Tool("mcd-ls", {"-l"});
  EXPECT_NE(ls.out.find(std::to_string(pid) + ":2"), std::string::npos) << ls.out;

  holder->Stop(SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(test::WaitFor(
      [&] { return HashField("b", "refcount") == "1" && HashField("a", "refcount") == "1"; }, 3000))
      << ServeLog();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2500));
  EXPECT_EQ(HashField("b", field), "");
  EXPECT_EQ(SetSize(keys_.Holders(node_)), 0);
  EXPECT_EQ(SetSize(keys_.Held(node_, id)), 0);
  EXPECT_NE(ServeLog().find("release_dead name=b outcome=ok"), std::string::npos) << ServeLog();
  // The creators' references are bound to nobody: the tensors live on until removed.
  EXPECT_EQ(ShmCount(), 2u);
  EXPECT_EQ(Tool("mcd-rm", {"a", "b"}).out, "a: freed\nb: freed\n");
}

// A process that gave back what it took leaves its field at 0 while it lives (its next take is
// cheaper); once it is gone, the field goes too.
TEST_F(Holders, AGoneHolderLeavesNoTraceInTheHash) {
  Create("z");
  std::string script = test::ToolPath("mcd-get") + " z -q --node " + node_ + " && " +
                       test::ToolPath("mcd-rm") + " z -q --node " + node_ +
                       " && echo done && exec sleep 60";
  test::Background shell({"/bin/sh", "-c", script}, Env(), dir_.path() + "/shell.log");
  ASSERT_TRUE(
      test::WaitFor([&] { return test::ReadFile(dir_.path() + "/shell.log") == "done\n"; }, 10000));
  std::string field = Holder(shell.pid());
  EXPECT_EQ(HashField("z", field), "0");
  EXPECT_EQ(HashField("z", "refcount"), "1");
  EXPECT_EQ(Tool("mcd-ls", {"-l"}).out.find(std::to_string(shell.pid()) + ":"), std::string::npos);
  shell.Stop(SIGKILL);
  ASSERT_TRUE(test::WaitFor([&] { return HashField("z", field).empty(); }, 3000)) << ServeLog();
  EXPECT_EQ(HashField("z", "refcount"), "1");
  EXPECT_EQ(HashField("z", "bound"), "0");
  EXPECT_EQ(SetSize(keys_.Holders(node_)), 0);
}

TEST_F(Holders, AHeapTensorWhoseHoldersAllDiedIsFreed) {
  Create("t");
  auto first = Hold({"t"}, "first.log");
  auto second = Hold({"t"}, "second.log");
  // The creator's reference goes; two processes hold the rest.
  EXPECT_EQ(Tool("mcd-rm", {"t", "--detached"}).out, "t: refcount 2\n");
  first->Stop(SIGKILL);
  ASSERT_TRUE(test::WaitFor([&] { return HashField("t", "refcount") == "1"; }, 3000)) << ServeLog();
  EXPECT_EQ(ShmCount(), 1u);
  second->Stop(SIGKILL);
  ASSERT_TRUE(test::WaitFor([&] { return TensorKeys().empty(); }, 3000)) << ServeLog();
  EXPECT_TRUE(ShmFreedSoon());
  EXPECT_NE(ServeLog().find("release_dead name=t outcome=ok"), std::string::npos) << ServeLog();
  EXPECT_NE(ServeLog().find("refcount=0 freed=16"), std::string::npos) << ServeLog();
}

// mcd-get binds its reference to the shell that ran it; mcd-rm from that shell gives it back.
TEST_F(Holders, AShellsReferencesGoWithTheShellAndDetachedOnesStay) {
  Create("s");
  std::string get = test::ToolPath("mcd-get") + " s -q --node " + node_;
  std::string script = get + " && " + get + " --detached && echo held && exec sleep 60";
  test::Background shell({"/bin/sh", "-c", script}, Env(), dir_.path() + "/shell.log");
  ASSERT_TRUE(
      test::WaitFor([&] { return test::ReadFile(dir_.path() + "/shell.log") == "held\n"; }, 10000));
  EXPECT_EQ(HashField("s", "refcount"), "3");
  EXPECT_EQ(HashField("s", Holder(shell.pid())), "1");
  shell.Stop(SIGKILL);
  ASSERT_TRUE(test::WaitFor([&] { return HashField("s", "refcount") == "2"; }, 3000)) << ServeLog();
  // Left: the creator's and the detached one, bound to nobody.
  EXPECT_EQ(Tool("mcd-rm", {"s"}).out, "s: refcount 1\n");
  EXPECT_EQ(Tool("mcd-rm", {"s"}).out, "s: freed\n");
}

// Without --node or MCD_NODE, where the host name has no server, a tool uses the only live one;
// its references are filed under that server's node, whose server gives them back.
TEST_F(Holders, AReferenceTakenFromTheOnlyLiveServerFoundIsGivenBack) {
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  ASSERT_NE(node_, host);
  Create("d");
  std::string script = test::ToolPath("mcd-get") + " d -q && echo held && exec sleep 60";
  auto env = Env();
  env["MCD_NODE"] = "";  // as if unset: the tool looks for the only live server
  test::Background shell({"/bin/sh", "-c", script}, env, dir_.path() + "/shell.log");
  ASSERT_TRUE(
      test::WaitFor([&] { return test::ReadFile(dir_.path() + "/shell.log") == "held\n"; }, 10000))
      << test::ReadFile(dir_.path() + "/shell.log");
  std::string field = Holder(shell.pid());
  EXPECT_EQ(HashField("d", field), "1");
  EXPECT_EQ(SetSize(keys_.Holders(node_)), 1);
  EXPECT_EQ(SetSize(keys_.Held(node_, field.substr(7))), 1);
  shell.Stop(SIGKILL);
  ASSERT_TRUE(test::WaitFor(
      [&] { return HashField("d", "refcount") == "1" && HashField("d", field).empty(); }, 3000))
      << "refcount " << HashField("d", "refcount") << ", " << field << "=" << HashField("d", field)
      << "\n"
      << ServeLog();
  EXPECT_EQ(SetSize(keys_.Holders(node_)), 0);
  EXPECT_EQ(SetSize(keys_.Holders(host)), 0);
}

// A tool whose caller has exited would bind to init, which never exits: it refuses, naming the
// flags that say whose the reference is instead, and takes nothing. A read takes no reference
// and goes on.
TEST_F(Holders, AToolWhoseCallerHasExitedBindsNothingToInit) {
  Create("o");
  // The subshell waits for the shell ($$) to exit, then `exec` makes the tool itself its orphan.
  const std::string after_exit = "(while kill -0 $$ 2>/dev/null; do sleep 0.05; done; exec ";
  auto orphan = [&](const std::string& tool_args, const std::string& out) {
    std::string line = after_exit + tool_args + " --node " + node_ + " >" + out + ".out 2>" + out +
                       ".err) & exit 0";
    ASSERT_EQ(test::Run({"/bin/sh", "-c", line}, Env()).exit_code, 0);
  };
  std::string probe = dir_.path() + "/probe";
  ASSERT_EQ(test::Run({"/bin/sh", "-c", after_exit + "sh -c 'echo $PPID' >" + probe + ") & exit 0"})
                .exit_code,
            0);
  ASSERT_TRUE(test::WaitFor([&] { return !test::ReadFile(probe).empty(); }, 10000));
  if (test::ReadFile(probe) != "1\n") {
    GTEST_SKIP() << "orphans here are adopted by pid " << test::ReadFile(probe)
                 << ", a subreaper, not init";
  }
  std::string d = dir_.path();
  orphan(test::ToolPath("mcd-get") + " o", d + "/get");
  orphan(test::ToolPath("mcd-rm") + " o", d + "/rm");
  orphan(test::ToolPath("mcd-create") + " s --dtype u8 --shape 4 --device cpu --lifetime stack",
         d + "/create");
  orphan(test::ToolPath("mcd-get") + " o --no-ref --json", d + "/read");
  for (const char* tool : {"get", "rm", "create"}) {
    std::string err = d + "/" + tool + ".err";
    ASSERT_TRUE(test::WaitFor(
        [&] { return test::ReadFile(err).find("(invalid_argument)") != std::string::npos; }, 10000))
        << tool << ": " << test::ReadFile(err);
    EXPECT_NE(test::ReadFile(err).find("parent is pid 1"), std::string::npos)
        << test::ReadFile(err);
    EXPECT_NE(test::ReadFile(err).find("--owner-pid"), std::string::npos) << test::ReadFile(err);
    EXPECT_TRUE(std::string(tool) == "create" ||
                test::ReadFile(err).find("--detached") != std::string::npos)
        << test::ReadFile(err);
  }
  ASSERT_TRUE(test::WaitFor(
      [&] { return test::ReadFile(d + "/read.out").find("\"name\":\"o\"") != std::string::npos; },
      10000))
      << test::ReadFile(d + "/read.err");
  EXPECT_EQ(HashField("o", "refcount"), "1");
  EXPECT_EQ(HashField("o", "bound"), "");
  EXPECT_EQ(SetSize(keys_.Holders(node_)), 0);
  EXPECT_TRUE(TensorKeys().size() == 1) << "the stack tensor was made";
}

// A tool run from outside its PID namespace (docker exec, kubectl exec: here unshare, whose
// child's parent is pid 0) has no caller the server could watch: it says so, naming the flags
// that say whose the reference is instead, and takes nothing.
TEST_F(Holders, AToolRunFromOutsideItsPidNamespaceSaysSoAndBindsNothing) {
  if (test::Run({"/usr/bin/unshare", "--pid", "--fork", "/bin/true"}).exit_code != 0) {
    GTEST_SKIP() << "cannot make a PID namespace here (unshare --pid needs CAP_SYS_ADMIN)";
  }
  Create("o");
  auto outside = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/unshare", "--pid", "--fork"});
    args.insert(args.end(), {"--node", node_});
    return test::Run(args, Env());
  };
  const std::vector<std::vector<std::string>> tools = {
      {test::ToolPath("mcd-get"), "o"},
      {test::ToolPath("mcd-rm"), "o"},
      {test::ToolPath("mcd-create"), "s", "--dtype", "u8", "--shape", "4", "--device", "cpu",
       "--lifetime", "stack"}};
  for (const auto& tool : tools) {
    auto refused = outside(tool);
    EXPECT_EQ(refused.exit_code, 64) << tool[0] << ": " << refused.err;
    EXPECT_NE(refused.err.find("run from outside its PID namespace (docker exec"),
              std::string::npos)
        << refused.err;
    EXPECT_EQ(refused.err.find("has exited"), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("--owner-pid"), std::string::npos) << refused.err;
    EXPECT_TRUE(tool[1] == "s" || refused.err.find("--detached") != std::string::npos)
        << refused.err;
  }
  auto read = outside({test::ToolPath("mcd-get"), "o", "--no-ref", "-q"});
  EXPECT_EQ(read.exit_code, 0) << "a read binds nothing: " << read.err;
  EXPECT_EQ(HashField("o", "refcount"), "1");
  EXPECT_EQ(SetSize(keys_.Holders(node_)), 0);
  EXPECT_EQ(TensorKeys().size(), 1u) << "no stack tensor was made";
}

// Naming init is refused alike, by the tools (exit 64), the library and the server.
TEST_F(Holders, NothingIsBoundToInitWhenNamed) {
  Create("i");
  auto get = Tool("mcd-get", {"i", "--owner-pid", "1"});
  EXPECT_EQ(get.exit_code, 64) << get.err;
  EXPECT_NE(get.err.find("--detached"), std::string::npos) << get.err;
  EXPECT_EQ(Tool("mcd-rm", {"i", "--owner-pid", "1"}).exit_code, 64);
  auto create = Tool("mcd-create", {"s", "--dtype", "u8", "--shape", "4", "--device", "cpu",
                                    "--lifetime", "stack", "--owner-pid", "1"});
  EXPECT_EQ(create.exit_code, 64) << create.err;
  EXPECT_NE(create.err.find("init"), std::string::npos) << create.err;

  ClientOptions opt;
  opt.redis_url = redis_.parsed_url();
  opt.node = node_;
  opt.holder_pid = 1;
  auto client = Client::Connect(opt);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto got = client.value()->Get("i");
  EXPECT_EQ(got.status().code(), ErrorCode::kInvalidArgument) << got.status().ToString();
  CreateSpec stack = HostSpec("s");
  stack.lifetime = Lifetime::kStack;
  stack.owner_pid = 1;
  EXPECT_EQ(client.value()->Create(stack).status().code(), ErrorCode::kInvalidArgument);

  json raw_get = Raw(R"({"op":"get","name":"i","req":"g1","owner_pid":1})", "g1");
  EXPECT_EQ(raw_get["error"]["code"], "invalid_argument") << raw_get.dump();
  json raw_create = Raw(
      R"({"op":"create","name":"s","dtype":"u8","shape":[4],"device":"cpu","lifetime":"stack","pid":1,"req":"c1"})",
      "c1");
  EXPECT_EQ(raw_create["error"]["code"], "invalid_argument") << raw_create.dump();
  EXPECT_EQ(HashField("i", "refcount"), "1");
  EXPECT_EQ(SetSize(keys_.Holders(node_)), 0);
  EXPECT_EQ(TensorKeys().size(), 1u) << "a stack tensor bound to init was made";
}

// A release gives back the caller's own reference, else one bound to nobody; never another
// process's, which that process still maps and will give back itself.
TEST_F(Holders, AReleaseNeverTakesAnotherProcesssReference) {
  Create("r");
  auto holder = Hold({"r"}, "hold.log");
  EXPECT_EQ(Tool("mcd-rm", {"r"}).out, "r: refcount 1\n");  // the creator's
  for (const char* via_queue : {"0", "1"}) {
    auto rm = test::Run({test::ToolPath("mcd-rm"), "r", "--node", node_},
                        {{"MCD_REDIS_URL", redis_.url()}, {"MCD_VIA_QUEUE", via_queue}});
    EXPECT_EQ(rm.exit_code, 1) << via_queue;
    EXPECT_NE(rm.err.find("held by another process"), std::string::npos) << rm.err;
    EXPECT_NE(rm.err.find("(not_held)"), std::string::npos) << rm.err;
  }
  auto detached = Tool("mcd-rm", {"r", "--detached"});  // none bound to no process is left
  EXPECT_EQ(detached.exit_code, 1);
  EXPECT_NE(detached.err.find("bound to no process (a creator's, or one taken --detached) is "
                              "left"),
            std::string::npos)
      << detached.err;
  // The same through the server (the last reference goes there): a raw delete for a holder.
  json refused =
      Raw(R"({"op":"delete","name":"r","req":"d1","owner_pid":)" + std::to_string(getpid()) + "}",
          "d1");
  EXPECT_EQ(refused["error"]["code"], "not_held") << refused.dump();
  EXPECT_EQ(HashField("r", "refcount"), "1");
  // As the holder's, it goes.
  json given = Raw(
      R"({"op":"delete","name":"r","req":"d2","owner_pid":)" + std::to_string(holder->pid()) + "}",
      "d2");
  EXPECT_EQ(given["ok"], true) << given.dump();
  EXPECT_EQ(given["freed"], true) << given.dump();
  EXPECT_TRUE(ShmFreedSoon());
}

// A client gives back only the reference it took: when another client of the same process (so
// of the same holder) gave that one back already, the creator's, bound to nobody, stays, and so
// does the tensor, whether the release goes through the reference script or, as a delete command
// that says so, to the server.
TEST_F(Holders, AReleaseOfAReferenceTakenHereNeverGivesBackTheCreators) {
  Create("g");  // its creator's reference is bound to nobody
  auto taker = ConnectClient();
  auto other = ConnectClient();
  ASSERT_TRUE(taker && other);
  auto got = taker->Get("g");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(HashField("g", Holder(getpid())), "1");
  auto given = other->ReleaseReference("g");  // it took none: the process's own goes
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->refcount, 1);
  auto refused = taker->ReleaseReference("g");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kNotHeld);
  EXPECT_NE(refused.status().message().find("that this client took was given back already"),
            std::string::npos)
      << refused.status().message();
  EXPECT_EQ(HashField("g", "refcount"), "1");
  EXPECT_EQ(ShmCount(), 1u);
  json raw = Raw(R"({"op":"delete","name":"g","req":"d1","own_only":true,"owner_pid":)" +
                     std::to_string(getpid()) + "}",
                 "d1");
  EXPECT_EQ(raw["error"]["code"], "not_held") << raw.dump();
  EXPECT_EQ(HashField("g", "refcount"), "1");
  EXPECT_EQ(ShmCount(), 1u);
  taker.reset();  // its mapping
  EXPECT_EQ(Tool("mcd-rm", {"g"}).exit_code, 0);
  EXPECT_TRUE(ShmFreedSoon());
}

// Raw commands: a get with owner_pid is bound to that process; one without is bound to nobody,
// as the minimal form has it; a get for a process that is not running is refused.
TEST_F(Holders, RawCommandsAreBoundOnlyWhenTheyNameAnOwner) {
  Create("q");
  test::Background sleeper({"sleep", "60"}, {}, dir_.path() + "/sleep.log");
  std::string owner = std::to_string(sleeper.pid());
  EXPECT_EQ(Raw(R"({"op":"get","name":"q","req":"g1","owner_pid":)" + owner + "}", "g1")["ok"],
            true);
  EXPECT_EQ(Raw(R"({"op":"get","name":"q","req":"g2"})", "g2")["ok"], true);
  EXPECT_EQ(HashField("q", "refcount"), "3");
  json dead = Raw(R"({"op":"get","name":"q","req":"g3","owner_pid":999999999})", "g3");
  EXPECT_EQ(dead["error"]["code"], "invalid_argument") << dead.dump();
  sleeper.Stop(SIGKILL);
  ASSERT_TRUE(test::WaitFor([&] { return HashField("q", "refcount") == "2"; }, 3000)) << ServeLog();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(HashField("q", "refcount"), "2");  // the anonymous one stays
}

// Gets bound to a holder that has just died race the server giving its references back: each
// reference such a get takes is still given back (at a later round when the get came after the
// server had read what the holder held), and none stays bound to a holder the server forgot.
TEST_F(Holders, GetsRacingTheGiveBackOfADeadHoldersReferencesAreAllGivenBack) {
  constexpr int kTensors = 8;
  for (int i = 0; i < kTensors; ++i) Create("g" + std::to_string(i));
  test::Background doomed({"sleep", "600"}, {}, dir_.path() + "/doomed.log");
  pid_t pid = doomed.pid();
  std::string field = Holder(pid), id = field.substr(7);
  // Clients whose references are bound to `doomed`, taking them after it died: as a get whose
  // holder is killed while the get is on its way, many times over.
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < 3; ++c) {
    clients.push_back(ConnectClient(5000, pid));
    ASSERT_NE(clients.back(), nullptr);
  }
  doomed.Stop(SIGKILL);
  // Long enough for several of the server's rounds (one a second) to meet gets in flight.
  std::atomic<long> taken{0};
  std::vector<std::thread> threads;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (auto& client : clients) {
    threads.emplace_back([&, c = client.get()] {
      for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
        std::string name = "g" + std::to_string(i % kTensors);
        auto view = c->Get(name);
        if (!view.ok()) continue;
        taken++;
        (void)c->Close(name);  // the mapping only: the reference stays the dead holder's
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_GT(taken.load(), 100);
  // Every reference goes back: each tensor is left with its creator's alone, no field names the
  // dead holder, and the server has forgotten the holder.
  auto given_back = [&] {
    for (int i = 0; i < kTensors; ++i) {
      std::string name = "g" + std::to_string(i);
      if (HashField(name, "refcount") != "1" || !HashField(name, field).empty()) return false;
    }
    return SetSize(keys_.Holders(node_)) == 0 && SetSize(keys_.Held(node_, id)) == 0;
  };
  bool done = test::WaitFor(given_back, 8000);
  std::string left;
  for (int i = 0; i < kTensors; ++i) {
    std::string name = "g" + std::to_string(i);
    left += name + " refcount=" + HashField(name, "refcount") + " " + field + "=" +
            HashField(name, field) + " bound=" + HashField(name, "bound") + "; ";
  }
  EXPECT_TRUE(done) << taken.load() << " gets; left: " << left
                    << " holders: " << SetSize(keys_.Holders(node_))
                    << " held: " << SetSize(keys_.Held(node_, id));
}

}  // namespace
}  // namespace mcd

namespace mcd {
namespace {

// The server gives back a dead holder's reference, Redis dies before answering, and comes back
// empty: nothing says whether the give-back went through, so the tensor, which another reference
// still holds, is put back rather than freed (a removal is trusted only when its event is there).
TEST_F(Holders, AGiveBackCutOffByARedisThatLostItsDataLosesNoTensor) {
  Create("kept");
  auto holder = Hold({"kept"}, "hold.log");
  ASSERT_EQ(HashField("kept", "refcount"), "2");
  // Writes wait: the reaper's give-back is sent and never answered.
  ASSERT_TRUE(redis_.Connect()->Command({"CLIENT", "PAUSE", "60000", "WRITE"}).ok());
  holder->Stop(SIGKILL);
  // The give-back is in Redis, held by the pause: the only EVALSHA (the server's commits; its
  // heartbeat sends EVAL).
  auto give_back_paused = [&] { return test::BlockedClients(*redis_.Connect(), "evalsha") > 0; };
  ASSERT_TRUE(test::WaitFor(give_back_paused, 20000)) << ServeLog();
  redis_.Restart();  // empty: no persistence
  EXPECT_TRUE(test::WaitFor([&] { return HashField("kept", "state") == "ready"; }, 20000))
      << "the tensor was freed on a guess\n"
      << ServeLog();
  EXPECT_NE(ServeLog().find("release_dead of 'kept': "), std::string::npos)
      << "the give-back was not cut off by the restart\n"
      << ServeLog();
  EXPECT_EQ(HashField("kept", "refcount"), "1");
  EXPECT_EQ(ShmCount(), 1u);
  auto removed = Tool("mcd-rm", {"kept"});
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_TRUE(ShmFreedSoon());
}

}  // namespace
}  // namespace mcd

namespace mcd {
namespace {

// A holder that gave back everything it took and then exits changed nothing more: the reaper
// forgets it without a reclaim event (memcuda(7): a reclaim says references were taken back).
TEST_F(Holders, AHolderThatGaveEverythingBackLeavesNoReclaimWhenItExits) {
  Create("r");
  std::string get = test::ToolPath("mcd-get"), rm = test::ToolPath("mcd-rm");
  for (int i = 0; i < 5; ++i) {
    auto ran = test::Run(
        {"/bin/sh", "-c",
         get + " r -q --node " + node_ + " && " + rm + " r -q --node " + node_ + " && sleep 0.3"},
        Env());
    ASSERT_EQ(ran.exit_code, 0) << ran.err;
  }
  // Each shell is dead once Run returns; the reaper looks once a second.
  EXPECT_TRUE(test::WaitFor([&] { return SetSize(keys_.Holders(node_)) == 0; }, 10000));
  auto events = redis_.Connect()->Command({"XRANGE", keys_.Events(), "-", "+"});
  int reclaims = 0, gets = 0;
  for (const RedisValue& entry : events->elements) {
    std::map<std::string, std::string> f = FieldMap(entry.elements[1]);
    if (f["name"] != "r") continue;
    reclaims += f["event"] == "reclaim";
    gets += f["event"] == "get";
  }
  EXPECT_EQ(gets, 5);
  EXPECT_EQ(reclaims, 0) << "reclaim events for holders that held nothing";
  EXPECT_EQ(HashField("r", "refcount"), "1");
}

}  // namespace
}  // namespace mcd
