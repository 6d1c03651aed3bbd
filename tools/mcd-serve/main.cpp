// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-serve: the daemon that owns the GPU (and host) memory of a node and applies the commands
// of the lifecycle list. See mcd-serve(1).
#include <dlfcn.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "flags.h"
#include "memcuda/client.h"
#include "memcuda/private_redis.h"
#include "memcuda/server.h"

namespace mcd {
namespace {

// "256MiB": a default size as the flags take it.
std::string MiB(uint64_t bytes) { return std::to_string(bytes >> 20) + "MiB"; }

// The flags as given, before they are checked and turned into ServerOptions.
struct ServeFlags {
  tools::CommonFlags common;
  std::string devices = "all";
  bool spawn_redis = false;
  std::string redis_server = "redis-server";
  int heartbeat_ttl = 5;
  int req_ttl = 60;
  uint64_t event_history = 10000;
  bool no_node_copies = false;
  bool stage_gpu_copies = false;
  double wait_for_redis = 0;
  std::string allocator = "cuda", pool_max, pool_release, pool_group, pool_socket, command_socket;
  // The library's defaults, shown in --help as they are given.
  std::string ready_max =
      std::to_string(static_cast<int>(ServerOptions{}.ready_max_fraction * 100)) + "%";
  std::string slab_max = MiB(ServerOptions{}.ipc_slab_max_bytes);
  bool quiet = false;
  bool verbose = false;
};

void AddFlags(CLI::App& app, ServeFlags& f) {
  app.footer(std::string(
                 "Examples:\n"
                 "  mcd-serve --spawn-redis            # private Redis on a Unix socket, all GPUs\n"
                 "  mcd-serve --redis-url redis://127.0.0.1:6379 --devices 0,1\n"
                 "  mcd-serve --devices cpu            # host memory only\n"
                 "  mcd-serve --allocator pool --pool-max 40GiB\n\n") +
             tools::kEnvironmentFooter);
  tools::AddConnectionFlags(app, f.common);
  app.get_option("--node")->description(
      "The node this server serves (default: MCD_NODE, else the host name)");
  app.add_option("--devices", f.devices, "GPUs to serve: all, cpu (host only) or a list like 0,1")
      ->capture_default_str();
  app.add_flag("--spawn-redis", f.spawn_redis,
               "Start a private redis-server on a Unix socket in the runtime folder");
  app.add_option("--wait-for-redis", f.wait_for_redis,
                 "Seconds to wait at start for a Redis that does not answer yet (started after "
                 "this server, or still loading its data), trying every half second; 0: fail "
                 "at once (exit 69)")
      ->check(CLI::Range(0.0, 86400.0))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)  // the unit's, then the admin's
      ->capture_default_str();
  app.add_option("--redis-server", f.redis_server, "redis-server binary for --spawn-redis")
      ->capture_default_str();
  app.add_option("--heartbeat-ttl", f.heartbeat_ttl, "Seconds a heartbeat stays valid")
      ->check(CLI::Range(2, kMaxHeartbeatTtlS))
      ->capture_default_str();
  app.add_option("--req-ttl", f.req_ttl,
                 "Seconds a command's first reply is kept, so that a repeat of its req gets it "
                 "instead of being applied again")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_option("--event-history", f.event_history,
                 "Lifecycle events kept in Redis for mcd-ls --watch and the waits of mcd-get and "
                 "mcd-rm, under 100 bytes each in Redis (0: none, and those cannot work)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{100000000}))
      ->capture_default_str();
  app.add_flag("--no-node-copies", f.no_node_copies,
               "Neither serve copies of this node's tensors to other nodes' servers nor fetch "
               "theirs (mcd-create --copy-of); on by default where UCX is installed");
  app.add_flag("--stage-gpu-copies", f.stage_gpu_copies,
               "Stage GPU tensors of copies between nodes through pinned host memory even where "
               "UCX reads and writes GPU memory itself (a CUDA-aware UCX), which it otherwise does "
               "in place");
  app.add_option("--allocator", f.allocator,
                 "GPU allocator: cuda (cudaMalloc + CUDA IPC, opened by any CUDA program) or pool "
                 "(stream-ordered IPC pool; clients need libmemcuda or the pool socket)")
      ->check(CLI::IsMember({"cuda", "pool"}))
      ->capture_default_str();
  app.add_option("--pool-max", f.pool_max,
                 "Pool size limit per device: a size (40GiB) or a percentage (50%)");
  app.add_option("--pool-release-threshold", f.pool_release,
                 "Bytes the pool keeps cached when idle (default: all)");
  app.add_option("--pool-group", f.pool_group,
                 "Group whose members may import the pool and use the command socket (default: "
                 "same user only)");
  app.add_option("--pool-socket", f.pool_socket,
                 "Unix socket serving the pool's descriptor (default: in the runtime folder)");
  app.add_option(
      "--command-socket", f.command_socket,
      "Unix socket on which local clients send commands straight to the server, past the "
      "queue (default: in the runtime folder; none: only the queue)");
  app.add_option("--ready-max", f.ready_max,
                 "GPU memory per device kept at most as zeroed blocks of recently created sizes, "
                 "so that creates of those sizes wait for no allocation; what it holds follows "
                 "demand (SIZE, or N% of the device; 0: none). Host memory the same, of "
                 "/dev/shm, for creates that write every byte (copies, fills)")
      ->capture_default_str();
  app.add_option("--slab-max", f.slab_max,
                 "With --allocator cuda: the largest slab small tensors are carved from, so that a "
                 "process opening many of them opens few allocations (0: every tensor alone)")
      ->capture_default_str();
  app.add_flag("-q,--quiet", f.quiet, "Log warnings and errors only");
  app.add_flag("-v,--verbose", f.verbose, "Log debug detail");
}

// A size flag that may also be a share of the device ("25%"): sets `bytes`, or `fraction` (in
// (0, 1]) with `bytes` 0.
Status ParseSizeOrShare(const std::string& flag, const std::string& text, uint64_t& bytes,
                        double& fraction) {
  if (!text.empty() && text.back() == '%') {
    // The number before the sign as a size without unit: decimal digits, one point at most.
    auto number = tools::ParseSize(text.substr(0, text.size() - 1));
    double percent = number.ok() ? std::strtod(text.c_str(), nullptr) : -1;
    if (!number.ok() || !(percent > 0 && percent <= 100)) {
      return Status(ErrorCode::kInvalidArgument,
                    flag + " '" + text + "': a share of the device is N% with 0 < N <= 100");
    }
    bytes = 0;
    fraction = percent / 100.0;
    return Status::Ok();
  }
  auto size = tools::ParseSize(text);
  if (!size.ok()) return Status(size.status().code(), flag + ": " + size.status().message());
  bytes = size.value();
  fraction = 0;
  return Status::Ok();
}

// The sizes of the flags (--pool-max, --pool-release-threshold, --ready-max, --slab-max).
Status ParseSizes(const ServeFlags& f, ServerOptions& options) {
  if (!f.pool_max.empty()) {
    MCD_RETURN_IF_ERROR(ParseSizeOrShare("--pool-max", f.pool_max, options.pool_max_bytes,
                                         options.pool_max_fraction));
  }
  if (!f.pool_release.empty()) {
    MCD_ASSIGN_OR_RETURN(options.pool_release_threshold, tools::ParseSize(f.pool_release));
  }
  MCD_RETURN_IF_ERROR(ParseSizeOrShare("--ready-max", f.ready_max, options.ready_max_bytes,
                                       options.ready_max_fraction));
  MCD_ASSIGN_OR_RETURN(options.ipc_slab_max_bytes, tools::ParseSize(f.slab_max));
  return Status::Ok();
}

Result<ServerOptions> MakeOptions(const ServeFlags& f) {
  ServerOptions options;
  options.keys.prefix = f.common.prefix;
  options.keys.queue = f.common.queue;
  options.node = f.common.node;
  options.heartbeat_ttl_s = f.heartbeat_ttl;
  options.done_ttl_s = f.req_ttl;
  options.event_history = f.event_history;
  options.node_copies = !f.no_node_copies;
  options.stage_gpu_copies = f.stage_gpu_copies;
  options.log_level = f.quiet ? 1 : f.verbose ? 3 : 2;
  options.allocator = f.allocator;
  options.pool_group = f.pool_group;
  options.pool_socket = f.pool_socket;
  options.command_socket = f.command_socket;
  MCD_RETURN_IF_ERROR(ParseSizes(f, options));
  if (f.devices != "all") {
    options.all_devices = false;
    if (f.devices != "cpu") {
      for (const std::string& part : tools::SplitList(f.devices)) {
        MCD_ASSIGN_OR_RETURN(int device, ParseDevice(part));
        if (device != kHostDevice) options.devices.push_back(device);
      }
    }
  }
  if (f.spawn_redis && !f.common.redis_url.empty()) {
    return Status(ErrorCode::kInvalidArgument, "--spawn-redis and --redis-url exclude each other");
  }
  if (!f.spawn_redis) {
    MCD_ASSIGN_OR_RETURN(options.redis_url, ResolveRedisUrl(f.common.redis_url));
  }
  return options;
}

// Serves until SIGTERM or SIGINT. Signals go to one thread (sigwait), which asks the server to
// stop; every other thread, the workers included, inherits the blocked mask. A private Redis is
// watched by a thread of its own: restarted when it dies (the server puts its tensors' hashes
// back), or the server stops with the reason when it cannot be.
// Tells systemd (Type=notify) how the service stands, through libsystemd's sd_notify. The
// library is opened only under a service manager (NOTIFY_SOCKET set), so that mcd-serve needs
// no libsystemd where nothing listens (a GPU host's bare container, say).
void NotifyServiceManager(const std::string& state) {
  if (std::getenv("NOTIFY_SOCKET") == nullptr) return;
  using SdNotify = int (*)(int, const char*);
  static SdNotify notify = [] {
    void* lib = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
    return lib != nullptr ? reinterpret_cast<SdNotify>(dlsym(lib, "sd_notify")) : nullptr;
  }();
  if (notify == nullptr) {
    std::cerr << "mcd-serve: NOTIFY_SOCKET is set but libsystemd.so.0 cannot be loaded: the "
                 "service manager is not told that the server is ready\n";
    return;
  }
  notify(0, state.c_str());
}

// A line of mcd-serve's own (outside the Server): to the journal with its priority under
// systemd, else as the tools write theirs.
void Say(int level, const std::string& message) {
  if (ServerLogsToJournal()) {
    ServerLog(level, message);  // escaped there, as every log line is
  } else {
    std::cerr << "mcd-serve: " << tools::Escaped(message) << "\n";  // it quotes Redis's words
  }
}

// Whether a failure to reach Redis may pass by itself: nothing listening yet, no answer, a
// Redis loading its data. A refused password or user will not, and ends the wait at once.
bool PassesByItself(const Status& status) {
  ErrorCode code = status.code();
  return code == ErrorCode::kUnavailable || code == ErrorCode::kTryAgain ||
         code == ErrorCode::kTimeout;
}

// --wait-for-redis: a Redis that does not answer yet (a service started after this one at boot,
// or one still loading its data) is tried again every half second for up to `seconds`; the
// service manager hears why the start takes long, and gives it the time (EXTEND_TIMEOUT_USEC). A
// stop signal ends the wait: exit 0 then, as a stop while serving does. Returns whether to go on
// and serve.
Result<bool> WaitForRedis(const RedisUrl& url, double seconds, const sigset_t& stop_signals) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  RedisOptions ropt;
  ropt.connect_timeout_ms = 1000;
  bool said = false;
  for (;;) {
    auto conn = RedisConnection::Connect(url, ropt);
    Status answered = conn.ok() ? conn.value()->Command({"PING"}).status() : conn.status();
    if (answered.ok()) {
      if (said) {
        Say(2, "Redis at " + url.Redacted() + " answers");
        // The start itself (CUDA on every device, the node's clean-up) gets time of its own.
        NotifyServiceManager("EXTEND_TIMEOUT_USEC=120000000");
      }
      return true;
    }
    if (!PassesByItself(answered)) return answered;
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status(ErrorCode::kUnavailable, "Redis at " + url.Redacted() +
                                                 " did not answer within --wait-for-redis (" +
                                                 answered.message() + ")");
    }
    if (!said) {
      char limit[32];
      std::snprintf(limit, sizeof(limit), "%g", seconds);
      Say(2, "waiting for Redis at " + url.Redacted() + " (" + answered.message() + "), up to " +
                 limit + " s (--wait-for-redis)");
      said = true;
    }
    // Each try asks for 10 s more than the unit's TimeoutStartSec= (Type=notify).
    NotifyServiceManager("STATUS=waiting for Redis at " + url.Redacted() +
                         "\nEXTEND_TIMEOUT_USEC=10000000");
    timespec half_second{0, 500 * 1000 * 1000};
    if (sigtimedwait(&stop_signals, nullptr, &half_second) > 0) {
      Say(2, "stopped while waiting for Redis: nothing was served");
      return false;
    }
  }
}

