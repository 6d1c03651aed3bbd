// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The trust model (memcuda(7), TRUST), tried as its attackers would: a second local user, and
// anyone who can write to Redis. Each test is the attack that found a hole, against the fix
// that closes it. The tests that act as another user need root (as CI runs them) to become
// uid 65534; they are reported skipped otherwise.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "lifecycle_fixture.h"
#include "memcuda/memcuda.h"
#include "test_support.h"

namespace mcd {
namespace {

constexpr uid_t kOtherUser = 65534;  // nobody

#define NEEDS_ROOT() \
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as a second user"

// In a forked child, before anything else: become the other user, a member of `groups` only.
std::function<void()> AsOtherUser(std::vector<gid_t> groups = {}) {
  return [groups] {
    if (setgroups(groups.size(), groups.data()) != 0 || setgid(kOtherUser) != 0 ||
        setuid(kOtherUser) != 0) {
      _exit(126);
    }
  };
}

test::RedisServerOptions TcpRedis(std::vector<std::string> extra = {}) {
  test::RedisServerOptions options;
  options.tcp = true;  // the other user cannot enter the folder of a Unix socket
  options.extra = std::move(extra);
  return options;
}

// A .npy file of 16 bytes of u8 that spell a secret.
std::string WriteSecretNpy(const std::string& path) {
  std::string header = "{'descr': '|u1', 'fortran_order': False, 'shape': (16,), }";
  header += std::string(64 - (10 + header.size() + 1) % 64, ' ') + "\n";
  std::ofstream out(path, std::ios::binary);
  out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size()) << '\x00' << header
      << "SECRET-SECRET-16";
  return path;
}

class Trust : public Lifecycle {
 protected:
  explicit Trust(std::vector<std::string> redis_config = {})
      : Lifecycle(TcpRedis(std::move(redis_config))) {}

  void SetUp() override {
    Lifecycle::SetUp();
    chmod(open_.path().c_str(), 0777);  // where the other user may put things
  }

  // A heartbeat for `node` written by hand, with the TTL a server's heartbeat has.
  void PlantHeartbeat(const std::string& node, const std::vector<std::string>& fields) {
    std::vector<std::string> args = {"HSET",  keys_.Server(node), "node", node,
                                     "queue", keys_.queue};
    args.insert(args.end(), fields.begin(), fields.end());
    auto conn = redis_.Connect();
    ASSERT_TRUE(conn->Command(std::vector<std::string_view>(args.begin(), args.end())).ok());
    ASSERT_TRUE(conn->Command({"EXPIRE", keys_.Server(node), "60"}).ok());
  }

  std::string OurCommandSocket() {
    return redis_.Connect()->Command({"HGET", keys_.Server(node_), "command_socket"})->str;
  }

  test::TempDir open_;
};

// Another user's Unix socket, named by a forged heartbeat: the victim's create stops before it
// sends a byte (the attacker's server used to receive the file), whoever runs the socket.
TEST_F(Trust, AForgedHeartbeatCannotPointAClientAtAnotherUsersSocket) {
  NEEDS_ROOT();
  std::string evil = open_.path() + "/evil.sock";
  std::string captured = open_.path() + "/captured";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t attacker = fork();
  if (attacker == 0) {
    AsOtherUser()();
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, evil.c_str(), sizeof(addr.sun_path) - 1);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 8) != 0)
      _exit(2);
    chmod(evil.c_str(), 0777);
    (void)!write(ready[1], "r", 1);
    std::ofstream out(captured, std::ios::binary);
    for (;;) {  // keeps whatever comes, until killed
      int conn = accept(fd, nullptr, nullptr);
      char buf[4096];
      for (ssize_t n; (n = read(conn, buf, sizeof(buf))) > 0;) out.write(buf, n), out.flush();
      close(conn);
    }
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  std::string forged = node_ + "-forged";
  PlantHeartbeat(forged,
                 {"instance", "evil", "pid", std::to_string(attacker), "command_socket", evil});
  std::string secret = WriteSecretNpy(dir_.path() + "/secret.npy");
  auto created = test::Run({test::ToolPath("mcd-create"), "s", "--from", secret, "--device", "cpu",
                            "--node", forged, "--timeout-ms", "2000"},
                           Env());
  kill(attacker, SIGKILL);
  waitpid(attacker, nullptr, 0);
  EXPECT_EQ(created.exit_code, 69) << created.err;
  EXPECT_NE(created.err.find("uid 65534"), std::string::npos) << created.err;
  EXPECT_NE(created.err.find("MCD_TRUSTED_USERS"), std::string::npos) << created.err;
  EXPECT_EQ(test::ReadFile(captured), "") << "the attacker's socket received the command";
}

// A forged heartbeat naming a real server's socket under another pid: refused as stale or
// forged, so a client cannot be sent to a server that is not the node's.
TEST_F(Trust, AHeartbeatWhoseProcessIsNotTheSocketsServerIsRefused) {
  std::string forged = node_ + "-forged";
  PlantHeartbeat(forged, {"instance", "old", "pid", "1", "command_socket", OurCommandSocket()});
  auto created = test::Run({test::ToolPath("mcd-create"), "x", "--dtype", "u8", "--shape", "4",
                            "--device", "cpu", "--node", forged},
                           Env());
  EXPECT_EQ(created.exit_code, 69) << created.err;
  EXPECT_NE(created.err.find("not by the server process the node's heartbeat names (pid 1)"),
            std::string::npos)
      << created.err;
  EXPECT_TRUE(TensorKeys().empty());
}

