// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Transport over a real redis-server: a command on the server's command socket (a small fake
// server in this process, or, for the owner check, in a process of another user) and on the
// lifecycle list (a fake server thread that pops it and answers): what is sent, the reply read
// back, a lost connection reported, a socket of the wrong owner refused, and a command nobody
// took withdrawn.
#include "client/transport.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "protocol/json_codec.h"
#include "test_support.h"

namespace mcd {
namespace {

// A Unix socket listening at `path`, bound and listening before the constructor returns.
int Listen(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 4) != 0) {
    return -1;
  }
  return fd;
}

// A command socket server of one connection and one command: reads a line, then answers what
// `answer` makes of it (nullopt: closes the connection instead).
class FakeCommandSocket {
 public:
  using Answer = std::function<std::optional<std::string>(const std::string& line)>;
  FakeCommandSocket(const std::string& path, Answer answer) : listener_(Listen(path)) {
    EXPECT_GE(listener_, 0) << std::strerror(errno);
    thread_ = std::thread([this, answer = std::move(answer)] { Serve(answer); });
  }
  ~FakeCommandSocket() {
    shutdown(listener_, SHUT_RDWR);  // ends an accept still waiting
    thread_.join();
    close(listener_);
  }
  // The line received, once the server is done with it.
  std::string line() {
    thread_.join();
    thread_ = std::thread([] {});
    return line_;
  }

 private:
  void Serve(const Answer& answer) {
    int conn = accept(listener_, nullptr, nullptr);
    if (conn < 0) return;
    char c = 0;
    while (recv(conn, &c, 1, 0) == 1 && c != '\n') line_.push_back(c);
    std::optional<std::string> reply = answer(line_);
    if (reply) {
      std::string text = *reply + "\n";
      (void)send(conn, text.data(), text.size(), MSG_NOSIGNAL);
    }
    close(conn);
  }

  int listener_;
  std::string line_;
  std::thread thread_;
};

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    conn_ = redis_.Connect();
    path_ = dir_.path() + "/cmd.sock";
    opt_.redis_url = redis_.parsed_url();
    opt_.node = "n1";
  }

  // Writes the node's heartbeat naming server process `pid` and the command socket, and makes a
  // Transport that reads it.
  std::unique_ptr<Transport> Make(int64_t pid, bool command_socket = true, int timeout_ms = 5000) {
    EXPECT_TRUE(conn_
                    ->Command({"HSET", keys_.Server("n1"), "node", "n1", "instance", "i1", "pid",
                               std::to_string(pid), "command_socket", path_})
                    .ok());
    view_ = std::make_unique<ServerView>(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
    auto info = view_->Read();
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    view_->Adopt(std::move(info).value());
    TransportOptions topt{"n1", keys_, timeout_ms, command_socket};
    return std::make_unique<Transport>(*conn_, std::move(topt), *view_);
  }

  // A create of a u8[64] host tensor named `name`.
  static Command Create(const std::string& name) {
    Command cmd;
    cmd.op = Op::kCreate;
    cmd.name = name;
    cmd.dtype = DType::kU8;
    cmd.shape = {64};
    cmd.bytes = 64;
    cmd.device = kHostDevice;
    return cmd;
  }
  // The record a server answers a create of `name` with.
  static TensorRecord Made(const std::string& name) {
    TensorRecord r;
    r.name = name;
    r.dtype = DType::kU8;
    r.shape = {64};
    r.device = kHostDevice;
    r.bytes = 64;
    r.ipc_kind = IpcKind::kHostShm;
    r.ipc_handle = "/mcd-transport-test-1";
    r.refcount = 1;
    r.state = "ready";
    r.node = "n1";
    r.owner = "i1";
    r.ctime_ms = 1700000000001;
    return r;
  }
  // The server's success reply to `line` (a create), or an empty string when it is no command.
  static std::string Reply(const std::string& line) {
    auto cmd = ParseCommand(line);
    if (!cmd.ok()) return "";
    return ReplyHeadJson(cmd->req, cmd->op) + RecordToJson(Made(cmd->name)) + "}";
  }
  // Checks that `line` is the create of `name` this process sent for node n1.
  static void ExpectCreateOf(const std::string& line, const std::string& name) {
    auto cmd = ParseCommand(line);
    ASSERT_TRUE(cmd.ok()) << line;
    EXPECT_EQ(cmd->op, Op::kCreate);
    EXPECT_EQ(cmd->name, name);
    EXPECT_EQ(cmd->node.value_or(""), "n1");
    EXPECT_EQ(cmd->pid, getpid());
    EXPECT_EQ(cmd->bytes, 64u);
    EXPECT_EQ(cmd->device, kHostDevice);
    EXPECT_EQ(cmd->req.rfind("n1-" + std::to_string(getpid()) + "-", 0), 0u) << cmd->req;
    EXPECT_EQ(cmd->req.size(), std::string("n1-" + std::to_string(getpid()) + "-").size() + 32);
  }
  long long QueueLength() {
    auto len = conn_->Command({"LLEN", keys_.queue});
    EXPECT_TRUE(len.ok());
    return len.ok() ? len->integer : -1;
  }

  test::TempDir dir_;
  test::RedisServer redis_;
  std::unique_ptr<RedisConnection> conn_;
  KeySpace keys_;
  ClientOptions opt_;
  std::string path_;
  std::unique_ptr<ServerView> view_;
};

