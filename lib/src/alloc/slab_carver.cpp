// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// SlabCarver (slab_carver.h).
#include "alloc/slab_carver.h"

#include <algorithm>
#include <cassert>
#include <cstdint>

namespace mcd {

SlabCarver::SlabCarver(uint64_t max_slab_bytes, SlabBackend backend)
    : max_slab_bytes_(max_slab_bytes), backend_(std::move(backend)) {}

uint64_t SlabCarver::ClassOf(uint64_t bytes) {
  if (bytes <= kAlign) return kAlign;
  uint64_t power = 1;
  while (power <= bytes / 2) power <<= 1;  // the largest power of two <= bytes
  uint64_t step = std::max(kAlign, power / 4);
  uint64_t class_bytes = (bytes + step - 1) / step * step;
  assert(class_bytes >= bytes && class_bytes % kAlign == 0);
  return class_bytes;
}

uint64_t SlabCarver::SlabBytesOf(uint64_t class_bytes) const {
  if (max_slab_bytes_ == 0 || class_bytes == 0) return 0;
  uint64_t slab = std::max(kMinSlab, class_bytes * kBlocksPerSlab);
  slab = (slab + kMinSlab - 1) / kMinSlab * kMinSlab;  // whole allocation granules
  slab = std::min(slab, max_slab_bytes_);
  return slab / class_bytes >= static_cast<uint64_t>(kMinBlocksPerSlab) ? slab : 0;
}

Result<Allocation> SlabCarver::Take(uint64_t bytes, int64_t now_ms) {
  uint64_t class_bytes = ClassOf(bytes);
  uint64_t slab_bytes = SlabBytesOf(class_bytes);
  if (bytes == 0 || slab_bytes == 0) {
    return Status(ErrorCode::kInvalidArgument,
                  std::to_string(bytes) + " bytes are not carved from slabs");
  }
  Slabs& slabs = classes_[class_bytes];
  // The fullest slab that has room, so that the others can empty and be freed; an empty slab
  // only when no other has room.
  auto rank = [](const Slab& s) { return s.empty() ? SIZE_MAX : s.free_slots.size(); };
  Slab* slab = nullptr;
  for (auto& candidate : slabs) {
    if (!candidate->free_slots.empty() && (slab == nullptr || rank(*candidate) < rank(*slab)))
      slab = candidate.get();
  }
  if (slab == nullptr) {
    auto memory = backend_.allocate(slab_bytes);
    if (!memory.ok() && memory.status().code() == ErrorCode::kOutOfMemory && EmptySlabBytes() > 0) {
      Trim(/*everything=*/true, now_ms, 0);  // other classes' empty slabs may make room
      memory = backend_.allocate(slab_bytes);
    }
    if (!memory.ok()) return memory.status();
    auto fresh = std::make_unique<Slab>();
    fresh->memory = std::move(memory).value();
    fresh->class_bytes = class_bytes;
    fresh->bytes = slab_bytes;
    fresh->slots = static_cast<uint32_t>(slab_bytes / class_bytes);
    assert(fresh->slots >= static_cast<uint32_t>(kMinBlocksPerSlab));  // SlabBytesOf's promise
    empty_bytes_.fetch_add(slab_bytes, std::memory_order_relaxed);     // taken from just below
    // Handed out from the front: slot 0 first.
    for (uint32_t slot = fresh->slots; slot-- > 0;) fresh->free_slots.push_back(slot);
    slab = fresh.get();
    by_base_[static_cast<const char*>(slab->memory.base)] = slab;
    slab_bytes_.fetch_add(slab_bytes, std::memory_order_relaxed);
    slabs.push_back(std::move(fresh));
  }
  assert(!slab->free_slots.empty() && slab->class_bytes == class_bytes);
  if (slab->empty()) empty_bytes_.fetch_sub(slab->bytes, std::memory_order_relaxed);
  uint32_t slot = slab->free_slots.back();
  slab->free_slots.pop_back();
  carved_bytes_.fetch_add(class_bytes, std::memory_order_relaxed);
  slab->last_used_ms = now_ms;
  Allocation block;
  block.offset = static_cast<uint64_t>(slot) * class_bytes;
  assert(slot < slab->slots && block.offset + class_bytes <= slab->bytes && bytes <= class_bytes);
  block.ptr = static_cast<char*>(slab->memory.base) + block.offset;
  block.bytes = bytes;
  block.ipc_handle = slab->memory.handle;
  return block;
}

bool SlabCarver::Give(const Allocation& block) {
  if (block.ptr == nullptr || block.offset > reinterpret_cast<uintptr_t>(block.ptr)) return false;
  auto found = by_base_.find(static_cast<const char*>(block.ptr) - block.offset);
  if (found == by_base_.end()) return false;
  Slab* slab = found->second;
  if (block.offset % slab->class_bytes != 0 || block.offset / slab->class_bytes >= slab->slots)
    return false;
  // A slot given back twice would be handed out twice: the allocator gives each block back once.
  assert(slab->free_slots.size() < slab->slots);
  slab->free_slots.push_back(static_cast<uint32_t>(block.offset / slab->class_bytes));
  carved_bytes_.fetch_sub(slab->class_bytes, std::memory_order_relaxed);
  if (!slab->empty()) return true;
  empty_bytes_.fetch_add(slab->bytes, std::memory_order_relaxed);
  // Keep one empty slab per class for the next take; free any other at once.
  Slabs& slabs = classes_.at(slab->class_bytes);
  size_t empties = 0, at = 0;
  for (size_t i = 0; i < slabs.size(); ++i) {
    if (slabs[i]->empty()) ++empties;
    if (slabs[i].get() == slab) at = i;
  }
  assert(slabs[at].get() == slab);
  if (empties > 1) FreeSlab(slabs, at);
  return true;
}

void SlabCarver::Trim(bool everything, int64_t now_ms, int64_t idle_ms) {
  for (auto it = classes_.begin(); it != classes_.end();) {
    Slabs& slabs = it->second;
    for (size_t i = slabs.size(); i-- > 0;) {
      const Slab& slab = *slabs[i];
      if (slab.empty() && (everything || now_ms - slab.last_used_ms > idle_ms)) FreeSlab(slabs, i);
    }
    it = slabs.empty() ? classes_.erase(it) : std::next(it);
  }
}

void SlabCarver::FreeAll() {
  for (auto& [class_bytes, slabs] : classes_) {
    while (!slabs.empty()) FreeSlab(slabs, slabs.size() - 1);
  }
  classes_.clear();
}

void SlabCarver::FreeSlab(Slabs& slabs, size_t index) {
  assert(index < slabs.size());
  std::unique_ptr<Slab> slab = std::move(slabs[index]);
  slabs.erase(slabs.begin() + static_cast<std::ptrdiff_t>(index));
  by_base_.erase(static_cast<const char*>(slab->memory.base));
  slab_bytes_.fetch_sub(slab->bytes, std::memory_order_relaxed);
  // FreeAll frees slabs with blocks still out.
  carved_bytes_.fetch_sub((slab->slots - slab->free_slots.size()) * slab->class_bytes,
                          std::memory_order_relaxed);
  if (slab->empty()) empty_bytes_.fetch_sub(slab->bytes, std::memory_order_relaxed);
  backend_.free(slab->memory);
}

size_t SlabCarver::SlabCount() const noexcept { return by_base_.size(); }

}  // namespace mcd
