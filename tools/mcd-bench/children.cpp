// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "children.h"

#include "memcuda/unique_fd.h"

namespace mcd::bench {

namespace {

// A pipe's two ends, each with its owner.
bool Pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return false;
  read_end.reset(ends[0]);
  write_end.reset(ends[1]);
  return true;
}

}  // namespace

std::string SelfExe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "mcd-bench";
}

std::string TensorPrefix(pid_t bench) { return "bench." + std::to_string(bench) + "."; }
std::string TensorName(pid_t bench, const std::string& row, int i) {
  return TensorPrefix(bench) + row + "." + std::to_string(i);
}

Child SpawnChild(const std::vector<std::string>& args) {
  UniqueFd child_in, to_child, from_child, child_out;
  if (!Pipe(child_in, to_child) || !Pipe(from_child, child_out)) return {};
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    DieWithParent(parent);
    // dup2 clears close-on-exec on the copies; the originals close at exec.
    dup2(child_in.get(), STDIN_FILENO);
    dup2(child_out.get(), STDOUT_FILENO);
    std::vector<char*> argv;
    std::string exe = SelfExe();
    argv.push_back(exe.data());
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  // The FILE streams own the parent's ends from here.
  return Child{pid, fdopen(to_child.release(), "w"), fdopen(from_child.release(), "r")};
}