TEST_F(TransportTest, ACommandOnTheSocketIsSentAndItsReplyRead) {
  FakeCommandSocket server(path_, [](const std::string& line) { return Reply(line); });
  auto transport = Make(getpid());
  auto record = transport->Request(Create("sock"));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ExpectCreateOf(server.line(), "sock");
  EXPECT_EQ(record->name, "sock");
  EXPECT_EQ(record->ipc_handle, Made("sock").ipc_handle);
  EXPECT_EQ(record->refcount, 1);
  EXPECT_EQ(record->owner, "i1");
  EXPECT_EQ(QueueLength(), 0) << "the command went through the queue too";
}

TEST_F(TransportTest, ASocketClosedBeforeTheReplyIsReportedAsUnknownOutcome) {
  FakeCommandSocket server(path_, [](const std::string&) { return std::nullopt; });
  auto transport = Make(getpid());
  auto record = transport->Request(Create("lost"));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(record.status().message().find("closed its command socket before answering"),
            std::string::npos)
      << record.status().message();
  ExpectCreateOf(server.line(), "lost");
  EXPECT_EQ(QueueLength(), 0) << "a command that may have been applied was sent again";
}

// The heartbeat names another process than the one serving the socket: stale or forged.
TEST_F(TransportTest, ASocketServedByAnotherProcessThanTheHeartbeatsIsRefused) {
  FakeCommandSocket server(path_, [](const std::string& line) { return Reply(line); });
  auto transport = Make(getppid());
  auto record = transport->Request(Create("forged"));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(record.status().message().find("not by the server process the node's heartbeat names"),
            std::string::npos)
      << record.status().message();
  EXPECT_EQ(server.line(), "") << "the command reached a socket it did not trust";
  EXPECT_EQ(QueueLength(), 0);
}

// The socket's server is the heartbeat's process, but it runs as a user this one does not trust.
TEST_F(TransportTest, ASocketOfAnUntrustedUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as a second user";
  constexpr uid_t kOtherUser = 65534;  // nobody
  ASSERT_EQ(chmod(dir_.path().c_str(), 0777), 0);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(kOtherUser) != 0 || setuid(kOtherUser) != 0)
      _exit(126);
    if (Listen(path_) < 0) _exit(127);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the other user's server did not start";
  close(ready[0]);
  auto transport = Make(child);
  auto record = transport->Request(Create("untrusted"));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(record.status().message().find("MCD_TRUSTED_USERS"), std::string::npos)
      << record.status().message();
  EXPECT_EQ(QueueLength(), 0);
}

// Without the socket: LPUSH onto the queue and BLPOP of the reply key; a fake server pops it.
TEST_F(TransportTest, ACommandThroughTheQueueIsPushedAndItsReplyPopped) {
  auto transport = Make(getpid(), /*command_socket=*/false);
  std::string body;
  std::thread server([&] {
    auto own = redis_.Connect();
    auto popped = own->Command({"BRPOP", keys_.queue, "20"});
    if (!popped.ok() || popped->elements.size() != 2) return;
    body = popped->elements[1].str;
    auto cmd = ParseCommand(body);
    if (cmd.ok()) (void)own->Command({"LPUSH", keys_.Reply(cmd->req), Reply(body)});
  });
  auto record = transport->Request(Create("queued"));
  server.join();
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ExpectCreateOf(body, "queued");
  EXPECT_EQ(record->name, "queued");
  EXPECT_EQ(record->ipc_handle, Made("queued").ipc_handle);
  EXPECT_EQ(QueueLength(), 0);
}

TEST_F(TransportTest, AQueuedCommandNobodyTookIsWithdrawnAtItsTimeout) {
  auto transport = Make(getpid(), /*command_socket=*/false, /*timeout_ms=*/300);
  auto record = transport->Request(Create("unanswered"));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), ErrorCode::kTimeout);
  EXPECT_NE(record.status().message().find("was withdrawn from the queue, nothing changed"),
            std::string::npos)
      << record.status().message();
  EXPECT_EQ(QueueLength(), 0) << "the command stayed for a server to apply later";
}

}  // namespace
}  // namespace mcd
