// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Many nodes on one Redis: each server takes only its own node's commands (its queue
// <queue>:<node>), the shared queue of the minimal form still works, mcd-ls sees every node, and
// a tool pointed at the wrong node says which node holds the tensor. Real redis-server, real
// mcd-serve processes (host memory), the real tools.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>

#include "memcuda/keys.h"
#include "test_support.h"

namespace mcd {
namespace {

using nlohmann::json;

class Nodes : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& [node, server] : servers_) EXPECT_EQ(server->Stop(SIGTERM), 0) << Log(node);
    for (auto& [node, server] : servers_) {
      EXPECT_TRUE(test::ShmObjects("mcd-mcd-" + node + "-").empty()) << node;
    }
  }
  std::map<std::string, std::string> Env() const { return {{"MCD_REDIS_URL", redis_.url()}}; }
  std::string Log(const std::string& node) const {
    return test::ReadFile(dir_.path() + "/" + node + ".log");
  }
  std::string Node(int i) const { return "n" + std::to_string(getpid()) + "-" + std::to_string(i); }

  void Serve(const std::string& node) {
    servers_[node] = std::make_unique<test::Background>(
        std::vector<std::string>{test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", node,
                                 "--heartbeat-ttl", "3"},
        Env(), dir_.path() + "/" + node + ".log");
    ASSERT_TRUE(
        test::WaitFor([&] { return Log(node).find("serving node") != std::string::npos; }, 10000))
        << Log(node);
  }
  test::ProcessResult Tool(const std::string& tool, std::vector<std::string> args) {
    args.insert(args.begin(), test::ToolPath(tool));
    return test::Run(args, Env());
  }
  void Create(const std::string& name, const std::string& node) {
    auto made = Tool("mcd-create", {name, "--dtype", "u8", "--shape", "8", "--device", "cpu",
                                    "--node", node, "-q"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  std::string HashField(const std::string& name, const std::string& field) {
    auto reply = redis_.Connect()->Command({"HGET", keys_.Tensor(name), field});
    return reply.ok() && !reply->is_nil() ? reply->str : "";
  }
  std::string Instance(const std::string& node) {
    return redis_.Connect()->Command({"HGET", keys_.Server(node), "instance"})->str;
  }
  // Pushes a command in the minimal form onto the shared queue and returns the server's reply.
  json PushMinimal(const std::string& body, const std::string& req) {
    auto conn = redis_.Connect();
    EXPECT_TRUE(conn->Command({"LPUSH", keys_.queue, body}).ok());
    auto reply = test::BlockingPop(*conn, keys_.Reply(req), 60);
    EXPECT_TRUE(reply.ok() && reply->elements.size() == 2) << body;
    return reply.ok() && reply->elements.size() == 2 ? json::parse(reply->elements[1].str) : json();
  }

  test::TempDir dir_;
  test::RedisServer redis_;
  KeySpace keys_;
  std::map<std::string, std::unique_ptr<test::Background>> servers_;
};

TEST_F(Nodes, TwoNodesShareOneRedisAndEachServesItsOwn) {
  const std::string a = Node(0), b = Node(1);
  Serve(a);
  Serve(b);
  auto heartbeat = redis_.Connect()->Command({"HGET", keys_.Server(a), "node_queue"});
  EXPECT_EQ(heartbeat->str, keys_.NodeQueue(a));
  Create("on-a", a);
  Create("on-b", b);
  EXPECT_EQ(HashField("on-a", "node"), a);
  EXPECT_EQ(HashField("on-b", "owner"), Instance(b));

  // mcd-ls lists every node's tensors; --node keeps one node's.
  auto all = Tool("mcd-ls", {"-q"});
  EXPECT_EQ(all.out, "on-a\non-b\n");
  auto only_b = Tool("mcd-ls", {"-q", "--node", b});
  EXPECT_EQ(only_b.out, "on-b\n");
  auto table = Tool("mcd-ls", {"--node", a});
  EXPECT_NE(table.out.find("on-a"), std::string::npos);
  EXPECT_EQ(table.out.find("on-b"), std::string::npos);

  // A tool pointed at the wrong node says which node holds the tensor, and changes nothing.
  auto wrong_get = Tool("mcd-get", {"on-b", "--node", a});
  EXPECT_EQ(wrong_get.exit_code, 64);
  EXPECT_NE(wrong_get.err.find("lives on node '" + b + "'"), std::string::npos) << wrong_get.err;
  auto wrong_rm = Tool("mcd-rm", {"on-b", "--node", a});
  EXPECT_EQ(wrong_rm.exit_code, 64);
  EXPECT_NE(wrong_rm.err.find("lives on node '" + b + "'"), std::string::npos) << wrong_rm.err;
  EXPECT_EQ(HashField("on-b", "refcount"), "1");

  // The minimal form on the shared queue: whichever server takes a command naming a node, it is
  // made on that node (forwarded when the other server took it).
  for (int i = 0; i < 8; ++i) {
    std::string name = "minimal" + std::to_string(i), req = "minimal-req-" + std::to_string(i);
    json reply = PushMinimal(R"({"op":"create","name":")" + name +
                                 R"(","dtype":"f32","shape":[2],"device":"cpu","node":")" + b +
                                 R"(","req":")" + req + R"("})",
                             req);
    ASSERT_EQ(reply["ok"], true) << reply.dump();
    EXPECT_EQ(HashField(name, "node"), b);
    EXPECT_EQ(HashField(name, "owner"), Instance(b));
  }
  EXPECT_NE(Log(a).find("forwarded_to=" + b), std::string::npos)
      << "both servers take from the shared queue";
  // Without a node, the server that takes it makes it on its own node.
  json anywhere = PushMinimal(
      R"({"op":"create","name":"anywhere","dtype":"u8","shape":[1],"device":"cpu","req":"any"})",
      "any");
  ASSERT_EQ(anywhere["ok"], true) << anywhere.dump();
  std::string node = HashField("anywhere", "node");
  EXPECT_TRUE(node == a || node == b) << node;
  EXPECT_EQ(HashField("anywhere", "owner"), Instance(node));
  // A node with no live server: a clear error, nothing made.
  json ghost = PushMinimal(
      R"({"op":"create","name":"g","dtype":"u8","shape":[1],"device":"cpu","node":"ghost","req":"gh"})",
      "gh");
  EXPECT_EQ(ghost["ok"], false);
  EXPECT_EQ(ghost["error"]["code"], "wrong_node");
  EXPECT_NE(ghost["error"]["message"].get<std::string>().find("'ghost', which has no live server"),
            std::string::npos);
  EXPECT_EQ(HashField("g", "state"), "");
  auto conn = redis_.Connect();
  for (const std::string& list : {keys_.queue, keys_.NodeQueue(a), keys_.NodeQueue(b),
                                  keys_.Processing(a), keys_.Processing(b)}) {
    EXPECT_EQ(conn->Command({"LLEN", list})->integer, 0) << list;
  }
}

