// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Test support: a real redis-server started by the test on a Unix socket (or TCP port) in a
// temporary folder, and running the real tool binaries.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "memcuda/redis.h"

namespace mcd::test {

// A temporary folder removed (recursively) at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct RedisServerOptions {
  bool tcp = false;                // listen on a free loopback port instead of a Unix socket
  std::vector<std::string> extra;  // extra config lines, e.g. "user alice on >pw ~* +@all"
};

// BLPOP of `key` for up to `seconds`, on a socket timeout that outlasts it (a connection's default
// timeout would cut a long wait short). A reply that comes sooner ends it sooner: waits for work
// that grows with a loaded machine can be generous.
Result<RedisValue> BlockingPop(RedisConnection& conn, const std::string& key, int seconds);

// A private redis-server; stopped (SIGKILL) at destruction.
class RedisServer {
 public:
  explicit RedisServer(RedisServerOptions options = {});
  ~RedisServer();
  const std::string& url() const { return url_; }  // unix:///... or redis://127.0.0.1:PORT
  RedisUrl parsed_url() const;
  pid_t pid() const { return pid_; }
  void Kill();  // SIGKILL now
  // SIGKILL, then start again on the same socket or port: the data is lost unless the config
  // keeps it (an "appendonly yes" line in `extra`). `args` are added to the command line (e.g.
  // "--key-load-delay", "20": a slow load, which Redis answers with LOADING until it is over).
  void Restart(const std::vector<std::string>& args = {});
  std::unique_ptr<RedisConnection> Connect() const;

 private:
  void Launch(const std::vector<std::string>& args = {});

  TempDir dir_;
  pid_t pid_ = -1;
  std::string url_;
  std::string conf_;
};

struct ProcessResult {
  int exit_code = -1;  // -signal when killed
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with extra environment, waiting at most timeout_s. `in_child`, when
// given, runs in the child right before the exec (to restrict what the program may do).
ProcessResult Run(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env = {}, int timeout_s = 60,
                  const std::function<void()>& in_child = {});

// A background process; SIGKILLed at destruction if still running.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::string& log_path);
  ~Background();
  pid_t pid() const { return pid_; }
  // Sends `sig` and waits for the exit; returns the exit code (-signal when killed).
  int Stop(int sig, int timeout_s = 20);
  // Waits for it to exit by itself; returns its exit code, or -1000 when it had not within
  // `timeout_s` (it is then killed).
  int Wait(int timeout_s);

 private:
  pid_t pid_ = -1;
};

std::string ToolPath(const std::string& tool);  // build/bin/<tool>
int FreePort();                                 // a loopback TCP port free right now
std::string ReadFile(const std::string& path);
// `n` random bytes, the same for the same seed: what a data-path test writes (never zeros).
std::string RandomBytes(size_t n, uint32_t seed);
// A NumPy file (version 1.0) of a u8 vector holding `data`, as NumPy writes it; made here rather
// than by the tools' writer under test.
std::string U8Npy(const std::string& data);
// Files in /dev/shm whose names start with `prefix`.
std::vector<std::string> ShmObjects(const std::string& prefix);
// The processes whose parent is `parent` (from /proc).
std::vector<pid_t> ChildrenOf(pid_t parent);
// Whether `pid` is a process that still runs (an unreaped zombie does not).
bool Running(pid_t pid);
// What XINFO STREAM says of stream `key`: the entries ever added (-1 where Redis does not say)
// and kept, the oldest kept id ("" when none) and the newest given. All zero-like when the
// stream cannot be read (the test then fails).
struct StreamInfo {
  long long added = -1, length = 0;
  std::string first_id, last_id;
};
StreamInfo StreamInfoOf(RedisConnection& redis, const std::string& key);
// How many clients CLIENT LIST shows blocked (flag b: waiting on a key, or held by CLIENT PAUSE)
// in command `cmd` ("xread", "evalsha").
int BlockedClients(RedisConnection& redis, const std::string& cmd);
// Polls `predicate` every 20 ms for at most `timeout_ms`.
bool WaitFor(const std::function<bool()>& predicate, int timeout_ms);
// The whitespace-separated fields of `line`, as awk counts them.
size_t FieldCount(const std::string& line);
bool HasCudaDevice();
// The items of list `key`, from its head; none when it cannot be read.
std::vector<std::string> List(RedisConnection& redis, const std::string& key);

}  // namespace mcd::test
