// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/tensor_table.h"

#include <algorithm>

#include "common/process.h"

namespace mcd {

void TensorTable::Keep(Entry entry) {
  std::string name = entry.record.name;
  if (entry.record.lifetime == Lifetime::kStack) {
    stack_names_.insert(name);
  } else {
    stack_names_.erase(name);
  }
  if (entry.filler) {
    filling_names_.insert(name);
  } else {
    filling_names_.erase(name);
  }
  auto old = tensors_.find(name);
  CountOnDevice(&entry, old != tensors_.end() ? &old->second : nullptr);
  if (old == tensors_.end() && !entry.record.set.empty()) sets_[entry.record.set].push_back(name);
  tensors_[name] = std::move(entry);
}

Entry TensorTable::Forget(Map::iterator it) {
  Entry entry = std::move(it->second);
  if (auto set = sets_.find(entry.record.set); set != sets_.end()) {
    std::vector<std::string>& members = set->second;
    members.erase(std::find(members.begin(), members.end(), it->first));
    if (members.empty()) {
      emptied_sets_.push_back(set->first);
      sets_.erase(set);
    }
  }
  stack_names_.erase(it->first);
  filling_names_.erase(it->first);
  tensors_.erase(it);
  CountOnDevice(nullptr, &entry);
  return entry;
}

void TensorTable::CountOnDevice(const Entry* added, const Entry* removed) {
  std::lock_guard<std::mutex> lock(by_device_mutex_);
  if (added != nullptr) {
    DeviceCount& count = by_device_[added->record.device];
    count.tensors += 1;
    count.bytes += added->record.bytes;
  }
  if (removed != nullptr) {
    DeviceCount& count = by_device_[removed->record.device];
    count.tensors -= 1;
    count.bytes -= removed->record.bytes;
  }
}

size_t TensorTable::count() const {
  uint64_t n = 0;
  for (const auto& [device, count] : ByDevice()) n += count.tensors;
  return static_cast<size_t>(n);
}

uint64_t TensorTable::bytes() const {
  uint64_t n = 0;
  for (const auto& [device, count] : ByDevice()) n += count.bytes;
  return n;
}

std::map<int, TensorTable::DeviceCount> TensorTable::ByDevice() const {
  std::lock_guard<std::mutex> lock(by_device_mutex_);
  return by_device_;
}

std::vector<std::string> TensorTable::DeadStackTensors() const {
  std::vector<std::string> dead;
  for (const std::string& name : stack_names_) {
    const TensorRecord& r = tensors_.at(name).record;
    if (!ProcessAlive(r.owner_pid, r.owner_start)) dead.push_back(name);
  }
  return dead;
}

std::vector<std::string> TensorTable::DeadFillers() const {
  std::vector<std::string> dead;
  for (const std::string& name : filling_names_) {
    const Holder& filler = *tensors_.at(name).filler;
    if (!ProcessAlive(filler.pid, filler.start)) dead.push_back(name);
  }
  return dead;
}

void TensorTable::Published(Map::iterator it) {
  Entry& entry = it->second;
  entry.filler.reset();
  entry.record.state = "ready";
  entry.json_head = RecordJsonHead(entry.record);
  filling_names_.erase(it->first);
}

const std::vector<std::string>& TensorTable::SetMembers(const std::string& set) const {
  static const std::vector<std::string> kNone;
  auto found = sets_.find(set);
  return found == sets_.end() ? kNone : found->second;
}

std::vector<Entry> TensorTable::TakeUnsettled() {
  std::vector<Entry> out = std::move(unsettled_);
  unsettled_.clear();
  return out;
}

std::map<int, std::vector<const Entry*>> TensorTable::HeldByDevice() const {
  std::map<int, std::vector<const Entry*>> by_device;
  for (const auto& [name, entry] : tensors_) by_device[entry.record.device].push_back(&entry);
  for (const Entry& entry : orphans_) by_device[entry.record.device].push_back(&entry);
  for (const Entry& entry : unsettled_) by_device[entry.record.device].push_back(&entry);
  return by_device;
}

void TensorTable::Clear() {
  tensors_.clear();
  stack_names_.clear();
  filling_names_.clear();
  sets_.clear();
  emptied_sets_.clear();
  orphans_.clear();
  unsettled_.clear();
  maybe_deleted_.clear();
  std::lock_guard<std::mutex> lock(by_device_mutex_);
  by_device_.clear();
}

}  // namespace mcd
