// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The server's log lines (common/log.h).
#include "common/log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "test_support.h"

namespace mcd {
namespace {

// What `write` puts on stderr, which is a file meanwhile (`write` may look at it: fstat).
std::string StderrOf(const std::function<void()>& write) {
  test::TempDir dir;
  const std::string path = dir.path() + "/log";
  std::fflush(stderr);
  int saved = dup(STDERR_FILENO);
  EXPECT_NE(std::freopen(path.c_str(), "w", stderr), nullptr);
  write();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  return test::ReadFile(path);
}

// A line quotes what Redis holds (a state, a node): no byte of it reaches the log raw that a
// terminal following the log would act on, and no newline forges a second line.
TEST(Log, ShowsEveryByteOutsidePrintableAsciiEscaped) {
  std::string line = StderrOf(
      [] { Log(LogLevel::kError, "state 'a\x1b]0;t\x07\nFORGED\r\x7f\xc2\x9b\x9b\\' end"); });
  EXPECT_NE(
      line.find(" error: state 'a\\x1b]0;t\\x07\\x0aFORGED\\x0d\\x7f\\xc2\\x9b\\x9b\\\\' end\n"),
      std::string::npos)
      << line;
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
}

// Under systemd, whose journal records the time, name and pid itself, a line is the message with
// its syslog priority in sd-daemon(3)'s prefix, so that journalctl -p filters and colours it.
// Only where stderr is the stream JOURNAL_STREAM names.
TEST(Log, WritesSyslogPrioritiesWhenStderrIsTheJournal) {
  std::string text = StderrOf([] {
    struct stat st {};
    ASSERT_EQ(fstat(STDERR_FILENO, &st), 0);
    setenv("JOURNAL_STREAM", (std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)).c_str(),
           1);
    Log(LogLevel::kError, "lost\n");
    Log(LogLevel::kWarn, "slow");
    Log(LogLevel::kInfo, "serving");
    setenv("JOURNAL_STREAM",
           (std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1)).c_str(), 1);
    Log(LogLevel::kInfo, "another stream");
    unsetenv("JOURNAL_STREAM");
  });
  EXPECT_EQ(text.rfind("<3>lost\\x0a\n<4>slow\n<6>serving\n", 0), 0u) << text;
  EXPECT_NE(text.find(" info: another stream\n"), std::string::npos)
      << "not the journal's: " << text;
}

}  // namespace
}  // namespace mcd
