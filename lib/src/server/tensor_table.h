// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The tensors this server instance holds, by name, with the memory behind each. The refcount
// lives in Redis only; this table says which allocation a name stands for, so that the server
// can free it when the refcount reaches 0. Main thread of the server only.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "alloc/allocator.h"
#include "memcuda/protocol.h"

namespace mcd {

struct Entry {
  TensorRecord record;  // as created
  Allocation allocation;
  std::string json_head;  // RecordJsonHead(record): replies are assembled around it
  // A tensor created with "fill" whose creator has not published it yet (state "creating"): the
  // process filling it, which alone may publish or abandon it, and whose death reclaims it.
  std::optional<Holder> filler;
};

class TensorTable {
 public:
  using Map = std::unordered_map<std::string, Entry>;

  Map::iterator find(const std::string& name) { return tensors_.find(name); }
  Map::iterator end() { return tensors_.end(); }
  const Map& tensors() const { return tensors_; }
  // Every tensor enters by Keep and leaves by Forget, which keep the stack index and the count
  // (read by the heartbeat thread) with the map.
  void Keep(Entry entry);
  Entry Forget(Map::iterator it);
  // The stack tensors whose owner process is gone.
  std::vector<std::string> DeadStackTensors() const;
  // The tensors still being filled whose filler process is gone.
  std::vector<std::string> DeadFillers() const;
  // A filled tensor is published: its record (and the replies' head) say "ready" from now on.
  void Published(Map::iterator it);
  // The members of tensor set `set` held here, in the order created (empty: no such set).
  const std::vector<std::string>& SetMembers(const std::string& set) const;
  // The sets whose last member left the table since the last call, whatever freed it.
  std::vector<std::string> TakeEmptiedSets() { return std::exchange(emptied_sets_, {}); }
  // The tensors and their bytes by device (heartbeat: device_tensors, and their sums tensors and
  // tensor_bytes). Any thread.
  struct DeviceCount {
    uint64_t tensors = 0, bytes = 0;
  };
  std::map<int, DeviceCount> ByDevice() const;
  size_t count() const;  // the sums of ByDevice
  uint64_t bytes() const;

  // Allocations whose hash vanished underneath (removed by hand, or lost with a Redis that
  // restarted without persistence): processes may still map them, so they are freed at shutdown.
  void Orphan(Entry entry) { orphans_.push_back(std::move(entry)); }
  // Creates whose commit got no answer (the connection broke): settled after reconnecting.
  void Unsettled(Entry entry) { unsettled_.push_back(std::move(entry)); }
  std::vector<Entry> TakeUnsettled();
  // Tensors held here whose removing commit (a last delete, a reclaim) got no answer: after
  // reconnecting, a missing hash means the commit went through and the memory is freed, where
  // any other missing hash is put back (Redis lost it).
  void MaybeDeleted(const std::string& name) { maybe_deleted_.insert(name); }
  std::set<std::string> TakeMaybeDeleted() { return std::exchange(maybe_deleted_, {}); }

  // Every allocation held (tensors, orphans, unsettled creates) by device, then Clear: shutdown.
  std::map<int, std::vector<const Entry*>> HeldByDevice() const;
  size_t held() const { return tensors_.size() + orphans_.size() + unsettled_.size(); }
  void Clear();

 private:
  Map tensors_;
  std::set<std::string> stack_names_;    // the stack tensors among them, for the reaper
  std::set<std::string> filling_names_;  // those being filled (Entry::filler), for the reaper
  std::unordered_map<std::string, std::vector<std::string>> sets_;  // members by set
  std::vector<std::string> emptied_sets_;
  // Changed with the map (main thread), read by the heartbeat thread: a tensor added, removed,
  // or (both) one that takes another's place, in one step.
  void CountOnDevice(const Entry* added, const Entry* removed);
  mutable std::mutex by_device_mutex_;
  std::map<int, DeviceCount> by_device_;  // under by_device_mutex_
  std::vector<Entry> orphans_;
  std::vector<Entry> unsettled_;
  std::set<std::string> maybe_deleted_;
};

}  // namespace mcd
