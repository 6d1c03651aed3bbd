// mcd-serve: the daemon that owns the GPU (and host) memory of a node and applies the commands
// of the lifecycle list. See mcd-serve(1).
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <thread>

#include "flags.h"
#include "memcuda/client.h"
#include "memcuda/private_redis.h"
#include "memcuda/server.h"

int main(int argc, char** argv) {
  using namespace mcd;
  CLI::App app{"mcd-serve: own GPU and host memory for named tensors and serve the Redis command list"};
  tools::SetupApp(app);
  app.footer(std::string(
                 "Examples:\n"
                 "  mcd-serve --spawn-redis            # private Redis on a Unix socket, all GPUs\n"
                 "  mcd-serve --redis-url redis://127.0.0.1:6379 --devices 0,1\n"
                 "  mcd-serve --devices cpu            # host memory only\n"
                 "  mcd-serve --allocator pool --pool-max 40GiB\n\n") +
             tools::kEnvironmentFooter);
  tools::CommonFlags flags;
  tools::AddConnectionFlags(app, flags);
  std::string devices = "all";
  bool spawn_redis = false;
  std::string redis_server = "redis-server";
  int heartbeat_ttl = 5;
  bool quiet = false;
  bool verbose = false;
  app.add_option("--devices", devices, "GPUs to serve: all, cpu (host only) or a list like 0,1")
      ->capture_default_str();
  app.add_flag("--spawn-redis", spawn_redis,
               "Start a private redis-server on a Unix socket in the runtime folder");
  app.add_option("--redis-server", redis_server, "redis-server binary for --spawn-redis")
      ->capture_default_str();
  app.add_option("--heartbeat-ttl", heartbeat_ttl, "Seconds a heartbeat stays valid")
      ->check(CLI::Range(2, 3600))
      ->capture_default_str();
  int req_ttl = 60;
  app.add_option("--req-ttl", req_ttl,
                 "Seconds a command's first reply is kept, so that a repeat of its req gets it "
                 "instead of being applied again")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  std::string allocator = "cuda", pool_max, pool_release, pool_group, pool_socket, command_socket,
      ready_max = "64MiB", slab_max = "32MiB";
  app.add_option("--allocator", allocator,
                 "GPU allocator: cuda (cudaMalloc + CUDA IPC, opened by any CUDA program) or pool "
                 "(stream-ordered IPC pool; clients need libmemcuda or the pool socket)")
      ->check(CLI::IsMember({"cuda", "pool"}))
      ->capture_default_str();
  app.add_option("--pool-max", pool_max, "Pool size limit per device: a size (40GiB) or a percentage (50%)");
  app.add_option("--pool-release-threshold", pool_release, "Bytes the pool keeps cached when idle (default: all)");
  app.add_option("--pool-group", pool_group,
                 "Group whose members may import the pool and use the command socket (default: same user only)");
  app.add_option("--pool-socket", pool_socket, "Unix socket serving the pool's descriptor (default: in the runtime folder)");
  app.add_option("--command-socket", command_socket,
                 "Unix socket on which local clients send commands straight to the server, past the "
                 "queue (default: in the runtime folder; none: only the queue)");
  app.add_option("--ready-max", ready_max,
                 "GPU memory per device kept as zeroed blocks of recently created sizes, so that "
                 "creates of those sizes wait for no allocation (0: none)")
      ->capture_default_str();
  app.add_option("--slab-max", slab_max,
                 "With --allocator cuda: the largest slab small tensors are carved from, so that a "
                 "process opening many of them opens few allocations (0: every tensor alone)")
      ->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "Log warnings and errors only");
  app.add_flag("-v,--verbose", verbose, "Log debug detail");
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;

  // Signals go to one thread (sigwait), which asks the server to stop; every other thread,
  // including the workers, inherits the blocked mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  ServerOptions options;
  options.keys.prefix = flags.prefix;
  options.keys.queue = flags.queue;
  options.node = flags.node;
  options.heartbeat_ttl_s = heartbeat_ttl;
  options.done_ttl_s = req_ttl;
  options.log_level = quiet ? 1 : verbose ? 3 : 2;
  options.allocator = allocator;
  options.pool_group = pool_group;
  options.pool_socket = pool_socket;
  options.command_socket = command_socket;
  if (!pool_max.empty()) {
    if (pool_max.back() == '%') {
      double percent = std::atof(pool_max.c_str());
      if (percent <= 0 || percent > 100) {
        return tools::Fail("mcd-serve", Status(ErrorCode::kInvalidArgument, "--pool-max percentage must be in (0, 100]"));
      }
      options.pool_max_fraction = percent / 100.0;
    } else {
      auto bytes = tools::ParseSize(pool_max);
      if (!bytes.ok()) return tools::Fail("mcd-serve", bytes.status());
      options.pool_max_bytes = bytes.value();
    }
  }
  if (!pool_release.empty()) {
    auto bytes = tools::ParseSize(pool_release);
    if (!bytes.ok()) return tools::Fail("mcd-serve", bytes.status());
    options.pool_release_threshold = bytes.value();
  }
  {
    auto bytes = tools::ParseSize(ready_max);
    if (!bytes.ok()) return tools::Fail("mcd-serve", bytes.status());
    options.ready_max_bytes = bytes.value();
  }
  {
    auto bytes = tools::ParseSize(slab_max);
    if (!bytes.ok()) return tools::Fail("mcd-serve", bytes.status());
    options.ipc_slab_max_bytes = bytes.value();
  }
  if (devices == "cpu") {
    options.all_devices = false;
  } else if (devices != "all") {
    options.all_devices = false;
    for (const std::string& part : tools::SplitList(devices)) {
      auto device = ParseDevice(part);
      if (!device.ok()) return tools::Fail("mcd-serve", device.status());
      if (device.value() != kHostDevice) options.devices.push_back(device.value());
    }
  }

  std::unique_ptr<PrivateRedis> private_redis;
  if (spawn_redis) {
    if (!flags.redis_url.empty()) {
      return tools::Fail("mcd-serve", Status(ErrorCode::kInvalidArgument,
                                             "--spawn-redis and --redis-url exclude each other"));
    }
    auto started = PrivateRedis::Start(redis_server);
    if (!started.ok()) return tools::Fail("mcd-serve", started.status());
    private_redis = std::move(started).value();
    options.redis_url = private_redis->url();
    std::cerr << "mcd-serve: private Redis at " << options.redis_url.Redacted()
              << " (found by the other tools with no flag)\n";
  } else {
    auto url = ResolveRedisUrl(flags.redis_url);
    if (!url.ok()) return tools::Fail("mcd-serve", url.status());
    options.redis_url = url.value();
  }

  auto server = Server::Start(options);
  if (!server.ok()) return tools::Fail("mcd-serve", server.status());

  std::thread signal_thread([&stop_signals, srv = server.value().get()] {
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    srv->RequestStop();
  });
  Status ran = server.value()->Run();
  server.value()->Shutdown();
  // Wake the signal thread if Run() ended without a signal.
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  server.value().reset();
  private_redis.reset();
  if (!ran.ok()) return tools::Fail("mcd-serve", ran);
  return 0;
}