std::string ReadLine(FILE* f) {
  char* buf = nullptr;
  size_t capacity = 0;
  ssize_t n = getline(&buf, &capacity, f);
  std::string line = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  std::free(buf);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

std::string Ask(Child& child, const std::string& line) {
  std::fprintf(child.to, "%s\n", line.c_str());
  std::fflush(child.to);
  return ReadLine(child.from);
}

int WaitChild(Child& c) {
  if (c.to) std::fclose(c.to);
  if (c.from) std::fclose(c.from);
  int status = 0;
  waitpid(c.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 70;
}

Status Touch(const TensorView& view) {
  if (view.record.device == kHostDevice) {
    volatile const char* p = static_cast<const char*>(view.data);
    (void)p[0];
    return Status::Ok();
  }
  char byte = 0;
  cudaError_t err = cudaMemcpy(&byte, view.data, 1, cudaMemcpyDeviceToHost);
  return err == cudaSuccess ? Status::Ok() : Status(ErrorCode::kCudaError, cudaGetErrorString(err));
}

Result<std::unique_ptr<Client>> Connect(const tools::CommonFlags& flags) {
  MCD_ASSIGN_OR_RETURN(ClientOptions options, tools::MakeClientOptions(flags, true));
  return Client::Connect(options);
}

double ProcCpuSeconds(const std::string& stat_path) {
  std::ifstream in(stat_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t comm_end = text.rfind(')');  // the command name may hold spaces and parentheses
  if (comm_end == std::string::npos) return -1;
  std::istringstream fields(text.substr(comm_end + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  // After the name: fields 3 (state) to 13, then utime (14) and stime (15).
  for (int i = 3; i <= 13; ++i) fields >> field;
  if (!(fields >> utime >> stime)) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::unique_ptr<Client> ConnectOrDie(const tools::CommonFlags& flags) {
  auto client = Connect(flags);
  if (!client.ok()) std::exit(tools::Fail("mcd-bench", client.status()));
  return std::move(client).value();
}

int ChildShare(const tools::CommonFlags& flags, int device) {
  auto client = ConnectOrDie(flags);
  if (!client->Warmup(device).ok()) return 69;
  if (device != kHostDevice) cudaSetDevice(device);
  std::printf("ready\n");
  std::fflush(stdout);
  for (std::string line = ReadLine(stdin); !line.empty(); line = ReadLine(stdin)) {
    if (line.rfind("release ", 0) == 0) {
      auto t0 = Clock::now();
      auto released = client->Release(line.substr(8));
      double us = Us(t0, Clock::now());
      if (released.ok()) {
        std::printf("done %.3f\n", us);
      } else {
        std::printf("%s\n", released.status().ToString().c_str());
      }
    } else {
      auto t0 = Clock::now();
      auto view = client->Get(line);
      auto t1 = Clock::now();
      Status touched = view.ok() ? Touch(view.value()) : view.status();
      auto t2 = Clock::now();
      if (touched.ok()) {
        std::printf("ok %.3f %.3f\n", Us(t0, t1), Us(t1, t2));
      } else {
        std::printf("%s\n", touched.ToString().c_str());
      }
    }
    std::fflush(stdout);
  }
  return 0;
}

int ChildFirstGet(const tools::CommonFlags& flags, int device, const std::string& name) {
  auto connecting = Clock::now();
  auto client = ConnectOrDie(flags);
  double connect_us = Us(connecting, Clock::now());
  if (!client->Warmup(device).ok()) return 69;
  if (device != kHostDevice) {
    cudaSetDevice(device);
    cudaFree(nullptr);
  }
  auto t0 = Clock::now();
  auto view = client->Get(name);  // get + map
  auto t1 = Clock::now();
  Status touched = view.ok() ? Touch(view.value()) : view.status();
  if (!touched.ok()) return tools::Fail("mcd-bench", touched);
  std::printf("%.3f %.3f\n", Us(t0, t1), connect_us);
  return client->Release(name).ok() ? 0 : 70;
}

int ChildFirstRtt(const tools::CommonFlags& flags, int device) {
  auto url = ResolveRedisUrl(flags.redis_url);
  if (!url.ok()) return tools::Fail("mcd-bench", url.status());
  auto conn = RedisConnection::Connect(url.value());
  if (!conn.ok()) return tools::Fail("mcd-bench", conn.status());
  if (device != kHostDevice) {
    cudaSetDevice(device);
    cudaFree(nullptr);
  }
  auto t0 = Clock::now();
  auto pong = conn.value()->Command({"PING"});
  auto t1 = Clock::now();
  if (!pong.ok()) return tools::Fail("mcd-bench", pong.status());
  std::printf("%.3f\n", Us(t0, t1));
  return 0;
}

int ChildChurn(const tools::CommonFlags& flags, int device, uint64_t bytes, double seconds,
               int id) {
  auto client = ConnectOrDie(flags);
  CreateSpec spec;
  spec.dtype = DType::kU8;
  spec.shape = {static_cast<int64_t>(bytes)};
  spec.device = device;
  std::string line;
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::ostringstream out;
  int n = 0;
  while (Clock::now() < end) {
    spec.name = TensorName(getppid(), "churn" + std::to_string(id), n++);
    auto t0 = Clock::now();
    auto created = client->Create(spec);
    auto t1 = Clock::now();
    auto released =
        created.ok() ? client->Release(spec.name) : Result<TensorRecord>(created.status());
    if (!released.ok()) return tools::Fail("mcd-bench", released.status());
    out << " " << Us(t0, t1) << " " << Us(t1, Clock::now());
  }
  std::printf("%d%s\n", n, out.str().c_str());
  return 0;
}

// Gives back every reference still held on a tensor of this run, on a connection of its own
// (a row that failed may have left its own mid-request). Returns how many tensors it found:
// none after rows that all went through.
Result<size_t> GiveBackRunTensors(const tools::CommonFlags& flags) {
  MCD_ASSIGN_OR_RETURN(auto client, Connect(flags));
  MCD_ASSIGN_OR_RETURN(auto left, client->List(TensorPrefix(getpid()) + "*"));
  for (const TensorRecord& tensor : left) {
    for (int64_t held = std::max<int64_t>(tensor.refcount, 1); held > 0; --held) {
      auto released = client->ReleaseReference(tensor.name);
      if (released.status().code() == ErrorCode::kNotFound) break;
      MCD_RETURN_IF_ERROR(released.status());
      if (released->refcount <= 0) break;
    }
  }
  return left.size();
}

}  // namespace mcd::bench
