// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The heartbeat of a node's server (<prefix>:server:<node>, man memcuda(7)) as a typed record,
// and its one codec: the record to the hash's field/value pairs, as the server writes them, and
// back, as every reader (clients, mcd-ls) reads them. Every heartbeat field is named here and
// nowhere else in C++; heartbeat.lua, which writes the pairs, names the few it reads itself.
// Pure functions; no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "memcuda/export.h"
#include "memcuda/redis.h"
#include "memcuda/status.h"

namespace mcd {

// The field names, for a reader that HMGETs a few of them rather than the whole hash.
namespace heartbeat_field {
inline constexpr char kInstance[] = "instance";
inline constexpr char kPid[] = "pid";
inline constexpr char kPidStart[] = "pid_start";
inline constexpr char kPidIno[] = "pid_ino";
inline constexpr char kPidSpace[] = "pid_space";
inline constexpr char kNode[] = "node";
inline constexpr char kDevices[] = "devices";
inline constexpr char kAllocator[] = "allocator";
inline constexpr char kPoolSocket[] = "pool_socket";
inline constexpr char kPoolFd[] = "pool_fd";
inline constexpr char kIpcPrimer[] = "ipc_primer";
inline constexpr char kPoolPrimer[] = "pool_primer";
inline constexpr char kCommandSocket[] = "command_socket";
inline constexpr char kUcxAddress[] = "ucx_address";
inline constexpr char kUcxVersion[] = "ucx_version";
inline constexpr char kNodeCopies[] = "node_copies";
inline constexpr char kPoolUsed[] = "pool_used";
inline constexpr char kReadyBytes[] = "ready_bytes";
inline constexpr char kSlabBytes[] = "slab_bytes";
inline constexpr char kSlabFreeBytes[] = "slab_free_bytes";
inline constexpr char kStarted[] = "started";
inline constexpr char kQueue[] = "queue";
inline constexpr char kNodeQueue[] = "node_queue";
inline constexpr char kVersion[] = "version";
inline constexpr char kEventHistory[] = "event_history";
inline constexpr char kTensors[] = "tensors";
inline constexpr char kTensorBytes[] = "tensor_bytes";
inline constexpr char kDeviceTensors[] = "device_tensors";
inline constexpr char kCommandsOk[] = "commands_ok";
inline constexpr char kSettled[] = "settled";
inline constexpr char kCommandsFailed[] = "commands_failed";
inline constexpr char kErrorsPrefix[] = "errors_";    // errors_<code>: one per error code met
inline constexpr char kLatencyPrefix[] = "latency_";  // latency_<op>: one per timed op
}  // namespace heartbeat_field

// A number that is 0 reads as "not given" where said.
struct MCD_API HeartbeatRecord {
  // Who holds the node: the server instance (random hex) and its process.
  std::string instance;
  int64_t pid = 0;
  uint64_t pid_start = 0;  // clock ticks since boot at its start (0: not given)
  uint64_t pid_ino = 0;    // its pidfd's inode (0: no pidfs; written as "")
  std::string pid_space;   // "<boot id>/<PID namespace inode>": where `pid` names it
  std::string node;
  // What it serves and how a client reaches it.
  std::string devices;         // "cpu,0,1"
  std::string allocator;       // "0:cuda_mempool,cpu:host_shm"
  std::string pool_socket;     // "" for none
  std::string pool_fd;         // "0:<fd>,...": the pools' descriptors in the server process
  std::string ipc_primer;      // "0:<hex of a cudaIpcMemHandle_t>,..."
  std::string pool_primer;     // "0:<hex of a cudaMemPoolPtrExportData>,..."
  std::string command_socket;  // "" for none
  std::string ucx_address;     // hex; "" when it does not copy between nodes
  std::string ucx_version;
  std::string node_copies;  // "in_place", "staged" or "off"
  // Its counters, rewritten with each beat.
  uint64_t pool_used = 0;
  uint64_t ready_bytes = 0;
  uint64_t slab_bytes = 0;
  uint64_t slab_free_bytes = 0;
  int64_t started_ms = 0;      // wall clock, ms since the epoch
  std::string queue;           // the shared list it takes commands from
  std::string node_queue;      // its own ("" from a server too old to have one)
  std::string version;         // of the heartbeat's layout: "1"
  uint64_t event_history = 0;  // the event stream's cap (0: it writes no events)
  uint64_t tensors = 0;
  uint64_t tensor_bytes = 0;
  // The same by device served: "cpu:<tensors>:<bytes>,0:<tensors>:<bytes>,..." ("" from a
  // server too old to write it).
  std::string device_tensors;
  uint64_t commands_ok = 0;
  // The SHA of the script the server loaded once it had put its hashes back in this Redis
  // (Heartbeat::MarkSettled); "" before.
  std::string settled;
  std::vector<std::pair<std::string, uint64_t>> errors;  // by error code
  uint64_t commands_failed = 0;                          // the sum of `errors`
  // By op: "<bound us>:<count>,...,+Inf:<count>;<sum us>;<count>" (OutcomeLog::LatencyText).
  std::vector<std::pair<std::string, std::string>> latency;
  // Fields this version does not know (a newer server's), kept as they are, so that the maps
  // of Client::ServerInfo and LiveServers hold what the hash holds.
  std::vector<std::pair<std::string, std::string>> other;
};

// The hash's field/value pairs, in the order the server writes them.
MCD_API std::vector<std::pair<std::string, std::string>> HeartbeatFields(
    const HeartbeatRecord& record);
// The record of a heartbeat's fields (HGETALL), which anyone with Redis credentials may have
// written: a number field must be a decimal number of its type, or empty or absent (0); a
// field this version does not know is kept in `other`. kUnexpectedReply naming the field and its
// value otherwise. Nothing is required: whether a record names a live server is the reader's call.
MCD_API Result<HeartbeatRecord> HeartbeatFromFields(
    const std::map<std::string, std::string>& fields);
// The record of a few of a heartbeat's fields: `reply` is HMGET's of `names`, in their order (a
// nil for a field the hash has not, or for a hash that does not exist: the record's `instance` is
// "" then). Each field is read and checked as HeartbeatFromFields does; the record's other
// fields are left empty. kUnexpectedReply for a reply that is no HMGET's of `names`.
MCD_API Result<HeartbeatRecord> HeartbeatFromHmget(const std::vector<const char*>& names,
                                                   const RedisValue& reply);
// The same pairs as a map, as Client::ServerInfo and Client::LiveServers give them.
MCD_API std::map<std::string, std::string> HeartbeatMap(const HeartbeatRecord& record);

}  // namespace mcd
