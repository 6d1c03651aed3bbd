// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// ReconcileNode (server/startup.h) over hashes planted in a real redis-server: a starting server
// removes its node's tensors of dead instances, their own shm objects, and the sockets dead
// instances left, and nothing else.
#include "server/startup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "memcuda/protocol.h"
#include "memcuda/unique_fd.h"
#include "test_support.h"

namespace mcd {
namespace {

const std::string kLive = "aaaaaaaaaaaaaaaa";
const std::string kDead = "bbbbbbbbbbbbbbbb";

bool ShmExists(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

void MakeShm(const std::string& name) {
  int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
  close(fd);
}

// A Unix socket file at `path`; listening when `listen_on` (returned open), else closed at once,
// which leaves the file with nobody behind it, as a SIGKILLed server does.
UniqueFd MakeSocket(const std::string& path, bool listen_on) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
  if (listen_on) EXPECT_EQ(listen(fd.get(), 4), 0);
  if (!listen_on) fd.reset();
  return fd;
}

class StartupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    opt_.node = "n1";
    opt_.keys.prefix = "unit";
    shm_prefix_ = ShmPrefix("unit" + std::to_string(getpid()), "n1");
    conn_ = redis_.Connect();
  }
  void TearDown() override {
    for (const char* suffix : {"a", "orphan"}) shm_unlink((shm_prefix_ + suffix).c_str());
  }
  void Plant(const std::string& name, const std::string& node, const std::string& owner,
             const std::string& state = "ready", const std::string& shm = "") {
    std::vector<std::string> command = {
        "HSET", opt_.keys.Tensor(name), "node", node, "owner", owner, "state", state};
    if (!shm.empty()) {
      command.insert(command.end(),
                     {"ipc_kind", IpcKindName(IpcKind::kHostShm), "ipc_handle", shm});
    }
    ASSERT_TRUE(conn_->Command(std::vector<std::string_view>(command.begin(), command.end())).ok());
  }
  bool Exists(const std::string& name) {
    return conn_->Command({"EXISTS", opt_.keys.Tensor(name)})->integer == 1;
  }

  test::RedisServer redis_;
  test::TempDir dir_;
  ReconcileOptions opt_{KeySpace{}, "", 10000};  // events written, as a server's default
  std::string shm_prefix_;
  std::unique_ptr<RedisConnection> conn_;
};

TEST_F(StartupTest, RemovesOnlyThisNodesTensorsOfDeadInstancesWithTheirEvents) {
  MakeShm(shm_prefix_ + "a");
  MakeShm(shm_prefix_ + "orphan");
  Plant("a", "n1", kDead, "ready", shm_prefix_ + "a");
  Plant("mine", "n1", kLive);
  Plant("other_node", "n2", kDead);
  Plant("unpublished", "n1", kDead, "creating");
  // An object outside this node's naming is never unlinked on a hash's word.
  Plant("planted", "n1", kDead, "ready", "/not-memcuda");
  ASSERT_TRUE(conn_->Command({"LPUSH", opt_.keys.Processing("n1"), "cmd"}).ok());

  Status reconciled = ReconcileNode(*conn_, opt_, kLive, shm_prefix_, "");
  ASSERT_TRUE(reconciled.ok()) << reconciled.ToString();
  EXPECT_FALSE(Exists("a"));
  EXPECT_FALSE(Exists("unpublished"));
  EXPECT_FALSE(Exists("planted"));
  EXPECT_TRUE(Exists("mine"));
  EXPECT_TRUE(Exists("other_node"));
  EXPECT_FALSE(ShmExists(shm_prefix_ + "a"));
  EXPECT_FALSE(ShmExists(shm_prefix_ + "orphan"));
  // A reclaim event for each published tensor removed, none for the one still being created.
  auto events = conn_->Command({"XRANGE", opt_.keys.Events(), "-", "+"});
  ASSERT_TRUE(events.ok());
  std::vector<std::string> named;
  for (const RedisValue& entry : events->elements) {
    const auto& fields = entry.elements.at(1).elements;
    std::map<std::string, std::string> f;
    for (size_t i = 0; i + 1 < fields.size(); i += 2) f[fields[i].str] = fields[i + 1].str;
    EXPECT_EQ(f["event"], "reclaim");
    EXPECT_EQ(f["reason"], "server_lost");
    EXPECT_EQ(f["node"], "n1");
    named.push_back(f["name"]);
  }
  std::sort(named.begin(), named.end());
  EXPECT_EQ(named, (std::vector<std::string>{"a", "planted"}));
  // The processing list is left for the serving loop to resume.
  EXPECT_EQ(conn_->Command({"LLEN", opt_.keys.Processing("n1")})->integer, 1);
}

TEST_F(StartupTest, RemovesTheSocketsOfDeadInstancesOnly) {
  const std::string dir = dir_.path();
  auto path = [&](const char* kind, const std::string& node, const std::string& instance) {
    return dir + "/" + SocketFileName(kind, node, instance);
  };
  MakeSocket(path("cmd", "n1", kDead), false);
  MakeSocket(path("pool", "n1", kDead), false);
  UniqueFd live = MakeSocket(path("cmd", "n1", "cccccccccccccccc"), true);  // another live server
  MakeSocket(path("cmd", "n1", kLive), false);  // this instance's own name
  MakeSocket(path("cmd", "n2", kDead), false);  // another node's
  EXPECT_EQ(RemoveDeadSockets(dir, "n1", kLive), 2);
  EXPECT_NE(access(path("cmd", "n1", kDead).c_str(), F_OK), 0);
  EXPECT_NE(access(path("pool", "n1", kDead).c_str(), F_OK), 0);
  EXPECT_EQ(access(path("cmd", "n1", "cccccccccccccccc").c_str(), F_OK), 0);
  EXPECT_EQ(access(path("cmd", "n1", kLive).c_str(), F_OK), 0);
  EXPECT_EQ(access(path("cmd", "n2", kDead).c_str(), F_OK), 0);
}

TEST(Startup, SocketAndShmNamesAreSafeAndCut) {
  EXPECT_EQ(SocketFileName("cmd", "gpu-host.7", "ab12"), "cmd-gpu_host_7-ab12.sock");
  EXPECT_EQ(SocketFileName("pool", std::string(60, 'x'), "i"),
            "pool-" + std::string(40, 'x') + "-i.sock");
  EXPECT_EQ(ShmPrefix("mcd", "host/1 a"), "/mcd-mcd-host_1_a-");
}

}  // namespace
}  // namespace mcd
