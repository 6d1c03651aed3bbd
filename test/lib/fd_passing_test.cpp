// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The pool socket: descriptors pass to allowed peers (SCM_RIGHTS), refused ones get nothing.
#include "ipc/fd_passing.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "common/process.h"
#include "test_support.h"

namespace mcd {
namespace {

class FdPassing : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pipe(pipe_), 0);
    ASSERT_EQ(write(pipe_[1], "pool", 4), 4);
    path_ = dir_.path() + "/pool.sock";
  }
  void TearDown() override {
    close(pipe_[0]);
    close(pipe_[1]);
  }
  Result<std::unique_ptr<FdServer>> Start(PeerPolicy policy) {
    return FdServer::Start(path_, policy,
                           [this](int device) { return device == 3 ? pipe_[0] : -1; });
  }
  // Runs FetchFd in a child that first becomes `uid` (and `gid`); returns the code it got.
  int FetchAs(uid_t uid, gid_t gid) {
    pid_t pid = fork();
    if (pid == 0) {
      setgroups(0, nullptr);
      if (setgid(gid) != 0 || setuid(uid) != 0) _exit(100);
      auto fd = FetchFd(path_, 3, 2000, getppid());  // the server runs in the parent
      _exit(fd.ok() ? 0 : static_cast<int>(fd.status().code()));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  test::TempDir dir_;
  int pipe_[2] = {-1, -1};
  std::string path_;
};

TEST_F(FdPassing, AllowedPeerReceivesAWorkingDescriptor) {
  PeerPolicy policy;
  policy.uid = geteuid();
  auto server = Start(policy);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto fd = FetchFd(path_, 3, 2000, getpid());
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_NE(fd.value().get(), pipe_[0]);  // a new descriptor for the same pipe
  char buf[4] = {};
  ASSERT_EQ(read(fd.value().get(), buf, 4), 4);
  EXPECT_EQ(std::string(buf, 4), "pool");
  EXPECT_EQ(FetchFd(path_, 5, 2000, getpid()).status().code(), ErrorCode::kNoDevice);
}

TEST_F(FdPassing, OtherUsersAreRefusedUnlessInTheGroup) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  const uid_t nobody = 65534;
  const gid_t allowed_gid = 54321;
  chmod(dir_.path().c_str(), 0755);  // let the other user reach the socket file itself
  PeerPolicy policy;
  policy.uid = geteuid();
  {
    auto server = Start(policy);
    ASSERT_TRUE(server.ok());
    // The socket file itself keeps other users out...
    EXPECT_EQ(FetchAs(nobody, allowed_gid), static_cast<int>(ErrorCode::kPermissionDenied));
    // ...and with the file opened up, the credential check (SO_PEERCRED) still does.
    chmod(path_.c_str(), 0666);
    testing::internal::CaptureStderr();
    EXPECT_EQ(FetchAs(nobody, allowed_gid), static_cast<int>(ErrorCode::kPermissionDenied));
    std::string log = testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("refused pid"), std::string::npos) << log;
  }
  policy.group = allowed_gid;
  auto server = Start(policy);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ(FetchAs(nobody, allowed_gid), 0);
  EXPECT_EQ(FetchAs(nobody, allowed_gid + 1), static_cast<int>(ErrorCode::kPermissionDenied));
}

// Peers that connect and say nothing delay nobody: the socket serves its peers side by side
// (it served one at a time, and 5 idle peers made a client time out).
TEST_F(FdPassing, IdlePeersDoNotDelayOthers) {
  PeerPolicy policy;
  policy.uid = geteuid();
  auto server = Start(policy);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 5; ++i) {
    auto fd = ConnectUnix(path_, 2000, "pool socket");
    ASSERT_TRUE(fd.ok());
    idle.push_back(std::move(fd).value());
  }
  auto t0 = std::chrono::steady_clock::now();
  auto fd = FetchFd(path_, 3, 2000, getpid());
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  // Past the bound of waiting peers, the next one is told so at once.
  while (idle.size() < FdServer::kMaxWaiting) {
    auto more = ConnectUnix(path_, 2000, "pool socket");
    ASSERT_TRUE(more.ok());
    idle.push_back(std::move(more).value());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // all accepted and waiting
  // Many times over: the server answers and closes as it accepts, which is often before the
  // client has sent its request, and the answer must come through either way.
  for (int i = 0; i < 200; ++i) {
    t0 = std::chrono::steady_clock::now();
    auto busy = FetchFd(path_, 3, 2000, getpid());
    ASSERT_EQ(busy.status().code(), ErrorCode::kUnavailable)
        << i << ": " << busy.status().ToString();
    EXPECT_NE(busy.status().message().find("peers waiting already"), std::string::npos)
        << busy.status().message();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  }
}

