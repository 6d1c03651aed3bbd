// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "test_support.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace mcd::test {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "mcdtest-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

namespace {

// The arguments and environment are built before the fork: a test that runs programs from
// several threads at once may fork while another thread holds the allocator's lock, so the child
// calls nothing that allocates before it execs (`in_child` is for single-threaded callers).
pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            int out_fd, int err_fd, const std::function<void()>& in_child = {}) {
  std::vector<std::string> variables;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string variable = *e;
    if (env.count(variable.substr(0, variable.find('='))) == 0) variables.push_back(variable);
  }
  for (const auto& [key, value] : env) variables.push_back(key + "=" + value);
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (std::string& v : variables) envp.push_back(v.data());
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  if (in_child) in_child();
  if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
  int devnull = open("/dev/null", O_RDONLY);
  dup2(devnull, STDIN_FILENO);
  execvpe(args[0], args.data(), envp.data());
  _exit(127);
}

int DecodeStatus(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return -WTERMSIG(wstatus);
  return -1;
}

int WaitExit(pid_t pid, int timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int wstatus = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t done = waitpid(pid, &wstatus, WNOHANG);
    if (done == pid) return DecodeStatus(wstatus);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &wstatus, 0);
  return -1000;  // timed out
}
}  // namespace

RedisServer::RedisServer(RedisServerOptions options) {
  std::string conf = dir_.path() + "/redis.conf";
  std::ofstream out(conf);
  out << "save \"\"\nappendonly no\ndir " << dir_.path() << "\nlogfile " << dir_.path()
      << "/redis.log\n";
  if (options.tcp) {
    int port = FreePort();
    out << "port " << port << "\nbind 127.0.0.1\n";
    url_ = "redis://127.0.0.1:" + std::to_string(port);
  } else {
    out << "port 0\nunixsocket " << dir_.path() << "/redis.sock\nunixsocketperm 700\n";
    url_ = "unix://" + dir_.path() + "/redis.sock";
  }
  for (const std::string& line : options.extra) out << line << "\n";
  out.close();
  conf_ = conf;
  Launch();
}

void RedisServer::Restart(const std::vector<std::string>& args) {
  Kill();
  Launch(args);
}

void RedisServer::Launch(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"redis-server", conf_};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = Spawn(argv, {}, -1, -1);
  bool up = WaitFor(
      [&] {
        return RedisConnection::Connect(parsed_url()).ok() ||
               RedisConnection::Connect(parsed_url()).status().code() == ErrorCode::kAuthFailed;
      },
      10000);
  if (!up)
    throw std::runtime_error("redis-server did not start: " + ReadFile(dir_.path() + "/redis.log"));
}

RedisServer::~RedisServer() { Kill(); }

void RedisServer::Kill() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int wstatus = 0;
    waitpid(pid_, &wstatus, 0);
    pid_ = -1;
  }
}

RedisUrl RedisServer::parsed_url() const { return RedisUrl::Parse(url_).value(); }

std::unique_ptr<RedisConnection> RedisServer::Connect() const {
  auto conn = RedisConnection::Connect(parsed_url());
  if (!conn.ok()) throw std::runtime_error(conn.status().ToString());
  return std::move(conn).value();
}

Result<RedisValue> BlockingPop(RedisConnection& conn, const std::string& key, int seconds) {
  const int before = conn.timeout_ms();
  MCD_RETURN_IF_ERROR(conn.SetTimeout((seconds + 5) * 1000));
  auto reply = conn.Command({"BLPOP", key, std::to_string(seconds)});
  Status restored = conn.SetTimeout(before);
  if (reply.ok() && !restored.ok()) return restored;
  return reply;
}

