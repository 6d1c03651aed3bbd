// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Request ids: each one 128 fresh random bits, so that nobody who sees a process's reqs (their
// reply keys are visible to every Redis user through SCAN) can write a reply ahead of its next.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <regex>
#include <set>
#include <string>

#include "alloc/allocator.h"
#include "client/transport.h"
#include "common/process.h"
#include "memcuda/gpu_worker.h"

namespace mcd {
namespace {

// The random part of a req as a 128-bit number.
unsigned __int128 RandomPart(const std::string& req) {
  unsigned __int128 value = 0;
  for (char c : req.substr(req.size() - 32)) {
    value = value * 16 + static_cast<unsigned>(std::stoi(std::string(1, c), nullptr, 16));
  }
  return value;
}

TEST(RequestId, EveryReqIs128FreshRandomBits) {
  const std::string prefix = "node-42-";
  std::regex form("node-42-[0-9a-f]{32}");
  std::set<std::string> seen;
  std::string previous = NewRequestId(prefix).value();
  for (int i = 0; i < 1000; ++i) {
    std::string req = NewRequestId(prefix).value();
    ASSERT_TRUE(std::regex_match(req, form)) << req;
    ASSERT_TRUE(seen.insert(req).second) << "repeated " << req;
    // Not the previous one counted on, nor any near it: no relation an observer could use.
    unsigned __int128 a = RandomPart(previous), b = RandomPart(req);
    unsigned __int128 distance = a > b ? a - b : b - a;
    EXPECT_GT(distance, static_cast<unsigned __int128>(1) << 64) << previous << " then " << req;
    // The shared prefix of two random parts is short: at most 8 hex digits in 1000 draws.
    size_t common = 0;
    while (common < 32 && previous[prefix.size() + common] == req[prefix.size() + common]) ++common;
    EXPECT_LE(common, 8u) << previous << " then " << req;
    previous = req;
  }
}

// From here on getrandom fails with ENOSYS in this process, as on a kernel without it or
// under a seccomp profile that denies it; false where the filter cannot be installed.
bool DenyGetrandom() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getrandom, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// Without a random source, every id that must not be guessed fails with kInternal: the library
// neither aborts the process that loaded it nor falls back to a guessable value (a clock).
// In a child, whose exit code says which check failed.
TEST(RequestId, WithoutARandomSourceNothingAbortsOrFallsBackToAGuessableId) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!DenyGetrandom()) _exit(2);
    if (RandomHex(8).status().code() != ErrorCode::kInternal) _exit(3);
    if (NewRequestId("n-1-").status().code() != ErrorCode::kInternal) _exit(4);
    const std::string prefix = "/mcdtest-norandom-" + std::to_string(getpid()) + "-";
    DeviceContext host(kHostDevice);
    auto allocated = MakeHostShmAllocator(prefix)->Allocate(host, 4096, true);
    if (allocated.ok()) {
      UnlinkHostShm(allocated->ipc_handle);
      _exit(5);
    }
    if (allocated.status().code() != ErrorCode::kInternal) _exit(6);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "a seccomp filter cannot be installed here";
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "3: RandomHex, 4: NewRequestId, 5: a shm name made without random bits, 6: not kInternal";
}

}  // namespace
}  // namespace mcd
