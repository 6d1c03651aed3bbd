// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The fixture of the lifecycle tests: a real redis-server and a real mcd-serve on host memory
// (device cpu) for each test, the tools run as a user runs them, and what Redis and /dev/shm
// hold looked at directly.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "memcuda/client.h"
#include "memcuda/keys.h"
#include "test_support.h"

namespace mcd {

using nlohmann::json;
using test::ProcessResult;

// How often `what` occurs in `text`.
inline size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class Lifecycle : public ::testing::Test {
 protected:
  explicit Lifecycle(test::RedisServerOptions redis = {}) : redis_(std::move(redis)) {}

  void SetUp() override {
    node_ = "t" + std::to_string(getpid()) + "-" + std::to_string(counter_++);
    StartServer();
  }

  // Every test ends with a clean shutdown, which must leave nothing behind.
  void TearDown() override {
    if (server_ && server_->pid() > 0) {
      kill(server_->pid(), SIGCONT);  // in case a test that stopped it failed midway
      EXPECT_EQ(server_->Stop(SIGTERM), 0) << ServeLog();
      EXPECT_EQ(ShmCount(), 0u) << "shared-memory objects left after SIGTERM";
    }
  }

  void StartServer(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {
        test::ToolPath("mcd-serve"), "--devices",   devices_, "--node", node_,
        "--heartbeat-ttl",           heartbeat_ttl_};
    std::string ready_max = ready_max_.empty() && devices_ == "cpu" ? "0" : ready_max_;
    if (!ready_max.empty()) argv.insert(argv.end(), {"--ready-max", ready_max});
    argv.insert(argv.end(), extra.begin(), extra.end());
    size_t started = Count(ServeLog(), "serving node");
    server_ = std::make_unique<test::Background>(argv, Env(), dir_.path() + "/serve.log");
    // The heartbeat claims the node first; the log line says the start is complete.
    ASSERT_TRUE(test::WaitFor(
        [&] { return Heartbeat() && Count(ServeLog(), "serving node") > started; }, 10000))
        << ServeLog();
    // What the server says when it starts serving is complete: a client that read the heartbeat
    // without the socket would send through the queue for its whole life.
    auto socket = redis_.Connect()->Command({"HGET", keys_.Server(node_), "command_socket"});
    ASSERT_TRUE(socket.ok());
    ASSERT_FALSE(socket->str.empty())
        << "the heartbeat names no command socket once the server serves";
  }

  std::map<std::string, std::string> Env() const {
    std::map<std::string, std::string> env = {{"MCD_REDIS_URL", redis_.url()}};
    if (via_queue_) env["MCD_VIA_QUEUE"] = "1";
    return env;
  }
  std::string ServeLog() const { return test::ReadFile(dir_.path() + "/serve.log"); }
  bool Heartbeat() const {
    auto reply = redis_.Connect()->Command({"EXISTS", keys_.Server(node_)});
    return reply.ok() && reply->integer == 1;
  }

  ProcessResult Tool(const std::string& tool, std::vector<std::string> args) {
    std::vector<std::string> argv = {test::ToolPath(tool)};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--node");
    argv.push_back(node_);
    return test::Run(argv, Env());
  }

  // A libmemcuda client of this test's node; null (and the test failed) when it cannot connect.
  // A client of this fixture's Redis and node, whose references are bound to `holder_pid`
  // (ClientOptions::holder_pid: 0 this process, kNoHolder nobody).
  std::unique_ptr<Client> ConnectClient(int timeout_ms = 5000, int64_t holder_pid = 0) {
    ClientOptions opt;
    opt.redis_url = redis_.parsed_url();
    opt.node = node_;
    opt.timeout_ms = timeout_ms;
    opt.holder_pid = holder_pid;
    opt.command_socket = !via_queue_;
    auto connected = Client::Connect(opt);
    EXPECT_TRUE(connected.ok()) << connected.status().ToString();
    return connected.ok() ? std::move(connected).value() : nullptr;
  }

  // A u8[16] tensor in host memory.
  static CreateSpec HostSpec(const std::string& name) {
    CreateSpec spec;
    spec.name = name;
    spec.dtype = DType::kU8;
    spec.shape = {16};
    spec.device = kHostDevice;
    return spec;
  }

  // A connection to the server's command socket, as its heartbeat names it; -1 (and the test
  // failed) when there is none.
  int ConnectCommandSocket() {
    auto path = redis_.Connect()->Command({"HGET", keys_.Server(node_), "command_socket"});
    EXPECT_TRUE(path.ok() && !path->is_nil() && !path->str.empty())
        << "the heartbeat names no command socket";
    if (!path.ok() || path->str.empty()) return -1;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path->str.c_str(), sizeof(addr.sun_path) - 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << std::strerror(errno);
    return fd;
  }
  // Sends one line on a fresh connection to the command socket and returns the reply line, or ""
  // when the connection closed without one.
  std::string OnSocket(const std::string& line) {
    int fd = ConnectCommandSocket();
    if (fd < 0) return "";
    std::string text = line + "\n";
    EXPECT_EQ(send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
    std::string reply;
    char c = 0;
    while (recv(fd, &c, 1, 0) == 1 && c != '\n') reply.push_back(c);
    close(fd);
    return reply;
  }

  // Pushes a raw command with a req and returns the server's JSON reply.
  json Raw(const std::string& body, const std::string& req) {
    auto conn = redis_.Connect();
    EXPECT_TRUE(conn->Command({"LPUSH", keys_.queue, body}).ok());
    auto reply = test::BlockingPop(*conn, keys_.Reply(req), 60);
    EXPECT_TRUE(reply.ok() && reply->elements.size() == 2) << body;
    if (!reply.ok() || reply->elements.size() != 2) return json();
    return json::parse(reply->elements[1].str);
  }

  // Pushes, in one LPUSH (so the queue holds them all at once), a fire-and-forget create, get
  // and delete of each of `count` names prefix0, prefix1, ...: each leaves one reference.
  void PushCreateGetDelete(const std::string& prefix, int count) {
    std::vector<std::string> args = {"LPUSH", keys_.queue};
    for (int i = 0; i < count; ++i) {
      std::string name = prefix + std::to_string(i);
      args.push_back(R"({"op":"create","name":")" + name +
                     R"(","dtype":"u8","shape":[64],"device":"cpu","pid":1})");
      args.push_back(R"({"op":"get","name":")" + name + R"("})");
      args.push_back(R"({"op":"delete","name":")" + name + R"("})");
    }
    ASSERT_TRUE(
        redis_.Connect()->Command(std::vector<std::string_view>(args.begin(), args.end())).ok());
  }