TEST_F(Nodes, EightServersOnOneRedisEachKeepToTheirNode) {
  constexpr int kNodes = 8, kEach = 4;
  for (int i = 0; i < kNodes; ++i) Serve(Node(i));
  auto servers = Tool("mcd-ls", {"--servers", "-q"});
  EXPECT_EQ(servers.exit_code, 0);
  for (int i = 0; i < kNodes; ++i)
    EXPECT_NE(servers.out.find(Node(i) + "\n"), std::string::npos) << servers.out;
  // Every node's tools at once, each making tensors on its own node.
  std::vector<std::unique_ptr<test::Background>> shells;
  for (int i = 0; i < kNodes; ++i) {
    std::string script;
    for (int k = 0; k < kEach; ++k) {
      script += test::ToolPath("mcd-create") + " t" + std::to_string(i) + "." + std::to_string(k) +
                " --dtype u8 --shape 8 --device cpu -q --node " + Node(i) + " || exit 1; ";
    }
    shells.push_back(
        std::make_unique<test::Background>(std::vector<std::string>{"/bin/sh", "-c", script}, Env(),
                                           dir_.path() + "/shell" + std::to_string(i) + ".log"));
  }
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_EQ(shells[i]->Wait(60), 0)
        << test::ReadFile(dir_.path() + "/shell" + std::to_string(i) + ".log");
  }
  auto listed = Tool("mcd-ls", {"--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  json records = json::parse(listed.out);
  EXPECT_EQ(records.size(), static_cast<size_t>(kNodes * kEach));
  for (const json& r : records) {
    std::string name = r["name"];
    int i = std::stoi(name.substr(1, name.find('.') - 1));
    EXPECT_EQ(r["node"], Node(i)) << name;
    EXPECT_EQ(HashField(name, "owner"), Instance(Node(i))) << name;
  }
  for (int i = 0; i < kNodes; ++i) {
    auto one = Tool("mcd-ls", {"-q", "--node", Node(i)});
    EXPECT_EQ(std::count(one.out.begin(), one.out.end(), '\n'), kEach) << one.out;
    // Removed through their own node; a wrong node is refused.
    std::vector<std::string> names;
    for (int k = 0; k < kEach; ++k)
      names.push_back("t" + std::to_string(i) + "." + std::to_string(k));
    auto wrong = Tool("mcd-rm", {names[0], "--node", Node((i + 1) % kNodes)});
    EXPECT_EQ(wrong.exit_code, 64) << wrong.err;
    names.insert(names.end(), {"--node", Node(i), "-q"});
    EXPECT_EQ(Tool("mcd-rm", names).exit_code, 0);
  }
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "");
}

}  // namespace
}  // namespace mcd
