// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The client side of the lifecycle: send commands to mcd-serve through Redis, open tensors in
// this process, read their records (man memcuda(7)).
//
// Thread affinity: a Client is used by one thread at a time (it owns one Redis connection).
// Mappings it opens are process-wide and cached: a tensor opened twice is mapped once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "memcuda/export.h"
#include "memcuda/heartbeat.h"
#include "memcuda/keys.h"
#include "memcuda/protocol.h"
#include "memcuda/redis.h"
#include "memcuda/status.h"

namespace mcd {

struct MCD_API ClientOptions {
  RedisUrl redis_url;
  KeySpace keys;
  // Empty: MCD_NODE, else the host name; and when that node has no server and exactly one
  // server is live on the Redis, that one's node (see Client::node_discovered).
  std::string node;
  // Per request: command pushed to reply received. A request with no reply by then is taken
  // back off the queue when no server has taken it yet, and fails with nothing changed; the
  // error says when the server had taken it instead, and it may still take effect.
  int timeout_ms = 5000;
  bool require_server = true;  // Connect() fails with kUnavailable when no heartbeat is found
  // Creates and a creator's last release go to the server's command socket when its heartbeat
  // names one this process may use, past the queue (memcuda(7)); otherwise, or with this off,
  // through the queue. MCD_VIA_QUEUE=1 in the environment turns it off.
  bool command_socket = true;
  // Whose the references this client takes (Get) and gives back (Release) are: this process
  // (0, the default), the process of that pid (mcd-get binds them to its caller), or nobody
  // (kNoHolder). When a holder dies, its server gives its references back within about a
  // second; a reference bound to nobody lives until it is given back.
  int64_t holder_pid = 0;
};

inline constexpr int64_t kNoHolder = -1;

// The most tensors one batched call (Client::GetMany, ReleaseMany) names.
inline constexpr size_t kMaxBatch = 65536;

// Whether MCD_VIA_QUEUE in the environment (set, not empty, not "0") sends this process's
// commands through the queue, whatever ClientOptions::command_socket says.
MCD_API bool CommandsViaQueue();

struct MCD_API CreateSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int device = 0;  // or kHostDevice
  Lifetime lifetime = Lifetime::kHeap;
  bool zero_init = true;
  int64_t owner_pid = 0;  // stack tensors: bind to this process instead of the caller
  // The bytes of this tensor of another node, copied by the two servers (docs/scale-out.md);
  // dtype and shape must be its own. Empty: a new tensor, zeroed or not as zero_init says.
  std::string copy_of;
  // Host bytes to fill the new tensor with, exactly its size (not with copy_of). The server makes
  // it "creating", this client writes the bytes in and then publishes it "ready": until then a
  // get answers not_ready (a wait goes on waiting), no event names it, and if this process dies
  // first, the tensor goes. nullptr: no contents (zeroed or not, as zero_init says).
  const void* contents = nullptr;
  uint64_t contents_bytes = 0;
};

// A tensor set (memcuda(7), TENSOR SETS): tensors named "<name>/..." laid out in one allocation,
// each still a tensor of its own (its hash, refcount, dtype, shape and offset), which any client
// opens in place; a process that opens several maps the allocation once. The allocation goes
// when the last member is freed.
struct MCD_API CreateSetSpec {
  std::string name;
  std::vector<SetMember> members;  // name ("<name>/..."), dtype and shape each; bytes is derived
  int device = 0;                  // or kHostDevice
  Lifetime lifetime = Lifetime::kHeap;
  bool zero_init = true;
  // The host bytes of each member, in the order of `members`, each exactly its size; empty for
  // none. As CreateSpec::contents: the members are "creating" until every byte is in, and a
  // failure on the way leaves nothing behind.
  std::vector<const void*> contents;
};

// An opened tensor: `data` is valid in this process until Release() (or Close()). GPU work of
// this process that uses it must have finished by then: neither waits for it.
struct MCD_API TensorView {
  TensorRecord record;
  void* data = nullptr;  // device pointer (CUDA kinds) or host pointer (host_shm)
  // False when opened without a reference (Client::Open): the tensor may be removed meanwhile
  // and its memory given to another, so CopyToHost checks afterwards that it was not.
  bool referenced = true;
};