// A hash rewritten to name another user's shared-memory object: the client refuses to map it,
// so it neither reads what that user planted nor writes into it.
TEST_F(Trust, AHashCannotSendAClientIntoAnotherUsersSharedMemory) {
  NEEDS_ROOT();
  ASSERT_EQ(Tool("mcd-create", {"t", "--dtype", "u8", "--shape", "16", "--device", "cpu", "-q"})
                .exit_code,
            0);
  std::string evil = "/evil-" + std::to_string(getpid());
  pid_t attacker = fork();
  if (attacker == 0) {
    AsOtherUser()();
    int fd = shm_open(evil.c_str(), O_CREAT | O_RDWR, 0666);
    _exit(fd >= 0 && ftruncate(fd, 4096) == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(attacker, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::string real = HashField("t", "ipc_handle");
  ASSERT_TRUE(redis_.Connect()->Command({"HSET", keys_.Tensor("t"), "ipc_handle", evil}).ok());
  auto got = Tool("mcd-get", {"t", "-o", dir_.path() + "/out.npy", "--detached"});
  EXPECT_EQ(got.exit_code, 69) << got.err;
  EXPECT_NE(got.err.find("shared-memory object " + evil + " belongs to"), std::string::npos)
      << got.err;
  EXPECT_NE(got.err.find("uid 65534"), std::string::npos) << got.err;
  shm_unlink(evil.c_str());
  ASSERT_TRUE(redis_.Connect()->Command({"HSET", keys_.Tensor("t"), "ipc_handle", real}).ok());
}

// No field of a tensor hash, which anyone with Redis credentials may write, makes a client
// touch memory outside the tensor's object: each bad one is refused as an unexpected reply
// (76) by the C++ client, the C ABI and mcd-get alike, the reference taken is given back, and
// the tensor's bytes are untouched.
TEST_F(Trust, NoHashFieldCanSendAClientOutsideItsMapping) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  CreateSpec spec = HostSpec("t");
  spec.shape = {4096};
  auto created = client->Create(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::string data = test::RandomBytes(4096, 40);
  {
    auto view = client->Get("t");
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    std::memcpy(view->data, data.data(), data.size());
    ASSERT_TRUE(client->Release("t").ok());
  }
  mcd_client* c_client = nullptr;
  ASSERT_EQ(mcd_connect(redis_.url().c_str(), node_.c_str(), 5000, &c_client), 0);
  struct Edit {
    const char* field;
    std::string value;
    const char* says;
  };
  const std::vector<Edit> edits = {
      {"offset", "18446744073709551608",
       "says \"offset\" 18446744073709551608, which with its 4096 bytes ends past"},
      {"offset", "9223372036854771712", "ends past 2^63 - 1"},
      {"offset", "18446744073709547520", "ends past 2^63 - 1"},
      {"offset", "4096", "is smaller than the tensor it should hold"},
      {"offset", "1", "is smaller than the tensor it should hold"},
      {"bytes", "18446744073709551615", "which its shape and dtype do not make"},
      {"device", "3", "says \"device\" 3, which is not cpu (-1) for ipc_kind host_shm"},
      {"device", "-2", "says \"device\" -2"},
      {"ipc_kind", "cuda_ipc", "says \"device\" -1, which is not a GPU ordinal"},
      {"ipc_handle", "/../../dev/zero", "which names no shared-memory object"},
      {"ipc_handle", "", "but a ready tensor has a handle"},
      {"ipc_handle", "/a\x1b[2Jb", "which names no shared-memory object"},
  };
  for (const Edit& edit : edits) {
    SCOPED_TRACE(std::string(edit.field) + "=" + edit.value);
    std::string before = HashField("t", edit.field);
    auto conn = redis_.Connect();
    ASSERT_TRUE(conn->Command({"HSET", keys_.Tensor("t"), edit.field, edit.value}).ok());
    auto got = client->Get("t");
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), ErrorCode::kUnexpectedReply) << got.status().ToString();
    EXPECT_NE(got.status().message().find(edit.says), std::string::npos) << got.status().ToString();
    mcd_tensor tensor{};
    int32_t code = mcd_get(c_client, "t", &tensor);
    EXPECT_STREQ(mcd_error_name(code), "unexpected_reply") << mcd_last_error(c_client);
    EXPECT_EQ(tensor.data, nullptr);
    auto tool = Tool("mcd-get", {"t", "--print", "2"});
    EXPECT_EQ(tool.exit_code, 76) << tool.err;
    EXPECT_NE(tool.err.find(edit.says), std::string::npos) << tool.err;
    EXPECT_EQ(HashField("t", "refcount"), "1");
    ASSERT_TRUE(conn->Command({"HSET", keys_.Tensor("t"), edit.field, before}).ok());
  }
  mcd_disconnect(c_client);
  auto view = client->Get("t");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(std::string(static_cast<const char*>(view->data), data.size()), data);
  ASSERT_TRUE(client->Release("t").ok());
}

// The server's sockets serve its user, root and the members of --pool-group; the Redis ACL has
// no say there. A member of the group creates through the socket; another user's tool cannot
// connect to it (and, with no queue that a server reads, gets nothing done). Host tensors are
// the group's as the sockets are: a member reads every byte the server's user wrote, another
// user cannot open them.
TEST_F(Trust, TheCommandSocketServesTheServersUserRootAndItsGroupOnly) {
  NEEDS_ROOT();
  group* users = getgrnam("users");
  ASSERT_NE(users, nullptr) << "Debian has a group 'users'";
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  std::string socket = open_.path() + "/cmd.sock";
  StartServer({"--pool-group", "users", "--command-socket", socket});
  struct stat st {};
  ASSERT_EQ(stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, users->gr_gid);
  auto create_as = [&](const std::string& name, std::vector<gid_t> groups) {
    // A queue no server reads: only the socket can get the create done.
    return test::Run(
        {test::ToolPath("mcd-create"), name, "--dtype", "u8", "--shape", "4", "--device", "cpu",
         "--node", node_, "--queue", "nowhere", "--timeout-ms", "1500"},
        Env(), 30, AsOtherUser(groups));
  };
  auto member = create_as("by-member", {users->gr_gid});
  EXPECT_EQ(member.exit_code, 0) << member.err;
  auto stranger = create_as("by-stranger", {});
  EXPECT_EQ(stranger.exit_code, 75) << stranger.err;
  EXPECT_EQ(HashField("by-member", "state"), "ready");
  EXPECT_EQ(HashField("by-stranger", "state"), "");
  ASSERT_TRUE(redis_.Connect()->Command({"DEL", "nowhere:" + node_}).ok());
  ASSERT_EQ(Tool("mcd-rm", {"by-member", "--detached"}).exit_code, 0);

  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  CreateSpec spec = HostSpec("shared");
  spec.shape = {4096};
  ASSERT_TRUE(client->Create(spec).ok());
  auto view = client->Get("shared");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  const std::string data = test::RandomBytes(4096, 61);
  std::memcpy(view->data, data.data(), data.size());
  const std::string held = HashField("shared", "refcount");
  struct stat shm {};
  ASSERT_EQ(stat(("/dev/shm" + HashField("shared", "ipc_handle")).c_str(), &shm), 0);
  EXPECT_EQ(shm.st_mode & 0777, 0660u);
  EXPECT_EQ(shm.st_gid, users->gr_gid);
  auto read_as = [&](const std::string& out, std::vector<gid_t> groups, bool take_reference) {
    std::vector<std::string> argv = {
        test::ToolPath("mcd-get"), "shared", "-o", out, "--node", node_, "--timeout-ms", "1500"};
    if (!take_reference) argv.push_back("--no-ref");
    return test::Run(argv, Env(), 30, AsOtherUser(groups));
  };
  const std::string out = open_.path() + "/shared.bin";
  auto read = read_as(out, {users->gr_gid}, false);
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_TRUE(test::ReadFile(out) == data) << "the member read other bytes";
  // The stranger's reference (for its parent, as a user's mcd-get takes) goes back with the
  // refused open.
  auto refused = read_as(open_.path() + "/stranger.bin", {}, true);
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_NE(refused.err.find("ermission denied"), std::string::npos) << refused.err;
  EXPECT_EQ(HashField("shared", "refcount"), held)
      << "a refused open gave its reference back: " << refused.err;
}

// A heartbeat anyone wrote to Redis cannot keep a node from being served: one without the TTL
// that every server's write sets, one that expires later than any server's, one naming a
// process that does not run as named, or a live process that is not that instance's server.
TEST_F(Trust, AHeartbeatPlantedInRedisDoesNotKeepTheNodeFromBeingServed) {
  auto conn = redis_.Connect();
  const std::string pid_space = conn->Command({"HGET", keys_.Server(node_), "pid_space"})->str;
  ASSERT_FALSE(pid_space.empty());
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  ASSERT_TRUE(conn->Command({"HSET", keys_.Server(node_), "instance", "planted", "pid", "1"}).ok());
  StartServer();
  EXPECT_NE(ServeLog().find("(instance planted) has no expiry"), std::string::npos) << ServeLog();
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  // pid 1 runs, but not since the start time named (one past its own: in a container, pid 1 may
  // well have started at any small tick).
  std::string stat = test::ReadFile("/proc/1/stat");
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  const std::string wrong_start = std::to_string(std::stoull(field) + 1);
  ASSERT_TRUE(conn->Command({"HSET", keys_.Server(node_), "instance", "planted2", "pid", "1",
                             "pid_start", wrong_start})
                  .ok());
  ASSERT_TRUE(conn->Command({"EXPIRE", keys_.Server(node_), "600"}).ok());
  StartServer();
  EXPECT_NE(ServeLog().find("(instance planted2) names pid 1 started at " + wrong_start +
                            ", which is not running"),
            std::string::npos)
      << ServeLog();
  // pid 1 as it runs, in this PID namespace, with an expiry a server could have set: a live
  // process, but not a server of that instance.
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  const std::string right_start = std::to_string(std::stoull(field));
  ASSERT_TRUE(conn->Command({"HSET", keys_.Server(node_), "instance", "planted3", "pid", "1",
                             "pid_start", right_start, "pid_space", pid_space})
                  .ok());
  ASSERT_TRUE(conn->Command({"EXPIRE", keys_.Server(node_), "600"}).ok());
  StartServer();
  EXPECT_NE(
      ServeLog().find(
          "(instance planted3) names pid 1, which runs but is no server of instance planted3"),
      std::string::npos)
      << ServeLog();
  // From a PID namespace this host cannot look into, with an expiry no server sets.
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  ASSERT_TRUE(conn->Command({"HSET", keys_.Server(node_), "instance", "planted4", "pid", "1",
                             "pid_start", right_start, "pid_space", "elsewhere/1"})
                  .ok());
  ASSERT_TRUE(conn->Command({"EXPIRE", keys_.Server(node_), std::to_string(100 * 24 * 3600)}).ok());
  StartServer();
  EXPECT_TRUE(std::regex_search(
      ServeLog(),
      std::regex(
          R"(\(instance planted4\) expires in 86[0-9]{5} s, later than any server's heartbeat)")))
      << ServeLog();
  // A live server's heartbeat still keeps a second one out.
  auto second =
      test::Run({test::ToolPath("mcd-serve"), "--devices", "cpu", "--node", node_}, Env(), 30);
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find("already serves node"), std::string::npos) << second.err;
}