ProcessResult Run(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, int timeout_s,
                  const std::function<void()>& in_child) {
  TempDir dir;
  std::string out_path = dir.path() + "/out";
  std::string err_path = dir.path() + "/err";
  int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = Spawn(argv, env, out_fd, err_fd, in_child);
  close(out_fd);
  close(err_fd);
  ProcessResult result;
  result.exit_code = WaitExit(pid, timeout_s);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

Background::Background(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env, const std::string& log_path) {
  int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  pid_ = Spawn(argv, env, fd, fd);
  close(fd);
}

Background::~Background() {
  if (pid_ > 0) Stop(SIGKILL, 10);
}

int Background::Stop(int sig, int timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  int code = WaitExit(pid_, timeout_s);
  pid_ = -1;
  return code;
}

int Background::Wait(int timeout_s) {
  if (pid_ <= 0) return -1;
  int code = WaitExit(pid_, timeout_s);
  pid_ = -1;
  return code;
}

// MCD_BIN_DIR in the environment points the tests at a build folder copied to another host (a
// GPU runner without a compiler), where the build's own path does not exist.
std::string ToolPath(const std::string& tool) {
  const char* moved = std::getenv("MCD_BIN_DIR");
  return std::string(moved != nullptr && *moved != '\0' ? moved : MCD_BIN_DIR) + "/" + tool;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StreamInfo StreamInfoOf(RedisConnection& redis, const std::string& key) {
  auto info = redis.Command({"XINFO", "STREAM", key});
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  StreamInfo s;
  for (size_t i = 0; info.ok() && i + 1 < info->elements.size(); i += 2) {
    const std::string& field = info->elements[i].str;
    const RedisValue& value = info->elements[i + 1];
    if (field == "entries-added") s.added = value.integer;
    if (field == "length") s.length = value.integer;
    if (field == "first-entry" && !value.elements.empty()) s.first_id = value.elements[0].str;
    if (field == "last-generated-id") s.last_id = value.str;
  }
  return s;
}

int BlockedClients(RedisConnection& redis, const std::string& cmd) {
  auto list = redis.Command({"CLIENT", "LIST"});
  if (!list.ok()) return 0;
  int blocked = 0;
  std::istringstream lines(list->str);
  for (std::string line; std::getline(lines, line);) {
    size_t at = line.find(" flags=");
    std::string flags =
        at == std::string::npos ? "" : line.substr(at + 7, line.find(' ', at + 1) - at - 7);
    if (flags.find('b') != std::string::npos && line.find(" cmd=" + cmd + " ") != std::string::npos)
      ++blocked;
  }
  return blocked;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(random());
  return out;
}

std::string U8Npy(const std::string& data) {
  std::string header =
      "{'descr': '|u1', 'fortran_order': False, 'shape': (" + std::to_string(data.size()) + ",), }";
  header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size() & 0xff) +
         static_cast<char>(header.size() >> 8) + header + data;
}

std::vector<std::string> ShmObjects(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  closedir(dir);
  return out;
}

namespace {
// The fields of /proc/PID/stat after the command's closing parenthesis: state, ppid, ...
std::vector<std::string> StatFields(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos) return fields;
  std::istringstream in(stat.substr(close + 1));
  for (std::string field; in >> field && fields.size() < 2;) fields.push_back(field);
  return fields;
}
}  // namespace

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    auto fields = StatFields(static_cast<pid_t>(pid));
    if (fields.size() == 2 && fields[1] == std::to_string(parent))
      out.push_back(static_cast<pid_t>(pid));
  }
  closedir(dir);
  return out;
}

bool Running(pid_t pid) {
  auto fields = StatFields(pid);
  return fields.size() == 2 && fields[0] != "Z" && fields[0] != "X";
}

size_t FieldCount(const std::string& line) {
  std::istringstream in(line);
  return static_cast<size_t>(
      std::distance(std::istream_iterator<std::string>(in), std::istream_iterator<std::string>()));
}

bool WaitFor(const std::function<bool()>& predicate, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return predicate();
}

}  // namespace mcd::test

#include <cuda_runtime_api.h>

namespace mcd::test {
bool HasCudaDevice() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

std::vector<std::string> List(RedisConnection& redis, const std::string& key) {
  std::vector<std::string> out;
  auto v = redis.Command({"LRANGE", key, "0", "-1"});
  if (v.ok())
    for (auto& e : v->elements) out.push_back(e.str);
  return out;
}
}  // namespace mcd::test