class MCD_API Client {
 public:
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends a create and waits for the reply; with CreateSpec::contents, also fills and publishes
  // it (a create that fails there leaves nothing behind). Returns the record (refcount 1).
  Result<TensorRecord> Create(const CreateSpec& spec);
  // Takes a reference (refcount+1, the get command's effect, done by an atomic script in one
  // Redis round trip) and opens the tensor in this process.
  Result<TensorView> Get(const std::string& name);
  // Get for several tensors (distinct names, at most kMaxBatch), all or nothing: on an error no
  // reference is kept, and the error names the tensor that stopped it. Up to the chunk size (64,
  // or MCD_GET_MANY_CHUNK; 0: no chunks), every reference is taken by one script call, one Redis
  // round trip, atomically. More, when the references are bound to this process (holder_pid 0,
  // the default, or its own pid), are taken a chunk per script call, each chunk opened while the
  // next call is under way: not atomically, so that on an error the references of the calls
  // before are given back (should that give-back fail too, Redis gone, they stay until this
  // process exits and its server's reaper takes them), and others may see their counts, and
  // their get and release events, meanwhile; a process killed between two calls leaves its
  // references to the reaper. Tensors that share an allocation (a tensor
  // set's members, tensors carved from one slab) are mapped once. Views in the order of `names`.
  // Not for Redis Cluster: the call names every tensor's keys at once.
  Result<std::vector<TensorView>> GetMany(const std::vector<std::string>& names);
  // Creates every member of a tensor set in one command (and fills them, with contents): all of
  // them or none. Returns the members' records (refcount 1 each), in the order of the spec's.
  // Not for Redis Cluster, as GetMany.
  Result<std::vector<TensorRecord>> CreateSet(const CreateSetSpec& spec);
  // Every member of tensor set `set` still there (one freed on its own has left the set), found
  // in one script call that takes one reference for the whole set, and opened with one mapping
  // of the set's allocation. Views sorted by name. The reference is the first view's (the member
  // first by name): the set's memory is one allocation that stays while any member lives, so it
  // keeps every member's bytes, whichever members are freed meanwhile. Give it back with
  // ReleaseSet, not Release of the members (a Release of the first would give it back, as this
  // process's own reference of that member). Each view's record is the first member's with the
  // member's own dtype, shape, bytes and offset, read from the set's record rather than from the
  // member's hash: its refcount is the first member's, which counts the set's references (a
  // member's own count, of gets of it alone: List). kNotFound when no member is left.
  Result<std::vector<TensorView>> GetSet(const std::string& set);
  // Closes the mappings of the views of one GetSet (all of them, in any order) and gives back
  // the reference it took. Returns the record of the member that held it, as Release does.
  Result<TensorRecord> ReleaseSet(const std::vector<TensorView>& views);
  // The names of the members of tensor set `set` still there, sorted (empty: no such set).
  Result<std::vector<std::string>> SetMembers(const std::string& set);
  // Loads safetensors file `path` into a new tensor set `set` on `device`: each tensor of the
  // file a member named "<set>/<its name>", of its dtype and shape (a scalar as shape [1]), in the
  // file's order; every dtype of the format that memcuda has (kInvalidArgument names the rest). All
  // of it or nothing, as CreateSet. Returns the members' records.
  Result<std::vector<TensorRecord>> LoadSafetensors(const std::string& path, const std::string& set,
                                                    int device,
                                                    Lifetime lifetime = Lifetime::kHeap);
  // Writes every member of tensor set `set` to safetensors file `path` (named without "<set>/",
  // sorted by name), holding the set's reference meanwhile. The file appears whole or not at all.
  Status SaveSafetensors(const std::string& set, const std::string& path);
  // The same of the views of one GetSet that the caller holds (and gives back after).
  Status SaveSafetensors(const std::vector<TensorView>& members, const std::string& path);
  // Opens the tensor without touching its refcount (it must be ready).
  Result<TensorView> Open(const std::string& name);
  // Closes this process's mapping of it, if any, and gives one reference back (refcount-1; the
  // last one through the server's delete command, which frees the memory). A tensor this
  // client created and whose refcount it last saw at 1 is released with the delete command at
  // once; others by the reference script, which queues the delete command only when
  // it finds the last reference. Returns the record as it was after the decrement.
  Result<TensorRecord> Release(const std::string& name);
  // Release for several tensors (distinct names, at most kMaxBatch): unmaps each here, then gives
  // one reference of each back in one script call, all or nothing as GetMany; the last
  // references queue their delete commands, whose replies come back in the same round trip.
  // Records in the order of `names`.
  Result<std::vector<TensorRecord>> ReleaseMany(const std::vector<std::string>& names);
  // Gives one reference back without touching this process's mappings.
  Result<TensorRecord> ReleaseReference(const std::string& name);
  // ReleaseReference of several tensors in one script call, all or nothing as ReleaseMany.
  Result<std::vector<TensorRecord>> ReleaseReferences(const std::vector<std::string>& names);
  // Closes this process's mapping of a tensor opened with Get/Open, without a delete command.
  Status Close(const std::string& name);
  // Closes the mapping of `view` itself: of two tensors of one name open here (a set's member
  // freed since, still held through its set, and a new tensor of its name), the one it views.
  Status Close(const TensorView& view);
  // The view of tensor `name` open in this process at `data` (for the C ABI, whose callers hold
  // the name and address of what they got); kNotFound when none is.
  Result<TensorView> Opened(const std::string& name, void* data);
  // Reads the hash without touching the refcount.
  Result<TensorRecord> Stat(const std::string& name);
  // Every tensor whose name matches `glob` (SCAN, never KEYS), sorted by name. Keys under the
  // tensor prefix that hold no readable tensor (a hash written by hand without its fields, a key
  // of another type) are left out; with `unreadable`, each is added there as "name: why".
  // With `holders`, each record's holders are read too (a whole hash per tensor). "SET/" is the
  // members of tensor set SET alone, not what else is named under it.
  Result<std::vector<TensorRecord>> List(const std::string& glob = "*",
                                         std::vector<std::string>* unreadable = nullptr,
                                         bool holders = false);
  // Only the names (SCAN alone; a set's list and its members' "set" field for "SET/"), sorted.
  Result<std::vector<std::string>> ListNames(const std::string& glob = "*");

