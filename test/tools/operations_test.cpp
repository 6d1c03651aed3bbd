// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Operating memcuda: which server a tool finds (MCD_NODE, the only live server, an error that
// lists the live ones), and mcd-ls --servers as a readiness check and a metrics source.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "lifecycle_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

class Operations : public Lifecycle {
 protected:
  // A tool run with no --node: the node comes from MCD_NODE, the host name, or discovery.
  ProcessResult Unnamed(const std::string& tool, std::vector<std::string> args,
                        std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {test::ToolPath(tool)};
    argv.insert(argv.end(), args.begin(), args.end());
    auto all = Env();
    all.insert(env.begin(), env.end());
    return test::Run(argv, all);
  }
};

TEST_F(Operations, ATheOnlyLiveServerIsFoundAndSaidSoAndMcdNodeNamesOne) {
  // This host's name has no server here: the only live one (this test's node) is taken, and
  // the tool says so.
  auto created =
      Unnamed("mcd-create", {"found", "--dtype", "u8", "--shape", "4", "--device", "cpu"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_NE(created.err.find("using node '" + node_ + "', the only one live on"), std::string::npos)
      << created.err;
  EXPECT_EQ(HashField("found", "node"), node_);
  auto quiet = Unnamed("mcd-rm", {"found", "-q"});
  EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  // MCD_NODE names a node, which is then used as given: none such here.
  auto named = Unnamed("mcd-create", {"n", "--dtype", "u8", "--shape", "4", "--device", "cpu"},
                       {{"MCD_NODE", "elsewhere"}});
  EXPECT_EQ(named.exit_code, 69);
  EXPECT_NE(named.err.find("no mcd-serve is running for node 'elsewhere' on " + redis_.url()),
            std::string::npos)
      << named.err;
  EXPECT_NE(named.err.find("live there: " + node_), std::string::npos) << named.err;
  auto by_env =
      Unnamed("mcd-create", {"e", "--dtype", "u8", "--shape", "4", "--device", "cpu", "-q"},
              {{"MCD_NODE", node_}});
  EXPECT_EQ(by_env.exit_code, 0) << by_env.err;
  EXPECT_EQ(Tool("mcd-rm", {"e", "-q"}).exit_code, 0);
}

TEST_F(Operations, WithTwoLiveServersAToolWithoutANodeListsThemAndDoesNothing) {
  std::string other = node_ + "-b";
  test::Background second(
      {test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", other, "--heartbeat-ttl", "3"},
      Env(), dir_.path() + "/second.log");
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return test::ReadFile(dir_.path() + "/second.log").find("serving node") !=
               std::string::npos;
      },
      10000));
  auto created = Unnamed("mcd-create", {"x", "--dtype", "u8", "--shape", "4", "--device", "cpu"});
  EXPECT_EQ(created.exit_code, 69);
  EXPECT_NE(created.err.find("live there: "), std::string::npos) << created.err;
  EXPECT_NE(created.err.find(node_), std::string::npos) << created.err;
  EXPECT_NE(created.err.find(other), std::string::npos) << created.err;
  EXPECT_TRUE(TensorKeys().empty());
  // Both in mcd-ls --servers (without --node), sorted by node.
  auto listed = Unnamed("mcd-ls", {"--servers", "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  auto servers = json::parse(listed.out);
  ASSERT_EQ(servers.size(), 2u);
  EXPECT_EQ(servers[0]["node"], node_);
  EXPECT_EQ(servers[1]["node"], other);
  EXPECT_EQ(second.Stop(SIGTERM), 0);
}

TEST_F(Operations, ServersAreListedForPeopleScriptsAndPrometheusAndNoneLiveIsExit69) {
  via_queue_ = true;  // through the queue: its wait is timed too
  ASSERT_EQ(Tool("mcd-create", {"m", "--dtype", "f32", "--shape", "256", "--device", "cpu", "-q"})
                .exit_code,
            0);
  via_queue_ = false;
  // A command the server answers with an error.
  EXPECT_EQ(
      Tool("mcd-create", {"m", "--dtype", "f32", "--shape", "256", "--device", "cpu"}).exit_code,
      1);
  // The heartbeat carries the counters from its next write on (every TTL/4).
  ASSERT_TRUE(test::WaitFor(
      [&] {
        auto listed = Tool("mcd-ls", {"--servers", "--json"});
        auto s = json::parse(listed.out, nullptr, false);
        return s.is_array() && s.size() == 1 && s[0]["tensors"] == 1 &&
               s[0]["commands_failed"] == 1;
      },
      5000));
  auto table = Tool("mcd-ls", {"--servers"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.out.rfind("NODE", 0), 0u) << table.out;
  EXPECT_NE(table.out.find(node_), std::string::npos);
  EXPECT_NE(table.out.find(" 1.0KiB "), std::string::npos) << table.out;  // bytes held
  // Each value one field, for awk: as many in the row as in the header.
  EXPECT_EQ(test::FieldCount(table.out.substr(0, table.out.find('\n'))),
            test::FieldCount(table.out.substr(table.out.find('\n') + 1)))
      << table.out;
  // With --node, that node's server only: another node has none live (69).
  auto mine = Unnamed("mcd-ls", {"--servers", "-q", "--node", node_});
  EXPECT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out, node_ + "\n");
  auto other = Unnamed("mcd-ls", {"--servers", "--node", "elsewhere"});
  EXPECT_EQ(other.exit_code, 69) << other.out;
  EXPECT_NE(other.err.find("no mcd-serve is live for node 'elsewhere'"), std::string::npos)
      << other.err;
  EXPECT_EQ(other.out, "");
  auto listed = Tool("mcd-ls", {"--servers", "--json"});
  EXPECT_EQ(listed.out.find('\n'), listed.out.size() - 1) << "one line: " << listed.out;
  auto s = json::parse(listed.out)[0];
  EXPECT_EQ(s["device_tensors"]["cpu"]["tensors"], 1) << listed.out;
  EXPECT_EQ(s["device_tensors"]["cpu"]["bytes"], 1024) << listed.out;
  EXPECT_EQ(s["tensor_bytes"], 1024);
  EXPECT_EQ(s["errors"]["already_exists"], 1);
  EXPECT_GE(s["commands_ok"].get<int>(), 1);
  EXPECT_EQ(s["pid"], server_->pid());
  auto prom = Tool("mcd-ls", {"--servers", "--prometheus"});
  ASSERT_EQ(prom.exit_code, 0) << prom.err;
  // The server is named by node and `server`: `instance` is the scrape target's, Prometheus's own.
  std::string label =
      "{node=\"" + node_ + "\",server=\"" + s["instance"].get<std::string>() + "\"}";
  EXPECT_EQ(prom.out.find("instance="), std::string::npos) << prom.out;
  std::string on_cpu = label.substr(0, label.size() - 1) + ",device=\"cpu\"}";
  EXPECT_NE(prom.out.find("mcd_servers_live 1\n"), std::string::npos) << prom.out;
  EXPECT_NE(prom.out.find("mcd_tensors" + on_cpu + " 1\n"), std::string::npos) << prom.out;
  EXPECT_NE(prom.out.find("mcd_tensor_bytes" + on_cpu + " 1024\n"), std::string::npos) << prom.out;
  // A start time, as process_start_time_seconds is, rather than an uptime that grows.
  size_t started = prom.out.find("mcd_server_start_time_seconds" + label + " ");
  ASSERT_NE(started, std::string::npos) << prom.out;
  double start_s = std::strtod(prom.out.c_str() + prom.out.find(' ', started) + 1, nullptr);
  EXPECT_NEAR(start_s, s["started_ms"].get<double>() / 1000, 0.001);
  EXPECT_EQ(prom.out.find("uptime"), std::string::npos) << prom.out;
  // The reference parser (the Python client's) reads every family.
  const std::string prom_file = dir_.path() + "/metrics.prom";
  { std::ofstream(prom_file) << prom.out; }
  auto parsed =
      test::Run({"/usr/bin/python3", "-c",
                 "import sys\n"
                 "from prometheus_client.parser import text_string_to_metric_families\n"
                 "families = list(text_string_to_metric_families(open(sys.argv[1]).read()))\n"
                 "print(len(families), sum(len(f.samples) for f in families))\n",
                 prom_file});
  EXPECT_EQ(parsed.exit_code, 0) << parsed.err << " (python3-prometheus-client, install-deps.sh)";
  EXPECT_EQ(parsed.out.rfind("11 ", 0), 0u) << parsed.out;
  // And promtool's lint of metric names, types and help where Prometheus is installed (Debian's
  // package also starts a Prometheus server, which install-deps.sh does not put on a machine).
  if (std::system("command -v promtool >/dev/null") == 0) {
    auto linted = test::Run({"/bin/sh", "-c", "promtool check metrics < " + prom_file});
    EXPECT_EQ(linted.exit_code, 0) << linted.out << linted.err;
  } else {
    std::cout << "promtool: not installed here; the metrics were checked by the Python parser\n";
  }
  EXPECT_NE(prom.out.find("# TYPE mcd_commands_failed_total counter"), std::string::npos);
  EXPECT_NE(prom.out.find("mcd_command_errors_total{node=\"" + node_), std::string::npos)
      << prom.out;
  // The creates' latency histogram: two creates (one refused), every bucket cumulative up to +Inf.
  std::string create = label.substr(0, label.size() - 1) + ",op=\"create\"";
  EXPECT_NE(prom.out.find("mcd_command_duration_seconds_count" + create + "} 2\n"),
            std::string::npos)
      << prom.out;
  EXPECT_NE(prom.out.find("mcd_command_duration_seconds_bucket" + create + ",le=\"+Inf\"} 2\n"),
            std::string::npos)
      << prom.out;
  EXPECT_NE(prom.out.find("mcd_command_duration_seconds_bucket" + create + ",le=\"0.00005\"}"),
            std::string::npos)
      << prom.out;
  EXPECT_NE(prom.out.find("# TYPE mcd_command_duration_seconds histogram"), std::string::npos);
  std::string waited = label.substr(0, label.size() - 1) + ",op=\"queue_wait\"";
  EXPECT_NE(prom.out.find("mcd_command_duration_seconds_count" + waited + "} 1\n"),
            std::string::npos)
      << prom.out;
  // Every sample line is "name{labels} value" or "name value".
  std::istringstream lines(prom.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_NE(line.find(' '), std::string::npos) << line;
    EXPECT_EQ(line.find("mcd_"), 0u) << line;
  }
  ASSERT_EQ(Tool("mcd-rm", {"m", "-q"}).exit_code, 0);
  // None live: the readiness check fails, and the metrics say so.
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  auto none = Tool("mcd-ls", {"--servers"});
  EXPECT_EQ(none.exit_code, 69);
  EXPECT_NE(none.err.find("no mcd-serve is live for node '" + node_ + "' on " + redis_.url()),
            std::string::npos)
      << none.err;
  auto none_prom = Tool("mcd-ls", {"--servers", "--prometheus"});
  EXPECT_EQ(none_prom.exit_code, 69);
  EXPECT_NE(none_prom.out.find("mcd_servers_live 0\n"), std::string::npos) << none_prom.out;
  server_.reset();
}

// Under systemd (Type=notify), the service manager hears READY=1 once the node is served and
// STOPPING=1 when the server begins to free it: the sd_notify protocol, on a socket of ours.
TEST_F(Operations, AServiceManagerIsToldWhenTheServerIsReadyAndWhenItStops) {
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  std::string path = dir_.path() + "/notify.sock";
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  auto env = Env();
  env["NOTIFY_SOCKET"] = path;
  server_ = std::make_unique<test::Background>(
      std::vector<std::string>{test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", node_},
      env, dir_.path() + "/notified.log");
  auto next = [&] {
    char buf[512] = {};
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  };
  std::string ready = next();
  EXPECT_EQ(ready.rfind("READY=1\n", 0), 0u) << ready;
  // Ready means served: the readiness check agrees at once.
  EXPECT_EQ(Tool("mcd-ls", {"--servers", "-q"}).exit_code, 0);
  kill(server_->pid(), SIGTERM);
  std::string stopping = next();
  EXPECT_EQ(stopping.rfind("STOPPING=1\n", 0), 0u) << stopping;
  EXPECT_EQ(server_->Stop(SIGTERM), 0);
  server_.reset();
  close(fd);
}

// At boot, a Redis may come up after mcd-serve, or still be loading its data. Without
// --wait-for-redis the server exits 69 at once, as before; with it, it says that it waits,
// then serves once Redis answers; a stop signal ends the wait with exit 0, at once.
TEST(RedisWait, AServerStartedBeforeItsRedisWaitsForItAndAStopEndsTheWait) {
  test::TempDir dir;
  const std::string socket_path = dir.path() + "/late.sock";
  const std::vector<std::string> serve = {
      test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", "late", "--redis-url",
      "unix://" + socket_path};
  auto at_once = test::Run(serve, {}, 30);
  EXPECT_EQ(at_once.exit_code, 69) << at_once.err;

  std::vector<std::string> waiting = serve;
  waiting.insert(waiting.end(), {"--wait-for-redis", "30"});
  const std::string log = dir.path() + "/serve.log";
  test::Background server(waiting, {}, log);
  ASSERT_TRUE(test::WaitFor(
      [&] { return test::ReadFile(log).find("waiting for Redis at") != std::string::npos; }, 10000))
      << test::ReadFile(log);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // a try or two that fail
  test::Background redis({"redis-server", "--port", "0", "--unixsocket", socket_path, "--save", "",
                          "--appendonly", "no"},
                         {}, dir.path() + "/redis.log");
  EXPECT_TRUE(test::WaitFor(
      [&] { return test::ReadFile(log).find("serving node 'late'") != std::string::npos; }, 10000))
      << test::ReadFile(log);
  EXPECT_EQ(server.Stop(SIGTERM), 0) << test::ReadFile(log);

  std::vector<std::string> never = waiting;
  never[6] = "unix://" + dir.path() + "/none.sock";
  const std::string never_log = dir.path() + "/never.log";
  test::Background stopped(never, {}, never_log);
  ASSERT_TRUE(test::WaitFor(
      [&] { return test::ReadFile(never_log).find("waiting for Redis") != std::string::npos; },
      10000));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(stopped.Stop(SIGTERM), 0) << test::ReadFile(never_log);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

// A stand-in for an older Redis on a Unix socket: INFO and HELLO get the replies given (RESP),
// every other command an error. Enough for a server to ask it its version.
class FakeRedis {
 public:
  FakeRedis(const std::string& path, std::string info, std::string hello)
      : info_(std::move(info)), hello_(std::move(hello)) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << std::strerror(errno);
    EXPECT_EQ(listen(fd_, 8), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeRedis() {
    shutdown(fd_, SHUT_RDWR);  // wakes the accept
    thread_.join();
    close(fd_);
  }
  static std::string Bulk(const std::string& s) {
    return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
  }

 private:
  void Serve() {
    for (int c; (c = accept(fd_, nullptr, nullptr)) >= 0; close(c)) {
      std::string buf;
      char chunk[4096];
      for (ssize_t n; (n = read(c, chunk, sizeof(chunk))) > 0;) {
        buf.append(chunk, static_cast<size_t>(n));
        for (std::string name; !(name = TakeCommand(buf)).empty();) {
          std::string reply = name == "INFO"    ? info_
                              : name == "HELLO" ? hello_
                                                : "-ERR not in this fake\r\n";
          (void)send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        }
      }
    }
  }
  // The name (upper case) of the first whole command in `buf`, taken out of it; "" when none is.
  static std::string TakeCommand(std::string& buf) {
    size_t at = 0;
    auto line = [&](std::string& out) {
      size_t end = buf.find("\r\n", at);
      if (end == std::string::npos) return false;
      out = buf.substr(at, end - at);
      at = end + 2;
      return true;
    };
    std::string head, length, name;
    if (!line(head) || head.empty() || head[0] != '*') return "";
    for (int i = 0, n = std::atoi(head.c_str() + 1); i < n; ++i) {
      if (!line(length)) return "";
      size_t bytes = std::strtoul(length.c_str() + 1, nullptr, 10);
      if (buf.size() < at + bytes + 2) return "";
      if (i == 0) name = buf.substr(at, bytes);
      at += bytes + 2;
    }
    buf.erase(0, at);
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return name;
  }

  int fd_ = -1;
  std::string info_, hello_;
  std::thread thread_;
};

// memcuda needs Redis 7.0 or newer (scripts are kept in no AOF or RDB, nor sent to replicas): a
// server refuses an older one (69), naming its version, whether HELLO tells it or, before Redis 6
// (no HELLO), INFO does. A Redis that tells neither is taken as it is, with a warning.
TEST(RedisVersion, AServerRefusesARedisOlderThan7) {
  test::TempDir dir;
  const std::string noperm = "-NOPERM this user has no permissions to run the 'info' command\r\n";
  const std::string no_hello = "-ERR unknown command 'HELLO'\r\n";
  struct Case {
    const char* what;
    std::string info, hello, version;  // version: "" where none is told
  };
  const std::vector<Case> cases = {
      {"from HELLO", noperm,
       "*4\r\n" + FakeRedis::Bulk("server") + FakeRedis::Bulk("redis") +
           FakeRedis::Bulk("version") + FakeRedis::Bulk("6.2.14"),
       "6.2.14"},
      {"from INFO",
       FakeRedis::Bulk("# Server\r\nredis_version:5.0.14\r\nredis_mode:standalone\r\n"), no_hello,
       "5.0.14"},
      {"from neither", noperm, no_hello, ""}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].what);
    std::string socket_path = dir.path() + "/old" + std::to_string(i) + ".sock";
    FakeRedis old(socket_path, cases[i].info, cases[i].hello);
    auto served = test::Run({test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", "old",
                             "--redis-url", "unix://" + socket_path},
                            {}, 30);
    if (!cases[i].version.empty()) {
      EXPECT_EQ(served.exit_code, 69) << served.err;
      EXPECT_NE(served.err.find("is version " + cases[i].version + "; memcuda needs 7.0 or newer"),
                std::string::npos)
          << served.err;
    } else {  // goes on, and fails only at the next command, which the fake does not serve
      EXPECT_NE(served.err.find("cannot tell the version of Redis"), std::string::npos)
          << served.err;
      EXPECT_EQ(served.err.find("memcuda needs 7.0 or newer"), std::string::npos) << served.err;
    }
  }
}

// Where an ACL forbids INFO (as the shared deployment's does), the version still comes from
// HELLO, which no ACL can forbid: the server serves without a warning.
TEST_F(Operations, AServerForbiddenInfoTakesRedisVersionFromHello) {
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  ASSERT_TRUE(redis_.Connect()->Command({"ACL", "SETUSER", "default", "-info"}).ok());
  StartServer();
  EXPECT_EQ(ServeLog().find("cannot tell the version of Redis"), std::string::npos) << ServeLog();
  EXPECT_EQ(
      Tool("mcd-create", {"t", "--dtype", "u8", "--shape", "4", "--device", "cpu", "-q"}).exit_code,
      0);
}
}  // namespace
}  // namespace mcd