  // SCRIPT FLUSH `times` times, `apart` from each other, while the server works through a backlog.
  void FlushScripts(int times, std::chrono::milliseconds apart) {
    auto conn = redis_.Connect();
    for (int i = 0; i < times; ++i) {
      std::this_thread::sleep_for(apart);
      ASSERT_TRUE(conn->Command({"SCRIPT", "FLUSH"}).ok());
    }
  }

  // After a backlog on the names <prefix>0..<prefix><count-1> that leaves each tensor with one
  // reference: a create "end" sent behind it (with req `end_req`) is answered, each command was
  // applied once, and none is left in the processing list.
  void ExpectBacklogAppliedOnce(const std::string& prefix, int count, const std::string& end_req) {
    json last =
        Raw(R"({"op":"create","name":"end","dtype":"u8","shape":[1],"device":"cpu","req":")" +
                end_req + R"("})",
            end_req);
    ASSERT_EQ(last["ok"], true) << last.dump() << ServeLog();
    for (int i = 0; i < count; ++i)
      ASSERT_EQ(HashField(prefix + std::to_string(i), "refcount"), "1") << i << ServeLog();
    EXPECT_EQ(redis_.Connect()->Command({"LLEN", keys_.Processing(node_)})->integer, 0);
    EXPECT_EQ(ShmCount(), static_cast<size_t>(count) + 1);
  }

  // Turns the AOF on, with `keys` filler keys in it, so that a restart with "--key-load-delay"
  // loads slowly.
  void PersistWithFiller(int keys) {
    auto conn = redis_.Connect();
    ASSERT_TRUE(
        conn->Command({"EVAL",
                       "for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'filler:' .. i, 'x') end",
                       "0", std::to_string(keys)})
            .ok());
    // Every write on disk before its reply, so that what the test wrote is there after a SIGKILL.
    ASSERT_TRUE(conn->Command({"CONFIG", "SET", "appendfsync", "always"}).ok());
    ASSERT_TRUE(conn->Command({"CONFIG", "SET", "appendonly", "yes"}).ok());
    ASSERT_TRUE(test::WaitFor(
        [&] {
          auto info = conn->Command({"INFO", "persistence"});
          return info.ok() && InfoField(info->str, "aof_rewrite_in_progress") == "0" &&
                 InfoField(info->str, "aof_rewrite_scheduled") == "0" &&
                 InfoField(info->str, "aof_enabled") == "1";
        },
        20000));
  }
  // Events are served every 1 KiB loaded, not every 2 MiB: a loading Redis answers at once.
  void RestartLoadingSlowly() {
    redis_.Restart({"--appendonly", "yes", "--appendfsync", "always", "--key-load-delay", "20",
                    "--loading-process-events-interval-bytes", "1024"});
  }

  // Starts tool `tool` with `args` for this test's node in the background, its output in `log`
  // under the test's folder.
  std::unique_ptr<test::Background> Start(const std::string& tool, std::vector<std::string> args,
                                          const std::string& log) {
    args.insert(args.begin(), test::ToolPath(tool));
    args.push_back("--node");
    args.push_back(node_);
    return std::make_unique<test::Background>(args, Env(), dir_.path() + "/" + log);
  }

  // Whether `count` clients are blocked in XREAD.
  bool BlockedReaders(int count) {
    return test::BlockedClients(*redis_.Connect(), "xread") == count;
  }

  std::vector<std::string> TensorKeys() {
    auto reply = redis_.Connect()->Command({"KEYS", keys_.TensorPattern("*")});  // test only
    std::vector<std::string> out;
    for (auto& e : reply->elements) out.push_back(e.str);
    return out;
  }

  std::string HashField(const std::string& name, const std::string& field) {
    auto reply = redis_.Connect()->Command({"HGET", keys_.Tensor(name), field});
    return reply.ok() && !reply->is_nil() ? reply->str : "";
  }

  size_t ShmCount() {
    return test::ShmObjects("mcd-mcd-" + node_ + "-").size();
  }  // this node's only
  // The last release is answered once the hash is gone; the server frees the memory right after
  // sending the answer, so a moment may pass before the object disappears.
  bool ShmFreedSoon() {
    return test::WaitFor([&] { return ShmCount() == 0; }, 2000);
  }

  std::string devices_ = "cpu";      // mcd-serve --devices
  std::string heartbeat_ttl_ = "3";  // mcd-serve --heartbeat-ttl
  // mcd-serve --ready-max; "": 0 where the server serves host memory only, so that the
  // shared-memory objects of a node (ShmCount) are its tensors' alone, else the default.
  std::string ready_max_;
  bool via_queue_ =
      false;  // the tools and clients of this test use the queue, not the command socket
  test::TempDir dir_;
  test::RedisServer redis_;
  KeySpace keys_;
  std::string node_;
  std::unique_ptr<test::Background> server_;
  static inline int counter_ = 0;
};

}  // namespace mcd
