// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The command socket's reading: whole lines in order, nothing from a client that gave up, a line
// past the limit cut off, replies back to the right connection, other users kept out.
#include "ipc/command_socket.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "test_support.h"

namespace mcd {
namespace {

class CommandSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/cmd.sock";
    PeerPolicy policy;
    policy.uid = geteuid();
    auto socket = CommandSocket::Listen(path_, policy, kBound, "REFUSED");
    ASSERT_TRUE(socket.ok()) << socket.status().ToString();
    socket_ = std::move(socket).value();
  }
  UniqueFd Connect() {
    auto fd = ConnectUnix(path_, 2000, "command socket");
    EXPECT_TRUE(fd.ok()) << fd.status().ToString();
    return fd.ok() ? std::move(fd).value() : UniqueFd();
  }
  static void Write(const UniqueFd& fd, const std::string& text) {
    ASSERT_EQ(send(fd.get(), text.data(), text.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(text.size()));
  }
  // Collects until `count` lines came or a second passed.
  std::vector<CommandSocket::Incoming> CollectLines(size_t count, size_t max_line = 4096) {
    std::vector<CommandSocket::Incoming> out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (out.size() < count && std::chrono::steady_clock::now() < deadline) {
      socket_->Collect(out, max_line);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return out;
  }
  // Lets the socket accept and read for 50 ms; returns what came.
  std::vector<CommandSocket::Incoming> Pump() {
    std::vector<CommandSocket::Incoming> out;
    for (int i = 0; i < 25; ++i) {
      socket_->Collect(out, 4096);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return out;
  }
  static std::string ReadLine(const UniqueFd& fd) {
    std::string line;
    char c = 0;
    while (recv(fd.get(), &c, 1, 0) == 1 && c != '\n') line.push_back(c);
    return line;
  }

  static constexpr size_t kBound = 4;
  test::TempDir dir_;
  std::string path_;
  std::unique_ptr<CommandSocket> socket_;
};

TEST_F(CommandSocketTest, LinesComeWholeAndInOrderAndRepliesGoBackToTheirConnection) {
  UniqueFd a = Connect();
  UniqueFd b = Connect();
  Write(a, "{\"op\":\"cre");
  auto none = CollectLines(1);
  EXPECT_TRUE(none.empty()) << "half a line was handed out";
  Write(a, "ate\"}\r\n\n{\"second\":1}\n");
  Write(b, "{\"b\":1}\n");
  auto lines = CollectLines(3);
  ASSERT_EQ(lines.size(), 3u);
  std::vector<std::string> from_a;
  uint64_t conn_a = 0, conn_b = 0;
  for (const auto& in : lines) {
    EXPECT_FALSE(in.overlong);
    if (in.line == "{\"b\":1}") {
      conn_b = in.conn;
    } else {
      from_a.push_back(in.line);
      conn_a = in.conn;
    }
  }
  EXPECT_EQ(from_a, (std::vector<std::string>{"{\"op\":\"create\"}", "{\"second\":1}"}));
  ASSERT_NE(conn_a, conn_b);
  EXPECT_TRUE(socket_->Send(conn_b, "for b"));
  EXPECT_TRUE(socket_->Send(conn_a, "for a"));
  EXPECT_EQ(ReadLine(a), "for a");
  EXPECT_EQ(ReadLine(b), "for b");
  a.reset();
  b.reset();
}

TEST_F(CommandSocketTest, AClientThatClosedTakesItsLinesWithItAndIsForgotten) {
  UniqueFd a = Connect();
  Write(a, "{\"given\":\"up\"}\n");
  a.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::vector<CommandSocket::Incoming> out;
  socket_->Collect(out, 4096);
  socket_->Collect(out, 4096);
  EXPECT_TRUE(out.empty()) << "a command of a client that had closed was handed out: "
                           << out[0].line;
  EXPECT_EQ(socket_->connections(), 0u);
}

// The same for a connection accepted earlier: its command and its close come in one read
// pass, and the close must be seen although the command came in a short read.
TEST_F(CommandSocketTest, AKnownClientThatSentAndClosedIsSeenGoneBeforeItsLineIsHandedOut) {
  UniqueFd a = Connect();
  std::vector<CommandSocket::Incoming> out;
  for (int i = 0; i < 50 && socket_->connections() == 0; ++i) {
    socket_->Collect(out, 4096);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(socket_->connections(), 1u);
  Write(a, "{\"given\":\"up\"}\n");
  a.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  socket_->Collect(out, 4096);
  EXPECT_TRUE(out.empty()) << "a command of a client that had closed was handed out: "
                           << out[0].line;
  EXPECT_EQ(socket_->connections(), 0u);
}

TEST_F(CommandSocketTest, ALineOverTheLimitIsCutOffAndNothingAfterItIsRead) {
  UniqueFd a = Connect();
  Write(a, "{\"ok\":1}\n" + std::string(300, 'x') + "\n{\"after\":1}\n");
  auto lines = CollectLines(2, 100);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].line, "{\"ok\":1}");
  EXPECT_FALSE(lines[0].overlong);
  EXPECT_TRUE(lines[1].overlong);
  EXPECT_LE(lines[1].line.size(), 200u);
  auto more = CollectLines(1, 100);
  EXPECT_TRUE(more.empty()) << "read past an overlong line: " << more[0].line;
  socket_->Close(lines[1].conn);
  EXPECT_EQ(socket_->connections(), 0u);
  EXPECT_FALSE(socket_->Send(lines[1].conn, "late"));
  a.reset();
}

TEST_F(CommandSocketTest, TheSocketIsTheUsersAloneAndGoesWithTheServer) {
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  if (geteuid() == 0) {
    // Another user cannot connect (the file's mode), and would be refused if it could.
    pid_t pid = fork();
    if (pid == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
      auto fd = ConnectUnix(path_, 1000, "command socket");
      _exit(fd.ok() ? 0 : static_cast<int>(fd.status().code()));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), static_cast<int>(ErrorCode::kPermissionDenied));
  }
  socket_.reset();
  EXPECT_NE(access(path_.c_str(), F_OK), 0) << "the socket file outlived the server";
}

// Idle connections cannot take the socket from others: past the bound a new one is told so at
// once (its client then uses the queue), and one closing makes room again.
TEST_F(CommandSocketTest, PastTheBoundANewConnectionIsRefusedAtOnceAndRoomComesBack) {
  std::vector<UniqueFd> idle;
  for (size_t i = 0; i < kBound; ++i) idle.push_back(Connect());
  Pump();
  ASSERT_EQ(socket_->connections(), kBound);
  UniqueFd extra = Connect();
  Pump();
  EXPECT_EQ(ReadLine(extra), "REFUSED");
  char c = 0;
  EXPECT_EQ(recv(extra.get(), &c, 1, 0), 0) << "the refused connection stays open";
  EXPECT_EQ(socket_->connections(), kBound);
  idle.pop_back();  // one leaves...
  Pump();
  UniqueFd next = Connect();  // ...and the next is served
  Write(next, "after\n");
  auto lines = CollectLines(1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].line, "after");
}