Status Serve(const ServerOptions& options, double wait_for_redis, PrivateRedis* private_redis) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  if (wait_for_redis > 0) {
    MCD_ASSIGN_OR_RETURN(bool go_on, WaitForRedis(options.redis_url, wait_for_redis, stop_signals));
    if (!go_on) return Status::Ok();
  }
  MCD_ASSIGN_OR_RETURN(std::unique_ptr<Server> server, Server::Start(options));
  NotifyServiceManager("READY=1\nSTATUS=serving");
  std::thread signal_thread([&stop_signals, srv = server.get()] {
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    srv->RequestStop();
  });
  std::atomic<bool> serving{true};
  Status redis_lost;
  std::thread redis_watch([&] {
    while (private_redis != nullptr && serving.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      auto restarted = private_redis->KeepRunning();
      if (!restarted.ok()) {
        redis_lost = restarted.status();
        server->RequestStop();
        return;
      }
      if (restarted.value()) {
        std::cerr << "mcd-serve: the private Redis died; restarted it at "
                  << private_redis->url().Redacted() << "\n";
      }
    }
  });
  Status ran = server->Run();
  NotifyServiceManager("STOPPING=1\nSTATUS=freeing the node's tensors");
  serving = false;
  redis_watch.join();
  server->Shutdown();
  // Wake the signal thread if Run() ended without a signal.
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  return redis_lost.ok() ? ran : redis_lost;
}

}  // namespace
}  // namespace mcd

