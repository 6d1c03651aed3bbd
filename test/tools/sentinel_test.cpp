// A highly available control plane: a real Redis master and replica watched by three real
// sentinels on this machine's loopback, memcuda reaching them through a redis-sentinel:// URL.
// The master is SIGKILLed under load; the sentinels promote the replica; the tools and the
// server carry on against it, within the chaos test's invariants: documented exit codes, no
// command past its timeout, every acknowledged tensor still there (republished by its server
// when the failover dropped its write), and nothing leaked once the tensors are removed.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "sentinel_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

TEST_F(Sentinel, TheMastersDeathUnderLoadLosesNoAcknowledgedTensor) {
  test::Background server({test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", node_}, Env(),
                          dir_.path() + "/serve.log");
  ASSERT_TRUE(test::WaitFor([&] { return ServeLog().find("serving node") != std::string::npos; }, 10000))
      << ServeLog();
  EXPECT_NE(ServeLog().find("redis-sentinel://"), std::string::npos) << "the log names the URL it was given";

  // Acknowledged before the kill: the last ones may not have reached the replica yet.
  std::vector<std::string> acknowledged;
  for (int i = 0; i < 20; ++i) {
    std::string name = "ack" + std::to_string(i);
    auto made = Tool("mcd-create", {name, "--dtype", "u8", "--shape", "8", "--device", "cpu", "-q"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    acknowledged.push_back(name);
  }
  // Load through the failover: create, get, and two releases per round, each command's exit
  // code and time written down.
  std::string flags = " --node " + node_ + " --timeout-ms 8000 -q";
  std::string bin = test::ToolPath("");
  auto timed = [&](const std::string& command) {
    return "s=$(date +%s%N); " + bin + command + flags + " 2>>" + dir_.path() + "/load.err; echo \"$? $(( ($(date +%s%N) - s) / 1000000 ))\" >> " +
           dir_.path() + "/load.txt; ";
  };
  std::string script = "for i in $(seq 40); do n=l$i; " + timed("mcd-create $n --dtype u8 --shape 8 --device cpu") +
                       timed("mcd-get $n") + timed("mcd-rm $n") + timed("mcd-rm $n") + "sleep 0.05; done";
  test::Background load({"/bin/sh", "-c", script}, Env(), dir_.path() + "/load.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  master_.Kill();
  ASSERT_EQ(load.Wait(300), 0);

  // The replica is the master now, and the server serves through it.
  auto master = Master();
  ASSERT_NE(master, nullptr);
  auto role = master->Command({"ROLE"});
  ASSERT_TRUE(role.ok());
  EXPECT_EQ(role->elements[0].str, "master");
  auto info = master->Command({"INFO", "server"});
  EXPECT_NE(info->str.find("tcp_port:" + Port(replica_.url())), std::string::npos);

  std::istringstream lines(test::ReadFile(dir_.path() + "/load.txt"));
  std::map<int, int> codes;
  int commands = 0;
  for (int rc, ms; lines >> rc >> ms; ++commands) {
    ++codes[rc];
    EXPECT_TRUE(rc == 0 || rc == 1 || rc == 69 || rc == 75) << "exit " << rc;
    EXPECT_LT(ms, 8000 + 4000) << "a command ran past its timeout (exit " << rc << ")";
  }
  EXPECT_EQ(commands, 160);
  EXPECT_GT(codes[0], 80) << test::ReadFile(dir_.path() + "/load.err");
  std::cout << "sentinel failover: " << commands << " commands; exit codes";
  for (auto [rc, n] : codes) std::cout << " " << rc << "=" << n;
  std::cout << "\n" << test::ReadFile(dir_.path() + "/load.err");

  // Every acknowledged tensor is there, written by the live instance, replicated or put back.
  std::string instance = master->Command({"HGET", keys_.Server(node_), "instance"})->str;
  ASSERT_FALSE(instance.empty()) << ServeLog();
  for (const std::string& name : acknowledged) {
    EXPECT_EQ(master->Command({"HGET", keys_.Tensor(name), "owner"})->str, instance) << name << "\n" << ServeLog();
    EXPECT_EQ(Tool("mcd-get", {name, "--no-ref"}).exit_code, 0) << name;
  }
  // Nothing leaked: once every tensor is removed, Redis and /dev/shm hold nothing of them.
  auto names = test::Run({test::ToolPath("mcd-ls"), "-q"}, Env());
  ASSERT_EQ(names.exit_code, 0) << names.err;
  std::istringstream left(names.out);
  for (std::string name; std::getline(left, name);) {
    auto rm = Tool("mcd-rm", {name, "--detached"});
    EXPECT_TRUE(rm.exit_code == 0) << name << ": " << rm.err;
  }
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "");
  EXPECT_TRUE(test::WaitFor([&] { return test::ShmObjects("mcd-mcd-" + node_ + "-").empty(); }, 3000));
  EXPECT_EQ(server.Stop(SIGTERM), 0) << ServeLog();
}

}  // namespace
}  // namespace mcd