// A reply key cannot be written ahead of the request: a req carries 128 random bits, new for
// every process.
TEST_F(Trust, RequestIdsCannotBeGuessedAhead) {
  via_queue_ = true;
  kill(server_->pid(), SIGSTOP);  // the command stays in the queue to be read
  std::vector<std::string> reqs;
  for (int i = 0; i < 2; ++i) {
    test::Background tool(
        {test::ToolPath("mcd-create"), "g" + std::to_string(i), "--dtype", "u8", "--shape", "4",
         "--device", "cpu", "--node", node_, "--timeout-ms", "3000"},
        Env(), dir_.path() + "/tool.log");
    std::string body;
    ASSERT_TRUE(test::WaitFor(
        [&] {
          // In the queue, or in the processing list when the server's take was blocked in Redis
          // as it stopped.
          for (const std::string& list : {keys_.NodeQueue(node_), keys_.Processing(node_)}) {
            auto queued = redis_.Connect()->Command({"LINDEX", list, "0"});
            body = queued.ok() && !queued->is_nil() ? queued->str : "";
            if (!body.empty()) return true;
          }
          return false;
        },
        3000))
        << test::ReadFile(dir_.path() + "/tool.log");
    ASSERT_FALSE(body.empty()) << test::ReadFile(dir_.path() + "/tool.log");
    reqs.push_back(json::parse(body)["req"].get<std::string>());
    EXPECT_EQ(tool.Stop(SIGKILL), -SIGKILL);
    ASSERT_TRUE(redis_.Connect()
                    ->Command({"DEL", keys_.queue, keys_.NodeQueue(node_), keys_.Processing(node_)})
                    .ok());
  }
  kill(server_->pid(), SIGCONT);
  std::regex form(".*-[0-9]+-([0-9a-f]{32})");
  std::smatch first, second;
  ASSERT_TRUE(std::regex_match(reqs[0], first, form)) << reqs[0];
  ASSERT_TRUE(std::regex_match(reqs[1], second, form)) << reqs[1];
  EXPECT_NE(first[1].str(), second[1].str());
}

