// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The daemon that owns the memory: consumes the lifecycle list and applies each command through
// the device's GpuWorker (man mcd-serve(1), memcuda(7)). Public because mcd-serve and
// `mcd-bench --self-serve` run it in their own process; its parts are private (lib/src/server/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memcuda/export.h"
#include "memcuda/keys.h"
#include "memcuda/redis.h"
#include "memcuda/status.h"

namespace mcd {

// The longest heartbeat TTL a server sets: a heartbeat that expires later was not written by a
// server, and does not keep a node from being served.
inline constexpr int kMaxHeartbeatTtlS = 3600;

struct MCD_API ServerOptions {
  RedisUrl redis_url;
  KeySpace keys;
  std::string node;          // default: the host name
  bool all_devices = true;   // every CUDA device on the machine
  std::vector<int> devices;  // when !all_devices (host memory, "cpu", is always served)
  int heartbeat_ttl_s = 5;   // 1 to kMaxHeartbeatTtlS
  int reply_ttl_s = 60;      // lifetime of <prefix>:reply:<req>
  int done_ttl_s = 60;       // how long a repeated req is recognised (its first reply kept)
  int log_level = 2;         // 0 error, 1 warn, 2 info, 3 debug
  // GPU allocator: "cuda" (cudaMalloc + cudaIpcGetMemHandle, opened by any CUDA program) or
  // "pool" (an IPC-capable stream-ordered pool per device; its descriptor is served on a Unix
  // socket to processes of the same user, or of `pool_group`).
  std::string allocator = "cuda";
  uint64_t pool_max_bytes = 0;                   // 0: the whole device
  double pool_max_fraction = 0;                  // > 0: this fraction of the device instead
  uint64_t pool_release_threshold = UINT64_MAX;  // bytes the pool keeps cached when idle
  std::string pool_group;  // group allowed besides the server's user ("" = none)
  // GPU memory per device kept at most as zeroed blocks of recently created sizes (up to half
  // of it each), so that such creates need no allocation on their path: ready_max_bytes when
  // > 0, else ready_max_fraction of the device's memory; both 0: none. What it holds follows
  // demand (memcuda(7) and mcd-serve(1), --ready-max).
  uint64_t ready_max_bytes = 0;
  double ready_max_fraction = 0.25;
  // "cuda": the largest slab that small tensors are carved from, so that a process opening
  // many of them opens few allocations (memcuda(7), SLABS); 0: every tensor its own cudaMalloc.
  uint64_t ipc_slab_max_bytes = 32ull << 20;
  std::string pool_socket;  // default: <runtime dir>/pool-<node>-<instance>.sock
  // Where processes of this machine may send commands straight to the server (memcuda(7));
  // default: <runtime dir>/cmd-<node>-<instance>.sock; "none": no command socket.
  std::string command_socket;
  // How many lifecycle events the stream <prefix>:events keeps, about (memcuda(7), EVENTS); 0:
  // none are written, and waits (mcd-get --wait) and watches cannot work.
  uint64_t event_history = 10000;
  // Serve copies of this node's tensors to other nodes' servers, and fetch theirs for creates
  // with copy_of, over UCX (docs/scale-out.md).
  bool node_copies = true;
  // Stage GPU tensors of those copies through pinned host memory even where the UCX at hand
  // reads and writes GPU memory itself (which it then does in place).
  bool stage_gpu_copies = false;
};

// Lifecycle: Start() connects, refuses to run beside a live instance of the same node, removes
// hashes (and host shm objects) of this node left by dead instances, and starts the heartbeat.
// Run() serves until RequestStop(). Shutdown (also done by the destructor) frees every tensor
// this instance owns, deletes their hashes and the heartbeat.
class MCD_API Server {
 public:
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves until RequestStop(); returns after the command in flight is finished. Survives Redis
  // restarts (reconnects with backoff). Main thread only.
  Status Run();
  // Thread-safe; wakes a blocked Run() at once. Not async-signal-safe: call it from a signal
  // thread (sigwait), not from a handler.
  void RequestStop();
  // Frees everything this instance owns and removes its heartbeat. Idempotent.
  void Shutdown();

  const std::string& instance_id() const;
  const std::string& node() const;

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// For what mcd-serve says outside the Server (its wait for Redis, why it exits), under systemd:
// whether stderr is the journal's stream (JOURNAL_STREAM names it), and a line there as the
// server's own are written, with its syslog priority (level: 0 error, 1 warn, 2 info, 3 debug).
MCD_API bool ServerLogsToJournal();
MCD_API void ServerLog(int level, const std::string& message);

}  // namespace mcd
