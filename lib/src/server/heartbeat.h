// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The node's heartbeat (<prefix>:server:<node>): claimed at start (refused while another live
// instance holds the node), then rewritten by a thread every TTL/4 with what clients read from
// it (sockets, primers, pool descriptors) and the server's counters, until the server's stop
// (StopSignal). The heartbeat thread is what notices a node taken over (it asks for the stop
// then), and what wakes the main connection's blocking take when the server stops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "memcuda/heartbeat.h"
#include "memcuda/keys.h"
#include "memcuda/redis.h"
#include "redis/script_calls.h"
#include "server/device_set.h"
#include "server/outcome_log.h"
#include "server/stop_signal.h"
#include "server/tensor_table.h"

namespace mcd {

// The server's options the heartbeat reads.
struct HeartbeatOptions {
  std::string node;
  KeySpace keys;
  RedisUrl redis_url;  // for the heartbeat thread's own connection
  int ttl_s = 5;
  uint64_t event_history = 0;  // the event stream's cap
};

class Heartbeat {
 public:
  // Starts the heartbeat thread, named ThreadName(instance) from before the first claim, which
  // waits for Start() to write, and then beats until `stop` is asked.
  // `devices`, `table` and `outcomes` are what it publishes: served devices, primers, pool
  // descriptors and byte counts, and the counters.
  Heartbeat(HeartbeatOptions opt, std::string instance, StopSignal& stop, DeviceSet& devices,
            const TensorTable& table, const OutcomeLog& outcomes);
  ~Heartbeat() { Stop(); }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Named in the heartbeat from the next write on ("" for none). Before Start() only.
  void set_pool_socket(std::string path) { pool_socket_ = std::move(path); }
  void set_command_socket(std::string path) { command_socket_ = std::move(path); }
  // Before Start: the UCX address other servers fetch copies from and its UCX version ("" for
  // none), and how this server's tensors travel in those copies ("in_place", "staged": GPU
  // tensors through pinned host memory, or "off").
  void set_node_copies(std::string address, std::string ucx_version, std::string gpu_path) {
    ucx_address_ = std::move(address);
    ucx_version_ = std::move(ucx_version);
    node_copies_ = std::move(gpu_path);
  }

  // Writes the heartbeat, taking the node over from an instance whose process is gone;
  // kAlreadyExists while a live one holds it.
  Status Claim(RedisConnection& conn);
  // The name of instance `instance`'s heartbeat thread, which anyone on the machine may read in
  // /proc: a heartbeat keeps the node only while the process it names has it.
  static std::string ThreadName(const std::string& instance);
  // Lets the thread rewrite the heartbeat. `on_stop` runs on that thread once the stop is asked
  // (the node lost asks it too): it wakes the main thread's blocking take (Waker, intake.h).
  void Start(std::function<void()> on_stop);
  // Ends the thread: asks for the server's stop, which the thread beats until, and waits for it.
  // Idempotent.
  void Stop();
  // Why the node was lost to another instance ("" when it was not).
  std::string node_lost();
  // Once the server serves what it holds in this Redis (at start, and after each resettle): a
  // script of its own is loaded there, and the heartbeat names it from now on as `settled`.
  // Redis keeps scripts in memory only, neither in its AOF or RDB nor on its replicas, so a
  // heartbeat whose `settled` script is missing is one a restarted or promoted Redis has while
  // the server has not yet put its hashes back: clients answer "try again" for a missing tensor
  // then, not "not found". Main thread only.
  Status MarkSettled(RedisConnection& conn);
  // True when the heartbeat thread found the `settled` script gone from Redis (a restart or a
  // failover the main connection has not met yet, or SCRIPT FLUSH): the server resettles.
  bool settled_lost() const { return settled_lost_.load(); }
  // Deletes the heartbeat if this instance still holds it: shutdown.
  void Remove(RedisConnection& conn);
  bool owned() const { return owned_; }

 private:
  using NodeHolder = HeartbeatHolder;
  // Why `holder` cannot be a live server ("" when it may be): a heartbeat anyone may have
  // written to Redis must not keep the node from being served.
  static std::string Stale(const NodeHolder& holder);
  // The heartbeat as this instance writes it now.
  HeartbeatRecord Record();
  // device_tensors: every device served (devices_text), with its tensors and their bytes
  // (`counts`, the table's by device).
  std::string DeviceTensorsText(std::map<int, TensorTable::DeviceCount> counts) const;
  // Writes this instance's heartbeat, unless an instance other than `replace` holds the node:
  // then nothing is written, and that instance is returned.
  Result<std::optional<NodeHolder>> Write(RedisConnection& conn, const std::string& replace = "");
  // The thread: waits for Start() (or a stop before it), then rewrites the heartbeat.
  void Run();
  void Loop(const std::function<void()>& on_stop);
  // Whether Redis still has the `settled` script; sets settled_lost_ when it has not.
  void CheckSettled(RedisConnection& conn);
  std::string settled();

  const HeartbeatOptions opt_;
  const std::string instance_;
  StopSignal& stop_;
  DeviceSet& devices_;
  const TensorTable& table_;
  const OutcomeLog& outcomes_;
  int64_t started_ms_ = 0;
  uint64_t pid_start_ = 0;  // ProcessStartTime(getpid())
  uint64_t pid_ino_ = 0;    // PidfdInode(getpid()), 0 without pidfs
  std::string pool_socket_;
  std::string command_socket_;
  std::string ucx_address_;
  std::string ucx_version_;
  std::string node_copies_ = "off";
  std::atomic<uint64_t> pool_used_{0};
  std::atomic<bool> owned_{false};  // claimed: later writes that find no heartbeat reclaim

  std::mutex mutex_;
  std::condition_variable wake_;  // Start() or Stop() for a thread not started yet
  bool quit_ = false;             // under mutex_: Stop() came
  std::string node_lost_;         // under mutex_
  std::string settled_;           // under mutex_: the SHA of the script MarkSettled loaded last
  std::atomic<bool> settled_lost_{false};  // written under mutex_
  std::function<void()> on_stop_;          // under mutex_; set by Start()
  bool started_ = false;                   // under mutex_
  std::thread thread_;
};

}  // namespace mcd