static int ToolMain(int argc, char** argv) {
  using namespace mcd;
  CLI::App app{
      "mcd-serve: own GPU and host memory for named tensors and serve the Redis command list"};
  tools::SetupApp(app);
  ServeFlags flags;
  AddFlags(app, flags);
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  auto options = MakeOptions(flags);
  if (!options.ok()) return tools::Fail("mcd-serve", options.status());
  std::unique_ptr<PrivateRedis> private_redis;
  if (flags.spawn_redis) {
    auto started = PrivateRedis::Start(flags.redis_server);
    if (!started.ok()) return tools::Fail("mcd-serve", started.status());
    private_redis = std::move(started).value();
    options->redis_url = private_redis->url();
    std::cerr << "mcd-serve: private Redis at " << options->redis_url.Redacted()
              << " (found by the other tools with no flag)\n";
  }
  Status served = Serve(options.value(), flags.wait_for_redis, private_redis.get());
  private_redis.reset();
  if (served.ok()) return 0;
  if (!ServerLogsToJournal()) return tools::Fail("mcd-serve", served);
  ServerLog(0, served.message() + " (" + std::string(ErrorName(served.code())) + ")");
  return ExitCodeFor(served.code());
}

int main(int argc, char** argv) { return mcd::tools::Guarded("mcd-serve", ToolMain, argc, argv); }
