// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "common/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/hex.h"
#include "memcuda/unique_fd.h"

namespace mcd {

namespace {

// Fields 3 (the state letter), 9 (the kernel's flags) and 22 (the start time) of
// /proc/<pid>/stat; false when the process is gone. Plain system calls, no streams or printf: a
// client pins its server with this where the kernel has no pidfs (PinnedProcess::Open), and a
// process's first ifstream took ~0.5 ms and its first snprintf ~0.1 ms on the build machine.
struct Stat {
  char state = 0;
  uint64_t flags = 0;
  uint64_t start_time = 0;
};
bool ReadStat(int64_t pid, Stat& out) {
  if (pid <= 0) return false;
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  char stat[1024];
  ssize_t n = read(fd.get(), stat, sizeof(stat) - 1);
  if (n <= 0) return false;
  stat[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
  const char* field = std::strrchr(stat, ')');
  if (field == nullptr || field[1] != ' ' || field[2] == '\0') return false;
  out.state = field[2];
  for (int i = 2; i < 22; ++i) {  // field + 1 is the start of field i + 1
    field = std::strchr(field + 1, ' ');
    if (field == nullptr) return false;
    if (i == 8) out.flags = std::strtoull(field + 1, nullptr, 10);
  }
  char* end = nullptr;
  unsigned long long start = std::strtoull(field + 1, &end, 10);
  if (end == field + 1) return false;
  out.start_time = start;
  return true;
}

}  // namespace

uint64_t ProcessStartTime(int64_t pid) {
  Stat stat;
  return ReadStat(pid, stat) ? stat.start_time : 0;
}

bool ProcessExiting(int64_t pid, uint64_t start_time) {
  constexpr uint64_t kPfExiting = 0x4;  // PF_EXITING, include/linux/sched.h
  Stat stat;
  if (!ReadStat(pid, stat)) return false;  // gone, or not ours to read: ProcessAlive tells
  if (start_time != 0 && stat.start_time != start_time) return false;  // another process now
  return stat.state == 'Z' || stat.state == 'X' || (stat.flags & kPfExiting) != 0;
}

int PidfdOpen(int64_t pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
}

uint64_t PidfdInode(int64_t pid) {
  constexpr long kPidfsMagic = 0x50494446;  // PID_FS_MAGIC; Debian 12's kernel headers lack it
  UniqueFd pidfd(PidfdOpen(pid));
  if (!pidfd) return 0;
  struct statfs fs {};
  struct stat st {};
  bool pidfs = fstatfs(pidfd.get(), &fs) == 0 && static_cast<long>(fs.f_type) == kPidfsMagic &&
               fstat(pidfd.get(), &st) == 0;
  return pidfs ? static_cast<uint64_t>(st.st_ino) : 0;
}

bool ProcessAlive(int64_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  Stat stat;
  if (!ReadStat(pid, stat)) return false;  // gone (or a zombie reaped meanwhile)
  // A zombie has exited and only waits for its parent to reap it: it holds nothing any more.
  if (stat.state == 'Z' || stat.state == 'X') return false;
  return start_time == 0 || stat.start_time == start_time;
}

bool ProcessHasThreadNamed(int64_t pid, const std::string& name) {
  if (pid <= 0) return false;
  std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return false;
  bool found = false;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(tasks + "/" + entry->d_name + "/comm");
    std::string line;
    if (std::getline(comm, line) && line == name) {
      found = true;
      break;
    }
  }
  closedir(dir);
  return found;
}

const std::string& PidSpace() {
  static const std::string space = [] {
    char boot[64] = {};
    UniqueFd fd(open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC));
    ssize_t n = fd ? read(fd.get(), boot, sizeof(boot) - 1) : -1;
    while (n > 0 && (boot[n - 1] == '\n' || boot[n - 1] == ' ')) boot[--n] = '\0';
    struct stat ns {};
    if (n <= 0 || stat("/proc/self/ns/pid", &ns) != 0) return std::string();
    return std::string(boot) + "/" + std::to_string(static_cast<uint64_t>(ns.st_ino));
  }();
  return space;
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Status SecureRandom(void* out, size_t n) {
  // The kernel's CSPRNG: ids made from this are promises that nobody can guess them, so there
  // is no fallback that someone could predict (getrandom without flags blocks only until the
  // kernel's entropy pool is first initialized at boot).
  auto* at = static_cast<unsigned char*>(out);
  while (n > 0) {
    ssize_t got = getrandom(at, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return Status(ErrorCode::kInternal, std::string("getrandom: ") + std::strerror(errno));
    }
    at += got;
    n -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

Result<std::string> RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  MCD_RETURN_IF_ERROR(SecureRandom(raw.data(), raw.size()));
  return HexEncode(raw);
}

}  // namespace mcd