  // Waits (client/waits.cpp) block on the event stream of memcuda/events.h, woken by the change
  // they wait for; a timeout < 0 waits without end. They need the node's server to keep events
  // (mcd-serve --event-history), else kUnavailable. A Redis away meanwhile (restarting, loading)
  // and kTryAgain are waited through to the end of their own timeout, whatever
  // ClientOptions::timeout_ms.
  //
  // Get (take_reference) or Open `name` as soon as it exists and is ready; kTimeout when it did
  // not within `timeout_ms`, having changed nothing.
  Result<TensorView> GetWhenReady(const std::string& name, int timeout_ms, bool take_reference);
  // GetSet of tensor set `set` as soon as it has a member and its members are ready (they are
  // made and published together); kTimeout when it had none within `timeout_ms`, having changed
  // nothing.
  Result<std::vector<TensorView>> GetSetWhenReady(const std::string& set, int timeout_ms);
  // Returns once the tensor `name` created at `ctime_ms` (TensorRecord::ctime_ms) is freed: its
  // hash gone, or another tensor of that name in its place. kTimeout when it is still held
  // after `timeout_ms`.
  Status WaitFreed(const std::string& name, int64_t ctime_ms, int timeout_ms);
  // Whether waits can run here: kUnavailable, saying why, when the node's server keeps no
  // events. A caller that changes something before it waits asks first.
  Status CanWait();

  // Copies between an opened tensor and host memory (device memory through the device's worker).
  // From a view without a reference (Open), CopyToHost then checks that the same tensor is
  // still there, and answers kNotFound if it was removed meanwhile (what was copied may then be
  // another tensor's bytes). A write through such a view cannot be checked: hold a reference
  // (Get) to write.
  Status CopyToHost(const TensorView& view, void* dst, uint64_t bytes);
  Status CopyFromHost(const TensorView& view, const void* src, uint64_t bytes);

  // Whether this client's references would be bound to init (pid 1: a process whose parent has
  // gone, a container's first process), which Get refuses since init never gives them back.
  bool BindsToInit() const;

  // Initialises this process's CUDA context and worker for `device` ahead of the first Get, so
  // that the first Get pays only for the mapping. After it, a first Get from a pool server also
  // imports the server's pools while its Redis round trip is in flight. No-op for kHostDevice.
  Status Warmup(int device);

  // The heartbeat of the serving node (memcuda/heartbeat.h), or kUnavailable when none is alive.
  Result<HeartbeatRecord> ServerRecord();
  // The heartbeats of every live server on this Redis (this prefix), sorted by node. A server
  // of this host (the heartbeat's pid_space) whose process is gone is not live, though its
  // heartbeat lingers until its TTL: it is left out, and its heartbeat added to `dead` when given.
  // A heartbeat with a malformed field (crafted, or damaged) is no live server either: it is left
  // out, and "<key>: <why>" added to `unreadable` when given.
  Result<std::vector<HeartbeatRecord>> LiveServerRecords(
      std::vector<HeartbeatRecord>* dead = nullptr, std::vector<std::string>* unreadable = nullptr);
  // The same two as the hash's field/value maps (HeartbeatMap).
  Result<std::map<std::string, std::string>> ServerInfo();
  Result<std::vector<std::map<std::string, std::string>>> LiveServers(
      std::vector<std::map<std::string, std::string>>* dead = nullptr);
  // True when the node was not given (ClientOptions::node, MCD_NODE) and this host's name had no
  // server, so the only live server on the Redis was taken: options().node names it.
  bool node_discovered() const noexcept;

  const ClientOptions& options() const noexcept;

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  // Writes `contents` into the tensor `creating` that this client just created with "fill".
  Status Fill(const TensorRecord& creating, const void* contents);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mcd
