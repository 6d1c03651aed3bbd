// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A highly available control plane: a real Redis master and replica watched by three real
// sentinels on this machine's loopback, memcuda reaching them through a redis-sentinel:// URL.
// The master is SIGKILLed under load; the sentinels promote the replica; the tools and the
// server carry on against it, within the chaos test's invariants: documented exit codes, no
// command past its timeout, every acknowledged tensor still there (republished by its server
// when the failover dropped its write), and nothing leaked once the tensors are removed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "sentinel_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

// A sentinel as anyone who can reach its port may run one: on 127.0.0.1, it answers every
// command of every connection with the reply of the moment (raw RESP), AUTH with +OK.
class FakeSentinel {
 public:
  FakeSentinel() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeSentinel() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  void Answer(std::string reply) {
    std::lock_guard<std::mutex> lock(mutex_);
    reply_ = std::move(reply);
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      int conn = accept(fd_, nullptr, nullptr);
      if (conn < 0) continue;
      char buf[4096];
      for (;;) {  // each command: one read (they are small), one reply
        pollfd c{conn, POLLIN, 0};
        if (poll(&c, 1, 2000) <= 0) break;
        ssize_t n = read(conn, buf, sizeof(buf));
        if (n <= 0) break;
        std::string reply;
        if (std::string(buf, static_cast<size_t>(n)).find("AUTH") != std::string::npos) {
          reply = "+OK\r\n";
        } else {
          std::lock_guard<std::mutex> lock(mutex_);
          reply = reply_;
        }
        if (write(conn, reply.data(), reply.size()) < 0) break;
      }
      close(conn);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::string reply_;
  std::thread thread_;
};

// What a sentinel answers is checked as a hash is: a reply with elements that are not strings,
// or a host or port that is none, is an unexpected reply (76) for the tools and mcd-serve,
// never a crash (every tool and the server used to segfault reading a number as a string).
TEST(SentinelReplies, AnAnswerThatIsNoHostAndPortIsAProtocolErrorNotACrash) {
  FakeSentinel fake;
  test::TempDir dir;
  std::string url = "redis-sentinel://127.0.0.1:" + std::to_string(fake.port()) + "/m";
  const std::vector<std::string> replies = {
      "*2\r\n:1\r\n:6379\r\n",
      "*2\r\n$-1\r\n$-1\r\n",
      "*2\r\n*1\r\n:1\r\n$4\r\n6379\r\n",
      "*2\r\n$9\r\n127.0.0.1\r\n:6379\r\n",
      "*2\r\n$9\r\n127.0.0.1\r\n*0\r\n",
      "*2\r\n+127.0.0.1\r\n+6379\r\n",
      "*3\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n$1\r\nx\r\n",
      "*1\r\n$9\r\n127.0.0.1\r\n",
      "$9\r\n127.0.0.1\r\n",
      ":7\r\n",
      "*2\r\n$0\r\n\r\n$4\r\n6379\r\n",
      "*2\r\n$9\r\n127.0.0.1\r\n$5\r\n99999\r\n",
      "*2\r\n$8\r\n\x1b[2J\x1b[Hx\r\n$4\r\n6379\r\n",
  };
  for (const std::string& reply : replies) {
    SCOPED_TRACE(reply);
    fake.Answer(reply);
    auto ls = test::Run({test::ToolPath("mcd-ls")}, {{"MCD_REDIS_URL", url}});
    EXPECT_EQ(ls.exit_code, 76) << ls.err;
    EXPECT_NE(ls.err.find("no sentinel of"), std::string::npos) << ls.err;
    EXPECT_EQ(ls.err.find('\x1b'), std::string::npos) << ls.err;
  }
  fake.Answer(replies[0]);
  test::Background serve({test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", "fake"},
                         {{"MCD_REDIS_URL", url}, {"XDG_RUNTIME_DIR", dir.path()}},
                         dir.path() + "/serve.log");
  int code = serve.Wait(20);
  if (code == -1000) code = 0;  // still retrying after 20 s: alive, which is what counts
  EXPECT_GE(code, 0) << test::ReadFile(dir.path() + "/serve.log");
  EXPECT_NE(test::ReadFile(dir.path() + "/serve.log").find("no sentinel of"), std::string::npos)
      << test::ReadFile(dir.path() + "/serve.log");
}

// Sentinels that require a password are asked with the URL's credentials (or those of
// MCD_REDIS_PASSWORD), as the master is; they used to be asked without any and refused (69).
TEST(SentinelAuth, SentinelsAreAskedWithTheCredentialsOfTheUrl) {
  test::RedisServer master(test::RedisServerOptions{true, {"requirepass s3cret"}});
  test::TempDir dir;
  int port = test::FreePort();
  std::string conf = dir.path() + "/sentinel.conf";
  {
    std::ofstream out(conf);
    out << "port " << port << "\nbind 127.0.0.1\ndir " << dir.path() << "\n"
        << "requirepass s3cret\n"
        << "sentinel monitor " << kMaster << " 127.0.0.1 "
        << master.url().substr(master.url().rfind(':') + 1) << " 1\n"
        << "sentinel auth-pass " << kMaster << " s3cret\n";
  }
  test::Background sentinel({"redis-server", conf, "--sentinel"}, {}, dir.path() + "/sentinel.log");
  std::string hosts = "127.0.0.1:" + std::to_string(port) + "/" + kMaster;
  ASSERT_TRUE(test::WaitFor(
      [&] {
        auto conn = RedisConnection::Connect(
            RedisUrl::Parse("redis://:s3cret@" + hosts.substr(0, hosts.find('/'))).value());
        return conn.ok() &&
               conn.value()->Command({"SENTINEL", "get-master-addr-by-name", kMaster}).ok();
      },
      30000))
      << test::ReadFile(dir.path() + "/sentinel.log");
  auto with_url = test::Run({test::ToolPath("mcd-ls")},
                            {{"MCD_REDIS_URL", "redis-sentinel://:s3cret@" + hosts}});
  EXPECT_EQ(with_url.exit_code, 0) << with_url.err;
  auto with_env =
      test::Run({test::ToolPath("mcd-ls")},
                {{"MCD_REDIS_URL", "redis-sentinel://" + hosts}, {"MCD_REDIS_PASSWORD", "s3cret"}});
  EXPECT_EQ(with_env.exit_code, 0) << with_env.err;
  auto wrong = test::Run({test::ToolPath("mcd-ls")},
                         {{"MCD_REDIS_URL", "redis-sentinel://:n0tit@" + hosts}});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("AUTH refused"), std::string::npos) << wrong.err;
  EXPECT_EQ(wrong.err.find("n0tit"), std::string::npos) << "the password is printed: " << wrong.err;
}

TEST_F(Sentinel, TheMastersDeathUnderLoadLosesNoAcknowledgedTensor) {
  test::Background server({test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", node_}, Env(),
                          dir_.path() + "/serve.log");
  ASSERT_TRUE(
      test::WaitFor([&] { return ServeLog().find("serving node") != std::string::npos; }, 10000))
      << ServeLog();
  EXPECT_NE(ServeLog().find("redis-sentinel://"), std::string::npos)
      << "the log names the URL it was given";

  // Acknowledged before the kill: the last ones may not have reached the replica yet.
  std::vector<std::string> acknowledged;
  for (int i = 0; i < 20; ++i) {
    std::string name = "ack" + std::to_string(i);
    auto made =
        Tool("mcd-create", {name, "--dtype", "u8", "--shape", "8", "--device", "cpu", "-q"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    acknowledged.push_back(name);
  }
  // Load through the failover: create, get, and two releases per round, each command's exit
  // code and time written down.
  std::string flags = " --node " + node_ + " --timeout-ms 8000 -q";
  std::string bin = test::ToolPath("");
  auto timed = [&](const std::string& command) {
    return "s=$(date +%s%N); " + bin + command + flags + " 2>>" + dir_.path() +
           "/load.err; echo \"$? $(( ($(date +%s%N) - s) / 1000000 ))\" >> " + dir_.path() +
           "/load.txt; ";
  };
  std::string script =
      "for i in $(seq 40); do n=l$i; " + timed("mcd-create $n --dtype u8 --shape 8 --device cpu") +
      timed("mcd-get $n") + timed("mcd-rm $n") + timed("mcd-rm $n") + "sleep 0.05; done";
  test::Background load({"/bin/sh", "-c", script}, Env(), dir_.path() + "/load.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  master_.Kill();
  ASSERT_EQ(load.Wait(300), 0);

  // The replica is the master now (the load may end before the Sentinels have promoted it: its
  // commands meanwhile fail with documented codes, checked below), and the server serves
  // through it.
  std::unique_ptr<RedisConnection> master;
  ASSERT_TRUE(test::WaitFor(
      [&] {
        master = Master();
        return master != nullptr;
      },
      30000))
      << test::ReadFile(dir_.path() + "/load.err");
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
    EXPECT_EQ(master->Command({"HGET", keys_.Tensor(name), "owner"})->str, instance) << name << "\n"
                                                                                     << ServeLog();
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
  EXPECT_TRUE(
      test::WaitFor([&] { return test::ShmObjects("mcd-mcd-" + node_ + "-").empty(); }, 3000));
  EXPECT_EQ(server.Stop(SIGTERM), 0) << ServeLog();
}

}  // namespace
}  // namespace mcd
