// The server's log lines (common/log.h).
#include "common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "test_support.h"

namespace mcd {
namespace {

// A line quotes what Redis holds (a state, a node): no byte of it reaches the log raw that a
// terminal following the log would act on, and no newline forges a second line.
TEST(Log, ShowsEveryByteOutsidePrintableAsciiEscaped) {
  test::TempDir dir;
  const std::string path = dir.path() + "/log";
  std::fflush(stderr);
  int saved = dup(STDERR_FILENO);
  ASSERT_NE(std::freopen(path.c_str(), "w", stderr), nullptr);
  Log(LogLevel::kError, "state 'a\x1b]0;t\x07\nFORGED\r\x7f\xc2\x9b\x9b\\' end");
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string line = test::ReadFile(path);
  EXPECT_NE(
      line.find(" error: state 'a\\x1b]0;t\\x07\\x0aFORGED\\x0d\\x7f\\xc2\\x9b\\x9b\\\\' end\n"),
      std::string::npos)
      << line;
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
}

}  // namespace
}  // namespace mcd