// The client checks who serves the socket: a server process other than the one the heartbeat
// names is refused before anything is asked of it.
TEST_F(FdPassing, APeerThatIsNotTheNamedServerIsRefused) {
  PeerPolicy policy;
  policy.uid = geteuid();
  auto server = Start(policy);
  ASSERT_TRUE(server.ok());
  auto fd = FetchFd(path_, 3, 2000, 1);
  EXPECT_EQ(fd.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(fd.status().message().find("not by the server process"), std::string::npos)
      << fd.status().message();
}

TEST_F(FdPassing, NobodyListening) {
  EXPECT_EQ(FetchFd(path_, 0, 500, getpid()).status().code(), ErrorCode::kUnavailable);
}

// A child process that holds a pipe with "pool" in it (twice), as a server holds its pool's
// descriptor.
// Its name has spaces and parentheses, which /proc/<pid>/stat does not quote.
class FdOfProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    int report[2];
    ASSERT_EQ(pipe(report), 0);
    child_ = fork();
    if (child_ == 0) {
      prctl(PR_SET_NAME, "pool) 1 2 (3", 0, 0, 0);
      int data[2];
      // "pool" once for each way of naming the child that the test copies the pipe by.
      if (pipe(data) != 0 || write(data[1], "poolpool", 8) != 8) _exit(1);
      (void)!write(report[1], &data[0], sizeof(int));
      pause();
      _exit(0);
    }
    close(report[1]);
    ASSERT_EQ(read(report[0], &fd_, sizeof(int)), static_cast<ssize_t>(sizeof(int)));
    close(report[0]);
    start_ = ProcessStartTime(child_);
    ASSERT_NE(start_, 0u);
    by_start_.start_time = start_;
    by_ino_.pidfd_ino = PidfdInode(child_);  // 0 without pidfs
  }
  // The ways to name the child that this kernel has.
  std::vector<ProcessIdentity> Identities() const {
    std::vector<ProcessIdentity> ways = {by_start_};
    if (by_ino_.pidfd_ino != 0) ways.push_back(by_ino_);
    return ways;
  }
  void TearDown() override { Stop(); }
  // Pins `pid` as `who` and copies its descriptor `fd`, as a client does in two steps.
  static Result<UniqueFd> CopyFdOfProcess(pid_t pid, const ProcessIdentity& who, int fd) {
    MCD_ASSIGN_OR_RETURN(auto pinned, PinnedProcess::Open(pid, who));
    return pinned->CopyFd(fd);
  }
  // A copy of the child's pipe: "pool" comes out of it, and it is close-on-exec.
  static void ExpectThePipe(const UniqueFd& copy) {
    char buf[4] = {};
    EXPECT_EQ(read(copy.get(), buf, 4), 4);
    EXPECT_EQ(std::string(buf, 4), "pool");
    EXPECT_NE(fcntl(copy.get(), F_GETFD) & FD_CLOEXEC, 0);
  }
  void Stop() {
    if (child_ <= 0) return;
    kill(child_, SIGKILL);
    waitpid(child_, nullptr, 0);
    child_ = -1;
  }

  pid_t child_ = -1;
  int fd_ = -1;
  uint64_t start_ = 0;
  ProcessIdentity by_start_;
  ProcessIdentity by_ino_;
};

TEST_F(FdOfProcess, AStartTimeIsInClockTicksSinceBoot) {
  EXPECT_GE(start_, ProcessStartTime(getpid()));  // the child started after this process
  double uptime = 0;
  std::ifstream("/proc/uptime") >> uptime;
  EXPECT_LE(start_,
            static_cast<uint64_t>((uptime + 1) * static_cast<double>(sysconf(_SC_CLK_TCK))));
  EXPECT_EQ(ProcessStartTime(child_), start_);
  EXPECT_EQ(ProcessStartTime(0), 0u);
}

