// The pool socket: descriptors pass to allowed peers (SCM_RIGHTS), refused ones get nothing.
#include "fd_passing.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
    return FdServer::Start(path_, policy, [this](int device) { return device == 3 ? pipe_[0] : -1; });
  }
  // Runs FetchFd in a child that first becomes `uid` (and `gid`); returns the code it got.
  int FetchAs(uid_t uid, gid_t gid) {
    pid_t pid = fork();
    if (pid == 0) {
      setgroups(0, nullptr);
      if (setgid(gid) != 0 || setuid(uid) != 0) _exit(100);
      auto fd = FetchFd(path_, 3, 2000);
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
  auto fd = FetchFd(path_, 3, 2000);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_NE(fd.value(), pipe_[0]);  // a new descriptor for the same pipe
  char buf[4] = {};
  ASSERT_EQ(read(fd.value(), buf, 4), 4);
  EXPECT_EQ(std::string(buf, 4), "pool");
  close(fd.value());
  EXPECT_EQ(FetchFd(path_, 5, 2000).status().code(), ErrorCode::kNoDevice);
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

TEST_F(FdPassing, NobodyListening) {
  EXPECT_EQ(FetchFd(path_, 0, 500).status().code(), ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace mcd
