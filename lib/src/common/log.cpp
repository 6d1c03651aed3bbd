// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "common/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace mcd {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mutex;
std::string g_tag = "memcuda";  // guarded by g_mutex
const char* const kLevelNames[] = {"error", "warn", "info", "debug"};
const char* const kJournalPriorities[] = {"<3>", "<4>", "<6>", "<7>"};  // sd-daemon.h's SD_*

// The message with every byte outside printable ASCII as \xNN (a backslash as \\): lines quote
// what Redis holds (a state, a node, a reason a script gave), which must not drive the terminal
// or forge a line of whoever follows the log.
std::string LogSafe(const std::string& message) {
  std::string out;
  out.reserve(message.size());
  for (char c : message) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out.push_back(c);
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    }
  }
  return out;
}
}  // namespace

// JOURNAL_STREAM is "<device>:<inode>" of the journal's stream (systemd.exec(5)). Looked at with
// each line, since stderr may be redirected meanwhile; lines are few.
bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  unsigned long long dev = 0, ino = 0;
  if (stream == nullptr || std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  return fstat(STDERR_FILENO, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }

void SetLogTag(const std::string& tag) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_tag = tag;
}

bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(); }

void Log(LogLevel level, const std::string& message) {
  if (!LogEnabled(level)) return;
  const std::string safe = LogSafe(message);
  if (StderrIsJournal()) {
    std::lock_guard<std::mutex> lock(g_mutex);
    std::fprintf(stderr, "%s%s\n", kJournalPriorities[static_cast<int>(level)], safe.c_str());
    std::fflush(stderr);
    return;
  }
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm_utc{};
  gmtime_r(&secs, &tm_utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm_utc);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s.%03dZ %s[%d] %s: %s\n", stamp, static_cast<int>(ms % 1000),
               g_tag.c_str(), static_cast<int>(getpid()), kLevelNames[static_cast<int>(level)],
               safe.c_str());
  std::fflush(stderr);
}

}  // namespace mcd