TEST_F(FdOfProcess, APidfdInodeNamesOneProcess) {
  if (by_ino_.pidfd_ino == 0) GTEST_SKIP() << "this kernel keeps pidfds outside pidfs (before 6.9)";
  EXPECT_EQ(PidfdInode(child_), by_ino_.pidfd_ino);  // the same number from every pidfd
  EXPECT_NE(PidfdInode(getpid()), by_ino_.pidfd_ino);
  EXPECT_EQ(PidfdInode(0), 0u);
}

TEST_F(FdOfProcess, CopiesTheDescriptorOfTheNamedProcess) {
  for (const ProcessIdentity& who : Identities()) {
    SCOPED_TRACE(who.pidfd_ino != 0 ? "by pidfd inode" : "by start time");
    auto copy = CopyFdOfProcess(child_, who, fd_);
    if (copy.status().code() == ErrorCode::kPermissionDenied) {
      GTEST_SKIP() << "this machine forbids pidfd_getfd: " << copy.status().ToString();
    }
    ASSERT_TRUE(copy.ok()) << copy.status().ToString();
    ExpectThePipe(copy.value());
  }
}

TEST_F(FdOfProcess, RefusesAnotherProcessUnderThePidAndAGoneOne) {
  // Another inode or start time: the pid names another process now (reused, or another PID
  // namespace).
  ProcessIdentity other_start = by_start_;
  other_start.start_time++;
  ProcessIdentity other_ino = by_ino_;
  other_ino.pidfd_ino = PidfdInode(getpid());
  for (const ProcessIdentity& other : {other_start, other_ino}) {
    if (other.pidfd_ino == 0 && other.start_time == 0) continue;  // no pidfs
    auto copy = CopyFdOfProcess(child_, other, fd_);
    EXPECT_EQ(copy.status().code(), ErrorCode::kNotFound) << copy.status().ToString();
  }
  auto not_open = CopyFdOfProcess(child_, by_start_, 1000);
  EXPECT_FALSE(not_open.ok());
  EXPECT_NE(not_open.status().code(), ErrorCode::kNotFound) << not_open.status().ToString();
  EXPECT_EQ(CopyFdOfProcess(child_, by_start_, -1).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(CopyFdOfProcess(child_, ProcessIdentity{}, fd_).status().code(),
            ErrorCode::kInvalidArgument);
  pid_t gone = child_;
  Stop();
  for (const ProcessIdentity& who : Identities()) {
    auto after = CopyFdOfProcess(gone, who, fd_);
    EXPECT_EQ(after.status().code(), ErrorCode::kNotFound) << after.status().ToString();
  }
}

TEST_F(FdOfProcess, APinnedProcessCopiesUntilItExits) {
  auto pinned = PinnedProcess::Open(child_, Identities().back());
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned.value()->pid(), child_);
  auto copy = pinned.value()->CopyFd(fd_);
  if (copy.status().code() == ErrorCode::kPermissionDenied) {
    GTEST_SKIP() << "this machine forbids pidfd_getfd: " << copy.status().ToString();
  }
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  ExpectThePipe(copy.value());
  EXPECT_EQ(pinned.value()->CopyFd(-1).status().code(), ErrorCode::kInvalidArgument);
  ProcessIdentity other = by_start_;
  other.start_time++;
  EXPECT_EQ(PinnedProcess::Open(child_, other).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(PinnedProcess::Open(child_, ProcessIdentity{}).status().code(),
            ErrorCode::kInvalidArgument);
  // Gone: the pin refuses, whoever gets the pid next.
  Stop();
  auto after = pinned.value()->CopyFd(fd_);
  EXPECT_EQ(after.status().code(), ErrorCode::kNotFound) << after.status().ToString();
}

TEST_F(FdOfProcess, AnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  pid_t pid = fork();
  if (pid == 0) {
    setgroups(0, nullptr);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
    auto copy = CopyFdOfProcess(child_, by_start_, fd_);
    _exit(copy.ok() ? 0 : static_cast<int>(copy.status().code()));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), static_cast<int>(ErrorCode::kPermissionDenied));
}

}  // namespace
}  // namespace mcd
