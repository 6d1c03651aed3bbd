// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// SlabCarver: small tensors carved out of larger allocations ("slabs") of a size class each, so
// that many tensors share one exported allocation.
//
// Why: a process that opens a cuda_ipc tensor maps one allocation per tensor; opening a further
// tensor of an allocation it already has open is a reference count in the driver (0.2-0.3 us
// against 2-3 us for a new allocation on the H100 host, scripts/probes/ipc_reopen_probe.cu).
// Carving also takes cudaMalloc, cudaIpcGetMemHandle and cudaFree (~50 us for 1 MiB) off the
// creates and deletes of small tensors and the refills of the ready stock. Measured: a faster
// share and a higher create+delete rate (docs/design.md, "Fast paths and knobs").
//
// Rules, chosen to bound the memory a slab may hold that no tensor uses:
// - A size is rounded up to its class: a multiple of 512 bytes, and at most a quarter above the
//   power of two below it (four classes per doubling).
// - A class's slabs hold 16 blocks (at least 2 MiB, the device's allocation granularity, and at
//   most max_slab_bytes); only classes whose slab holds at least 8 blocks are carved. Larger
//   tensors are allocated alone by the caller.
// - A slab is freed once its last block is given back, except one empty slab per class, kept for
//   the next take until Trim finds it unused for idle_ms.
// Not thread-safe: the owning allocator calls it from its device's worker thread only. The memory
// itself comes from the Backend (cudaMalloc on the GPU, plain memory in the unit test).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "memcuda/status.h"

namespace mcd {

struct SlabMemory {
  void* base = nullptr;
  std::string handle;  // the slab's export, shared by every block carved from it
};

struct SlabBackend {
  // Allocates and exports `bytes`; kOutOfMemory when the device is full.
  std::function<Result<SlabMemory>(uint64_t bytes)> allocate;
  std::function<void(const SlabMemory&)> free;
};

class SlabCarver {
 public:
  static constexpr uint64_t kAlign = 512;
  static constexpr uint64_t kMinSlab = 2ull << 20;
  static constexpr int kBlocksPerSlab = 16;
  static constexpr int kMinBlocksPerSlab = 8;

  // max_slab_bytes 0 carves nothing.
  SlabCarver(uint64_t max_slab_bytes, SlabBackend backend);
  ~SlabCarver() = default;  // frees nothing: FreeAll, on the worker thread, does
  SlabCarver(const SlabCarver&) = delete;
  SlabCarver& operator=(const SlabCarver&) = delete;

  static uint64_t ClassOf(uint64_t bytes);
  // The slab size of a class, or 0 when tensors of that class are not carved.
  uint64_t SlabBytesOf(uint64_t class_bytes) const;
  bool Carves(uint64_t bytes) const { return bytes > 0 && SlabBytesOf(ClassOf(bytes)) != 0; }

  // A block of at least `bytes` (not zeroed): ptr, offset into its slab and the slab's handle.
  // kOutOfMemory when no slab could be allocated (after freeing the empty ones kept).
  Result<Allocation> Take(uint64_t bytes, int64_t now_ms);
  // Gives a block back; false when it was not carved here (the caller frees it itself).
  bool Give(const Allocation& block);
  // Frees the empty slabs kept: those unused for idle_ms, or all of them.
  void Trim(bool everything, int64_t now_ms, int64_t idle_ms);
  // Frees every slab, blocks in use or not: when the device context goes away (its memory
  // goes with it anyway).
  void FreeAll();

  // Bytes of every slab held; of those not carved out for a block (free blocks, the tail that
  // holds no whole block, empty slabs); and of the empty slabs alone. Readable from any thread.
  uint64_t SlabBytes() const noexcept { return slab_bytes_.load(std::memory_order_relaxed); }
  uint64_t FreeBytes() const noexcept {
    return SlabBytes() - std::min(SlabBytes(), carved_bytes_.load(std::memory_order_relaxed));
  }
  uint64_t EmptySlabBytes() const noexcept { return empty_bytes_.load(std::memory_order_relaxed); }
  size_t SlabCount() const noexcept;

 private:
  struct Slab {
    SlabMemory memory;
    uint64_t class_bytes = 0;
    uint64_t bytes = 0;
    std::vector<uint32_t> free_slots;  // slot indexes not in use
    uint32_t slots = 0;
    int64_t last_used_ms = 0;
    bool empty() const { return free_slots.size() == slots; }
  };
  using Slabs = std::vector<std::unique_ptr<Slab>>;  // of one size class

  void FreeSlab(Slabs& slabs, size_t index);

  const uint64_t max_slab_bytes_;
  SlabBackend backend_;
  std::map<uint64_t, Slabs> classes_;
  std::map<const char*, Slab*> by_base_;  // slab base -> slab, to find a block's slab on Give
  std::atomic<uint64_t> slab_bytes_{0};
  std::atomic<uint64_t> carved_bytes_{0};  // blocks handed out, at their class size
  std::atomic<uint64_t> empty_bytes_{0};
};

}  // namespace mcd