// Out of descriptors, a waiting connection is taken with the reserve descriptor and turned away,
// not left pending (which kept the listening socket readable and the server spinning).
TEST(CommandSocketLimits, OutOfDescriptorsAConnectionIsTurnedAwayNotLeftPending) {
  test::TempDir dir;
  std::string path = dir.path() + "/cmd.sock";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  if (pid == 0) {
    PeerPolicy policy;
    policy.uid = geteuid();
    auto socket = CommandSocket::Listen(path, policy, 1000, "REFUSED");
    if (!socket.ok()) _exit(2);
    // Room for two more descriptors: the third connection meets EMFILE.
    int top = dup(0);
    close(top);
    rlimit files{static_cast<rlim_t>(top + 2), static_cast<rlim_t>(top + 2)};
    if (setrlimit(RLIMIT_NOFILE, &files) != 0) _exit(3);
    if (write(ready[1], "r", 1) != 1) _exit(4);
    std::vector<CommandSocket::Incoming> out;
    for (int i = 0; i < 300; ++i) {
      (*socket)->Collect(out, 4096);
      usleep(2000);
    }
    _exit((*socket)->connections() <= 2 ? 0 : 5);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  std::vector<UniqueFd> conns;
  int refused = 0;
  for (int i = 0; i < 6; ++i) {
    auto fd = ConnectUnix(path, 1000, "command socket");
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    conns.push_back(std::move(fd).value());
  }
  for (const UniqueFd& fd : conns) {
    pollfd p{fd.get(), POLLIN, 0};
    if (poll(&p, 1, 300) == 1) {
      std::string line;
      char c = 0;
      while (recv(fd.get(), &c, 1, 0) == 1 && c != '\n') line.push_back(c);
      EXPECT_EQ(line, "REFUSED");
      ++refused;
    }
  }
  EXPECT_GE(refused, 4) << "connections past the descriptors were left pending";
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace mcd