// Idle connections cannot take the server from others: under a limit of 64 descriptors, 100
// connections that say nothing leave creates working (those past the socket's bound go through
// the queue) and the server idle, not spinning on connections it cannot take.
TEST_F(Trust, IdleConnectionsCannotStopTheServerNorMakeItSpin) {
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  std::vector<std::string> argv = {
      "prlimit", "--nofile=64:64", "--",  test::ToolPath("mcd-serve"), "--devices",
      "cpu",     "--node",         node_, "--heartbeat-ttl",           "3"};
  size_t started = Count(ServeLog(), "serving node");
  server_ = std::make_unique<test::Background>(argv, Env(), dir_.path() + "/serve.log");
  ASSERT_TRUE(test::WaitFor([&] { return Count(ServeLog(), "serving node") > started; }, 10000))
      << ServeLog();
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(ConnectCommandSocket());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto cpu_ticks = [&] {
    std::ifstream stat("/proc/" + std::to_string(server_->pid()) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    std::istringstream fields(text.substr(text.rfind(')') + 2));
    std::string f;
    long ticks = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i) {
      if (i == 14 || i == 15) ticks += std::stol(f);  // utime, stime
    }
    return ticks;
  };
  long before = cpu_ticks();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LT(cpu_ticks() - before, sysconf(_SC_CLK_TCK) / 5)
      << "the server spins with idle connections open";
  for (int i = 0; i < 3; ++i) {
    auto created = Tool("mcd-create", {"c" + std::to_string(i), "--dtype", "u8", "--shape", "4",
                                       "--device", "cpu", "-q"});
    EXPECT_EQ(created.exit_code, 0) << created.err << ServeLog();
  }
  EXPECT_NE(ServeLog().find("command socket: turning new connections away"), std::string::npos)
      << ServeLog();
  for (int fd : idle) close(fd);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(Tool("mcd-rm", {"c" + std::to_string(i), "--detached"}).exit_code, 0);
}

