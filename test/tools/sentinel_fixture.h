// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A highly available control plane for the tests: a real Redis master and replica watched by
// three real sentinels on this machine's loopback, reached through a redis-sentinel:// URL.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "memcuda/keys.h"
#include "memcuda/redis.h"
#include "test_support.h"

namespace mcd {

inline constexpr const char* kMaster = "mcdmaster";

class Sentinel : public ::testing::Test {
 protected:
  Sentinel()
      : master_(test::RedisServerOptions{true, {"repl-diskless-sync-delay 0"}}),
        replica_(test::RedisServerOptions{true, {"replicaof 127.0.0.1 " + Port(master_.url())}}) {}

  static std::string Port(const std::string& url) { return url.substr(url.rfind(':') + 1); }

  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      int port = test::FreePort();
      std::string conf = dir_.path() + "/sentinel" + std::to_string(i) + ".conf";
      std::ofstream out(conf);
      out << "port " << port << "\nbind 127.0.0.1\ndir " << dir_.path() << "\n"
          << "sentinel monitor " << kMaster << " 127.0.0.1 " << Port(master_.url()) << " 2\n"
          << "sentinel down-after-milliseconds " << kMaster << " 1000\n"
          << "sentinel failover-timeout " << kMaster << " 4000\n";
      out.close();
      sentinels_.push_back(std::make_unique<test::Background>(
          std::vector<std::string>{"redis-server", conf, "--sentinel"},
          std::map<std::string, std::string>{},
          dir_.path() + "/sentinel" + std::to_string(i) + ".log"));
      ports_.push_back(port);
      url_ += (i ? "," : "redis-sentinel://") + std::string("127.0.0.1:") + std::to_string(port);
    }
    url_ += std::string("/") + kMaster;
    // A replica in sync, as in a deployment that has been up for a while.
    ASSERT_TRUE(test::WaitFor(
        [&] {
          return replica_.Connect()
                     ->Command({"INFO", "replication"})
                     ->str.find("master_link_status:up") != std::string::npos;
        },
        30000));
    // Ready for a failover once every sentinel knows the replica and the two other sentinels.
    ASSERT_TRUE(test::WaitFor(
        [&] {
          for (int port : ports_) {
            auto s = RedisConnection::Connect(
                RedisUrl::Parse("redis://127.0.0.1:" + std::to_string(port)).value());
            if (!s.ok()) return false;
            auto replicas = s.value()->Command({"SENTINEL", "REPLICAS", kMaster});
            auto others = s.value()->Command({"SENTINEL", "SENTINELS", kMaster});
            if (!replicas.ok() || replicas->elements.size() != 1 || !others.ok() ||
                others->elements.size() != 2)
              return false;
          }
          return true;
        },
        30000))
        << test::ReadFile(dir_.path() + "/sentinel0.log");
  }

  std::map<std::string, std::string> Env() const { return {{"MCD_REDIS_URL", url_}}; }
  std::string ServeLog() const { return test::ReadFile(dir_.path() + "/serve.log"); }
  test::ProcessResult Tool(const std::string& tool, std::vector<std::string> args) {
    args.insert(args.begin(), test::ToolPath(tool));
    args.insert(args.end(), {"--node", node_, "--timeout-ms", "8000"});
    return test::Run(args, Env());
  }
  // Whichever Redis the sentinels name as master now.
  std::unique_ptr<RedisConnection> Master() {
    auto conn = RedisConnection::Connect(RedisUrl::Parse(url_).value());
    return conn.ok() ? std::move(conn).value() : nullptr;
  }

  test::TempDir dir_;
  test::RedisServer master_, replica_;
  std::vector<std::unique_ptr<test::Background>> sentinels_;
  std::vector<int> ports_;
  std::string url_;
  std::string node_ = "ha" + std::to_string(getpid());
  KeySpace keys_;
};

}  // namespace mcd
