// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// --self-serve: a private redis-server, and an mcd-serve per allocator in turn.
#pragma once

#include <string>
#include <vector>

#include "bench_common.h"
#include "children.h"
#include "memcuda/private_redis.h"

namespace mcd::bench {

// Removes a folder and what is in it, without following links.
inline void RemoveTree(const std::string& path) {
  nftw(
      path.c_str(),
      [](const char* entry, const struct stat*, int, struct FTW*) {
        std::remove(entry);  // a file, or a folder emptied before (FTW_DEPTH)
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

// A private redis-server and mcd-serve per allocator, for --self-serve. Their folder is
// <TMPDIR>/mcd-bench-<pid>-XXXXXX; a run removes it at its end, and a later run removes those of
// runs that were killed outright (their pid gone; their Redis and server went with them).
struct SelfServe {
  std::string dir;
  std::unique_ptr<PrivateRedis> redis;
  pid_t server = -1;

  ~SelfServe() {
    StopServer();
    redis.reset();
    if (!dir.empty()) RemoveTree(dir);
  }
  static std::string TempRoot() {
    const char* tmp = std::getenv("TMPDIR");
    return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  static void RemoveFoldersOfKilledRuns(const std::string& root) {
    DIR* folder = opendir(root.c_str());
    if (folder == nullptr) return;
    std::vector<std::string> stale;
    while (dirent* e = readdir(folder)) {
      long pid = 0;
      char tail[16] = {};
      if (std::sscanf(e->d_name, "mcd-bench-%ld-%15s", &pid, tail) != 2 || pid <= 0) continue;
      std::string path = root + "/" + e->d_name;
      struct stat st {};
      if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) continue;
      if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(path);
    }
    closedir(folder);
    for (const std::string& path : stale) RemoveTree(path);
  }
  Status StartRedis() {
    std::string root = TempRoot();
    RemoveFoldersOfKilledRuns(root);
    std::string tmpl = root + "/mcd-bench-" + std::to_string(getpid()) + "-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      return Status(ErrorCode::kIoError,
                    "cannot make a folder " + tmpl + ": " + std::strerror(errno));
    }
    dir = tmpl;
    MCD_ASSIGN_OR_RETURN(redis,
                         PrivateRedis::Start("redis-server", dir, /*stop_with_caller=*/true));
    return Status::Ok();
  }
  std::string Url() const { return redis->url().Redacted(); }
  Status StartServer(const std::string& allocator, const std::string& devices,
                     const std::string& node, const std::vector<std::string>& extra) {
    std::string serve = SelfExe();
    serve = serve.substr(0, serve.rfind('/') + 1) + "mcd-serve";
    pid_t parent = getpid();
    server = fork();
    if (server == 0) {
      DieWithParent(parent);
      setpgid(0, 0);  // a Ctrl-C reaches the bench, which stops its server after its last row
      int log =
          open((dir + "/serve-" + allocator + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(log, STDERR_FILENO);
      std::vector<std::string> args = {serve,    "--redis-url", Url(),         "--devices", devices,
                                       "--node", node,          "--allocator", allocator,   "-q"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(serve.c_str(), argv.data());
      _exit(127);
    }
    auto conn = RedisConnection::Connect(RedisUrl::Parse(Url()).value());
    if (!conn.ok()) return conn.status();
    std::string log = dir + "/serve-" + allocator + ".log";
    for (int i = 0; i < 400; ++i) {
      auto hb = conn.value()->Command({"EXISTS", "mcd:server:" + node});
      if (hb.ok() && hb->integer == 1) return Status::Ok();
      if (waitpid(server, nullptr, WNOHANG) == server) {  // it gave up: say why
        server = -1;
        std::ifstream in(log);
        std::string line, said;
        while (std::getline(in, line) && said.size() < 300) {
          if (!line.empty()) said += (said.empty() ? "" : " ") + line;
        }
        return Status(ErrorCode::kUnavailable, "mcd-serve did not start: " + said);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return Status(ErrorCode::kUnavailable, "mcd-serve did not start; see " + log);
  }
  void StopServer() {
    if (server > 0) {
      kill(server, SIGTERM);
      waitpid(server, nullptr, 0);
      server = -1;
    }
  }
};

}  // namespace mcd::bench