// Tenants of one Redis kept apart by ACL users with their own key prefixes: alice's server and
// tools work with her user alone; bob's credentials neither see nor change her tensors, and are
// told why.
class Tenants : public Trust {
 protected:
  // The ACL of memcuda(7)'s shared deployment (TRUST): each tenant's keys, and every command
  // but those that act on other connections or on all of Redis.
  static std::string Acl(const std::string& tenant) {
    return "user " + tenant + " on >" + tenant + "-pw ~" + tenant +
           ":* resetchannels -@all +@all -@dangerous -script|flush -script|kill -function";
  }
  Tenants() : Trust({Acl("alice"), Acl("bob")}) {}

  std::string UrlOf(const std::string& userinfo) const {
    return "redis://" + userinfo + "@" + redis_.url().substr(std::strlen("redis://"));
  }
  std::vector<std::string> TenantFlags(const std::string& tenant) const {
    return {"--prefix", tenant, "--queue", tenant + ":lifecycle", "--node", node_ + "-" + tenant};
  }
  test::ProcessResult As(const std::map<std::string, std::string>& env, const std::string& tool,
                         std::vector<std::string> args, const std::string& tenant = "alice") {
    std::vector<std::string> argv = {test::ToolPath(tool)};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const std::string& flag : TenantFlags(tenant)) argv.push_back(flag);
    return test::Run(argv, env);
  }
};

TEST_F(Tenants, AnAclUserConfinedToItsPrefixCannotSeeInsideNorChangeAnotherTenant) {
  // Alice's password from a file, as a service manager hands out credentials.
  std::string password_file = dir_.path() + "/alice.pw";
  std::ofstream(password_file) << "alice-pw\n";
  std::map<std::string, std::string> alice = {
      {"MCD_REDIS_URL", UrlOf("alice:")},  // a user, no password
      {"MCD_REDIS_PASSWORD_FILE", password_file}};
  std::vector<std::string> serve = {test::ToolPath("mcd-serve"), "--devices", "cpu",
                                    "--heartbeat-ttl", "3"};
  for (const std::string& flag : TenantFlags("alice")) serve.push_back(flag);
  test::Background server(serve, alice, dir_.path() + "/alice-serve.log");
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return test::ReadFile(dir_.path() + "/alice-serve.log").find("serving node") !=
               std::string::npos;
      },
      10000))
      << test::ReadFile(dir_.path() + "/alice-serve.log");
  auto created =
      As(alice, "mcd-create", {"a1", "--dtype", "u8", "--shape", "4", "--device", "cpu", "-q"});
  ASSERT_EQ(created.exit_code, 0) << created.err
                                  << test::ReadFile(dir_.path() + "/alice-serve.log");
  auto got = As(alice, "mcd-get", {"a1", "--detached", "--json"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(json::parse(got.out)["refcount"], 2);
  auto listed = As(alice, "mcd-ls", {"--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(json::parse(listed.out).size(), 1u);

  // Bob, with his own credentials on the command line, aimed at alice's keys.
  std::map<std::string, std::string> bob = {{"MCD_REDIS_URL", ""}};
  std::string bob_url = UrlOf("bob:bob-pw");
  for (const char* tool : {"mcd-ls", "mcd-rm", "mcd-get"}) {
    std::vector<std::string> args = {"--redis-url", bob_url};
    if (std::string(tool) != "mcd-ls") args.insert(args.begin(), "a1");
    auto refused = As(bob, tool, args);
    EXPECT_EQ(refused.exit_code, 69) << tool << ": " << refused.err;
    EXPECT_NE(refused.err.find("NOPERM"), std::string::npos) << tool << ": " << refused.err;
    EXPECT_NE(refused.err.find("warning: a password on the command line"), std::string::npos)
        << refused.err;
  }
  // Nor can he push onto her queue.
  auto as_bob = RedisConnection::Connect(RedisUrl::Parse(bob_url).value(), RedisOptions{});
  ASSERT_TRUE(as_bob.ok()) << as_bob.status().ToString();
  auto pushed = (*as_bob)->Command({"LPUSH", "alice:lifecycle", R"({"op":"delete","name":"a1"})"});
  EXPECT_EQ(pushed.status().code(), ErrorCode::kPermissionDenied) << pushed.status().ToString();
  // In his own prefix, he sees nothing of hers.
  auto own = As(bob, "mcd-ls", {"--redis-url", bob_url, "--json"}, "bob");
  EXPECT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(json::parse(own.out).size(), 0u);
  // Hers is untouched.
  got = As(alice, "mcd-ls", {"--json"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(json::parse(got.out)[0]["refcount"], 2);
  EXPECT_EQ(As(alice, "mcd-rm", {"a1", "--detached"}).exit_code, 0);
  EXPECT_EQ(As(alice, "mcd-rm", {"a1", "--detached"}).exit_code, 0);
  EXPECT_EQ(server.Stop(SIGTERM), 0) << test::ReadFile(dir_.path() + "/alice-serve.log");
}

// Two tenants of one Redis, each with its server, as memcuda(7) recommends: bob, with every
// command his ACL allows, cannot touch alice's calls. While he tries, from his own connection,
// to wake, kill, list or pause her connections, flush the scripts, or write into her queue, her
// server or her keys, every try is refused; her wait and her watch go on, her creates through
// the socket and the queue succeed, those through the socket without waiting out the server's
// blocking take (which a wake the ACL refused would cost), and every tensor has its bytes.
TEST_F(Tenants, ATenantCannotBreakAnothersWaitsWatchesCreatesOrIntake) {
  std::map<std::string, std::string> alice = {{"MCD_REDIS_URL", UrlOf("alice:alice-pw")}};
  std::map<std::string, std::string> bob = {{"MCD_REDIS_URL", UrlOf("bob:bob-pw")}};
  auto with = [&](std::vector<std::string> argv, const std::string& tenant) {
    argv[0] = test::ToolPath(argv[0]);
    for (const std::string& flag : TenantFlags(tenant)) argv.push_back(flag);
    return argv;
  };
  std::vector<std::unique_ptr<test::Background>> servers;
  for (const auto& [tenant, env] :
       {std::pair{std::string("alice"), alice}, std::pair{std::string("bob"), bob}}) {
    std::string log = dir_.path() + "/" + tenant + "-serve.log";
    servers.push_back(std::make_unique<test::Background>(
        with({"mcd-serve", "--devices", "cpu", "--heartbeat-ttl", "3"}, tenant), env, log));
    ASSERT_TRUE(test::WaitFor(
        [&] { return test::ReadFile(log).find("serving node") != std::string::npos; }, 10000))
        << test::ReadFile(log);
  }
  std::string alice_log = dir_.path() + "/alice-serve.log";
  test::Background watch(with({"mcd-ls", "--watch", "--json"}, "alice"), alice,
                         dir_.path() + "/watch.log");
  std::string awaited = test::RandomBytes(100000, 7);
  std::ofstream(dir_.path() + "/w.npy", std::ios::binary) << test::U8Npy(awaited);
  test::Background waiter(
      with({"mcd-get", "w", "--wait", "120", "--no-ref", "-q", "-o", dir_.path() + "/w.bin"},
           "alice"),
      alice, dir_.path() + "/waiter.log");
  ASSERT_TRUE(
      test::WaitFor([&] { return test::BlockedClients(*redis_.Connect(), "xread") >= 2; }, 20000))
      << test::ReadFile(dir_.path() + "/waiter.log") << test::ReadFile(dir_.path() + "/watch.log");

  // Bob, from his own connection, round after round until alice is done.
  std::atomic<bool> done{false};
  std::atomic<int> rounds{0};
  std::vector<std::string> let_through;  // commands of bob's that Redis did not refuse
  std::thread attacker([&] {
    auto conn =
        RedisConnection::Connect(RedisUrl::Parse(UrlOf("bob:bob-pw")).value(), RedisOptions{});
    if (!conn.ok()) return let_through.push_back("connect: " + conn.status().ToString());
    std::string node = node_ + "-alice";
    std::vector<std::vector<std::string>> refused = {
        {"CLIENT", "LIST"},
        {"CLIENT", "KILL", "USER", "alice"},
        {"CLIENT", "PAUSE", "2000"},
        {"CLIENT", "NO-EVICT", "on"},
        {"SCRIPT", "FLUSH"},
        {"SCRIPT", "KILL"},
        {"FUNCTION", "FLUSH"},
        {"FLUSHALL"},
        {"FLUSHDB"},
        {"CONFIG", "SET", "maxmemory", "1"},
        {"LPUSH", "alice:lifecycle", R"({"op":"delete","name":"t0"})"},
        {"RPUSH", "alice:lifecycle:" + node, "wake"},
        {"DEL", "alice:processing:" + node},
        {"DEL", "alice:server:" + node},
        {"XADD", "alice:events", "*", "a", "b"},
        {"HSET", "alice:tensor:{t0}", "refcount", "0"}};
    for (int id = 1; id <= 300; ++id) {
      for (const char* how : {"TIMEOUT", "ERROR"})
        refused.push_back({"CLIENT", "UNBLOCK", std::to_string(id), how});
      refused.push_back({"CLIENT", "KILL", "ID", std::to_string(id)});
    }
    // What his ACL allows, tried too: none of it reaches her connections.
    std::vector<std::vector<std::string>> allowed = {{"SCAN", "0", "COUNT", "1000"},
                                                     {"RANDOMKEY"},
                                                     {"SELECT", "0"},
                                                     {"WAIT", "0", "1"},
                                                     {"CLIENT", "INFO"}};
    while (!done) {
      for (const auto& command : refused) {
        auto reply =
            (*conn)->Command(std::vector<std::string_view>(command.begin(), command.end()));
        if (reply.status().code() != ErrorCode::kPermissionDenied)
          let_through.push_back(command[0] + " " + command[1]);
      }
      for (const auto& command : allowed) {
        (void)(*conn)->Command(std::vector<std::string_view>(command.begin(), command.end()));
      }
      ++rounds;
    }
  });
  ASSERT_TRUE(test::WaitFor([&] { return rounds >= 2; }, 20000));

  std::vector<std::string> names;
  for (int i = 0; i < 10; ++i) {
    std::string name = "t" + std::to_string(i);
    std::ofstream(dir_.path() + "/" + name + ".npy", std::ios::binary)
        << test::U8Npy(test::RandomBytes(4096 + i, i));
    auto env = alice;
    if (i % 2 == 1) env["MCD_VIA_QUEUE"] = "1";  // half through the queue, half through the socket
    auto created = test::Run(with({"mcd-create", name, "--from", dir_.path() + "/" + name + ".npy",
                                   "--device", "cpu", "-q"},
                                  "alice"),
                             env);
    EXPECT_EQ(created.exit_code, 0) << name << ": " << created.err << test::ReadFile(alice_log);
    names.push_back(name);
  }
  auto created = test::Run(
      with({"mcd-create", "w", "--from", dir_.path() + "/w.npy", "--device", "cpu", "-q"}, "alice"),
      alice);
  EXPECT_EQ(created.exit_code, 0) << created.err;
  EXPECT_EQ(waiter.Wait(60), 0) << test::ReadFile(dir_.path() + "/waiter.log");
  EXPECT_TRUE(test::ReadFile(dir_.path() + "/w.bin") == awaited) << "the wait got other bytes";
  for (int i = 0; i < 10; ++i) {
    std::string out = dir_.path() + "/" + names[i] + ".bin";
    auto got = test::Run(with({"mcd-get", names[i], "--no-ref", "-q", "-o", out}, "alice"), alice);
    EXPECT_EQ(got.exit_code, 0) << got.err;
    EXPECT_TRUE(test::ReadFile(out) == test::RandomBytes(4096 + i, i))
        << names[i] << " has other bytes";
  }
  // Alice's library client through the socket, each create after the server went back to its
  // blocking take: woken at once, not when the take times out (a second).
  ClientOptions opt;
  opt.redis_url = RedisUrl::Parse(UrlOf("alice:alice-pw")).value();
  opt.keys.prefix = "alice";
  opt.keys.queue = "alice:lifecycle";
  opt.node = node_ + "-alice";
  auto client = Client::Connect(opt);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<double> socket_ms;
  for (int i = 0; i < 9; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    auto t0 = std::chrono::steady_clock::now();
    auto made = (*client)->Create(HostSpec("lib" + std::to_string(i)));
    socket_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    EXPECT_TRUE((*client)->Release("lib" + std::to_string(i)).ok());
  }
  std::sort(socket_ms.begin(), socket_ms.end());
  EXPECT_LT(socket_ms[4], 200) << "median create through the socket " << socket_ms[4] << " ms";
  // Bob's own tensor, through his own server, all the while.
  std::ofstream(dir_.path() + "/b.npy", std::ios::binary)
      << test::U8Npy(test::RandomBytes(5000, 99));
  auto his = test::Run(
      with({"mcd-create", "b", "--from", dir_.path() + "/b.npy", "--device", "cpu", "-q"}, "bob"),
      bob);
  EXPECT_EQ(his.exit_code, 0) << his.err;
  done = true;
  attacker.join();
  EXPECT_GT(rounds.load(), 2);
  EXPECT_TRUE(let_through.empty())
      << let_through.size() << " let through, first: " << let_through[0];
  std::string watched = test::ReadFile(dir_.path() + "/watch.log");
  for (const std::string& name : names) {
    EXPECT_NE(watched.find(R"("event":"create","name":")" + name + "\""), std::string::npos)
        << name << ": " << watched;
  }
  EXPECT_TRUE(test::Running(watch.pid())) << watched;
  std::string log = test::ReadFile(alice_log);
  EXPECT_EQ(log.find("refuse"), std::string::npos) << log;
  EXPECT_EQ(log.find("error"), std::string::npos) << log;
  for (const std::string& name : names)
    EXPECT_EQ(As(alice, "mcd-rm", {name, "--detached", "-q"}).exit_code, 0);
  EXPECT_EQ(As(alice, "mcd-rm", {"w", "--detached", "-q"}).exit_code, 0);
  for (auto& server : servers) EXPECT_EQ(server->Stop(SIGTERM), 0);
  // The server's wake markers went with it.
  for (const std::string& list :
       {"alice:lifecycle:" + node_ + "-alice", "alice:processing:" + node_ + "-alice"}) {
    EXPECT_EQ(redis_.Connect()->Command({"LLEN", list})->integer, 0) << list;
  }
}

// A .npy header is checked against the file before anything is allocated: a 150-byte file that
// claims gigabytes is refused at once, by the tool, with nothing created.
TEST_F(Trust, ANpyFileThatClaimsMoreThanItHoldsIsRefusedBeforeAnyAllocation) {
  auto write = [&](const std::string& shape) {
    std::string path = dir_.path() + "/claims.npy";
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + ",), }";
    header += std::string(64 - (10 + header.size() + 1) % 64, ' ') + "\n";
    std::ofstream out(path, std::ios::binary);
    out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size()) << '\x00' << header;
    out << std::string(16, '\0');
    return path;
  };
  for (const char* shape : {"1073741824", "8589934592", "4611686018427387904"}) {
    auto t0 = std::chrono::steady_clock::now();
    auto created = Tool("mcd-create", {"big", "--from", write(shape), "--device", "cpu"});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << shape;
    EXPECT_TRUE(created.exit_code == 74 || created.exit_code == 64)
        << shape << ": " << created.exit_code << " " << created.err;
    EXPECT_TRUE(created.err.find("fewer than the") != std::string::npos ||
                created.err.find("too_large") != std::string::npos)
        << shape << ": " << created.err;
  }
  EXPECT_TRUE(TensorKeys().empty());
  EXPECT_EQ(ShmCount(), 0u);
}

// A stale hash planted in Redis cannot make a starting server unlink a shared-memory object
// that no server of its node made: the hash goes, the object stays.
TEST_F(Trust, AStaleHashCannotMakeTheServerUnlinkAnotherObject) {
  std::string victim = "/victim-" + std::to_string(getpid());
  int fd = shm_open(victim.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  ASSERT_TRUE(redis_.Connect()
                  ->Command({"HSET", keys_.Tensor("planted"), "node", node_, "owner",
                             "deadbeefdeadbeef", "ipc_kind", "host_shm", "ipc_handle", victim,
                             "state", "ready", "refcount", "1"})
                  .ok());
  StartServer();
  EXPECT_EQ(HashField("planted", "state"), "");  // a dead instance's hash: removed
  EXPECT_NE(ServeLog().find("names the shared-memory object '" + victim +
                            "', which no server of this node made"),
            std::string::npos)
      << ServeLog();
  fd = shm_open(victim.c_str(), O_RDWR, 0);
  EXPECT_GE(fd, 0) << "the server unlinked " << victim;
  if (fd >= 0) close(fd);
  shm_unlink(victim.c_str());
}

// Host objects have names nobody can guess ahead: another user who makes the names a server
// would use next does not make its creates fail.
TEST_F(Trust, HostObjectNamesCannotBeTakenAhead) {
  ASSERT_EQ(Tool("mcd-create", {"first", "--dtype", "u8", "--shape", "4", "--device", "cpu", "-q"})
                .exit_code,
            0);
  std::string handle = HashField("first", "ipc_handle");
  ASSERT_GT(handle.size(), 20u);
  std::string suffix = handle.substr(handle.size() - 17);
  EXPECT_EQ(suffix[0], '-') << handle;
  EXPECT_EQ(suffix.find_first_not_of("0123456789abcdef", 1), std::string::npos) << handle;
  // What a user who read this name would make ahead: the next sequence numbers, bare and with
  // the same suffix.
  std::string base = handle.substr(0, handle.size() - 17);
  base.erase(base.rfind('-') + 1);
  std::vector<std::string> planted;
  for (int seq = 2; seq < 12; ++seq) {
    for (const std::string& name :
         {base + std::to_string(seq), base + std::to_string(seq) + suffix}) {
      int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      ASSERT_GE(fd, 0) << name;
      close(fd);
      planted.push_back(name);
    }
  }
  for (int i = 0; i < 8; ++i) {
    auto created = Tool("mcd-create", {"next" + std::to_string(i), "--dtype", "u8", "--shape", "4",
                                       "--device", "cpu"});
    EXPECT_EQ(created.exit_code, 0) << created.err;
  }
  for (const std::string& name : planted) shm_unlink(name.c_str());
}

// A password given in --redis-url is not left for other local users to read in the process's
// command line while it runs.
TEST(RedisPassword, IsHiddenFromTheCommandLineOnceParsed) {
  test::RedisServer redis(test::RedisServerOptions{true, {"requirepass s3cret-pw"}});
  std::string url = redis.url();  // redis://127.0.0.1:PORT
  std::string with_password = "redis://:s3cret-pw@" + url.substr(std::string("redis://").size());
  test::TempDir dir;
  test::Background server({test::ToolPath("mcd-serve"), "--redis-url", with_password, "--devices",
                           "cpu", "--node", "pw" + std::to_string(getpid())},
                          {{"XDG_RUNTIME_DIR", dir.path()}}, dir.path() + "/serve.log");
  ASSERT_TRUE(test::WaitFor(
      [&] {
        return test::ReadFile(dir.path() + "/serve.log").find("serving node") != std::string::npos;
      },
      10000))
      << test::ReadFile(dir.path() + "/serve.log");
  std::string cmdline = test::ReadFile("/proc/" + std::to_string(server.pid()) + "/cmdline");
  EXPECT_EQ(cmdline.find("s3cret-pw"), std::string::npos) << cmdline;
  EXPECT_NE(cmdline.find("redis://:*********@"), std::string::npos) << cmdline;
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

}  // namespace
}  // namespace mcd
