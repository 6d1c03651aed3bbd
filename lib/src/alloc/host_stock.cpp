// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The ready stock in front of host shared memory (WithHostStock in allocator.h).
//
// Why: a host tensor's object is made at once (an ftruncate), but the kernel makes and zeroes
// each of its pages when it is first touched, ~1.2 GB/s a thread on an H200 host: a copy from
// another node into a new tensor ran at that rate, under half its transport's
// (docs/scale-out.md). A block of this stock is an object whose pages exist already
// (FillHostShm): mapping and writing them costs a fraction of that.
//
// Which creates: those that ask for no zeroing, most of which write every byte themselves (a copy
// from another node, a fill from a file, a safetensors load; and init none). A plain create keeps
// its lazy pages: a tensor of which a consumer touches a few pages would otherwise have every page
// made for it, and a loop of creates and deletes would make each block twice (on a 2-core VM, the
// 8-client rate of 1 MiB host pairs fell by a quarter with every create stocked).
//
// How it differs from the GPU stock (ready_stock.cpp), whose demand rule it shares
// (StockDemand):
// - Its blocks are made on a worker thread of its own, never on the host worker that serves
//   creates: making the pages of 1 GiB takes a third of a second or more.
// - A block is always a new object. A freed tensor's object is unlinked, never stocked again, so
//   no block carries a former tenant's bytes and none needs zeroing.
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "alloc/allocator.h"
#include "alloc/stock_demand.h"
#include "common/log.h"
#include "common/process.h"

namespace mcd {
namespace {

class HostStock final : public Allocator {
 public:
  HostStock(std::unique_ptr<Allocator> inner, ReadyLimit limit) : inner_(std::move(inner)) {
    max_bytes_ =
        limit.bytes > 0
            ? limit.bytes
            : static_cast<uint64_t>(static_cast<double>(ReadShmSpace().total) * limit.fraction);
    max_block_ = max_bytes_ / 2;  // two blocks of a size fit, as in the GPU stock
    Log(LogLevel::kInfo, "host memory: ready stock of up to " + std::to_string(max_bytes_ >> 20) +
                             " MiB of /dev/shm, sizes up to " + std::to_string(max_block_ >> 20) +
                             " MiB");
  }

  ~HostStock() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;  // a fill under way stops after its block, which it gives back
    }
    // The stock's last job gives back what it holds, after the jobs before it.
    (void)filler_.Call([this](DeviceContext& ctx) {
      GiveBack(ctx, TakeBlocks(/*everything=*/true));
      return Status::Ok();
    });
    filler_.Stop();
  }

  IpcKind kind() const noexcept override { return inner_->kind(); }
  uint64_t ReadyBytes() const noexcept override { return held_.load(std::memory_order_relaxed); }

  Result<Allocation> Allocate(DeviceContext& ctx, uint64_t bytes, bool zero) override {
    const bool stocked = !zero && bytes <= max_block_;
    if (stocked) {
      std::lock_guard<std::mutex> lock(mutex_);
      Shelf& shelf = shelves_[bytes];
      shelf.demand.Asked(SteadyMs());
      if (!shelf.blocks.empty()) {
        Allocation block = std::move(shelf.blocks.front());
        shelf.blocks.pop_front();
        held_.fetch_sub(bytes, std::memory_order_relaxed);
        shelf.demand.HandOut();
        counted_.insert(block.ipc_handle);
        FillLocked();
        return block;
      }
    }
    auto made = inner_->Allocate(ctx, bytes, zero);
    if (!made.ok() && made.status().code() == ErrorCode::kOutOfMemory && HoldsAny()) {
      Log(LogLevel::kInfo, "host shared memory short for " + std::to_string(bytes) +
                               " bytes: giving back the " + std::to_string(ReadyBytes()) +
                               " bytes held ready, then retrying");
      GiveBack(ctx, TakeBlocks(/*everything=*/true));
      // What its thread is making or has yet to give back goes too: the retry waits for it.
      (void)filler_.Call([](DeviceContext&) { return Status::Ok(); });
      GiveBack(ctx, TakeBlocks(/*everything=*/true));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        paused_ = true;  // no block made ahead into the space this create needs, until a free
      }
      made = inner_->Allocate(ctx, bytes, zero);
    }
    if (stocked) {
      std::lock_guard<std::mutex> lock(mutex_);
      Shelf& shelf = shelves_[bytes];
      if (made.ok()) {
        shelf.demand.HandOut();
        counted_.insert(made.value().ipc_handle);
        FillLocked();
      }
    }
    return made;
  }

  Status Free(DeviceContext& ctx, const Allocation& allocation) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      paused_ = false;  // the space it held is back
      if (counted_.erase(allocation.ipc_handle) > 0) {
        auto shelf = shelves_.find(allocation.bytes);
        if (shelf != shelves_.end()) shelf->second.demand.Freed();
      }
    }
    return inner_->Free(ctx, allocation);  // never stocked again: its pages hold its bytes
  }

  // Every second, on the host worker: demand older than the last window is forgotten, and the
  // blocks above it go back, on the stock's own thread (unlinking 1 GiB frees its pages, which
  // takes tens of milliseconds); all of them at once when `everything`.
  void Trim(DeviceContext& ctx, bool everything) override {
    std::vector<Allocation> surplus = TakeBlocks(everything);
    if (surplus.empty()) return;
    if (everything) return GiveBack(ctx, surplus);
    uint64_t bytes = 0;
    for (const Allocation& block : surplus) bytes += block.bytes;
    giving_back_.fetch_add(bytes, std::memory_order_relaxed);  // still in /dev/shm meanwhile
    Status posted = filler_.Post([this, surplus, bytes](DeviceContext& filler_ctx) {
      GiveBack(filler_ctx, surplus);
      giving_back_.fetch_sub(bytes, std::memory_order_relaxed);
      return Status::Ok();
    });
    if (!posted.ok()) {  // stopping: here, then
      GiveBack(ctx, surplus);
      giving_back_.fetch_sub(bytes, std::memory_order_relaxed);
    }
  }

 private:
  struct Shelf {
    std::deque<Allocation> blocks;  // objects whose pages exist, none ever handed out
    int making = 0;                 // blocks of the size the stock's thread is making now
    StockDemand demand;
  };

  // Has the stock's thread make what the shelves lack, unless it is at it already. mutex_ held.
  void FillLocked() {
    if (fill_posted_ || paused_) return;
    fill_posted_ = filler_.Post([this](DeviceContext& ctx) { return FillShelves(ctx); }).ok();
  }

  // On the stock's thread: one block at a time, while a shelf is short of its demand and the
  // stock has room. A block is space in /dev/shm the server did not hold before, which the
  // tensors made a moment ago have yet to fill: it is made only while /dev/shm keeps
  // kReadyFreeReserve of its size free after it (the GPU stock makes its first 256 MiB without
  // asking; a host tensor's pages are only taken as it is written).
  Status FillShelves(DeviceContext& ctx) {
    for (;;) {
      uint64_t bytes = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        bytes = stopping_ || paused_ ? 0 : NextToMake();
        if (bytes == 0) {
          fill_posted_ = false;
          return Status::Ok();
        }
        ++shelves_[bytes].making;
        making_bytes_ += bytes;
      }
      auto block = inner_->Allocate(ctx, bytes, /*zero=*/false);
      // Its pages only while the size still wants it: a size gone idle meanwhile, or a stop,
      // spares the work.
      const bool wanted = block.ok() && StillWanted(bytes);
      Status filled = wanted ? FillHostShm(block.value().ipc_handle, bytes) : block.status();
      bool kept = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        Shelf& shelf = shelves_[bytes];
        --shelf.making;
        making_bytes_ -= bytes;
        if (wanted && filled.ok() && !stopping_ &&
            static_cast<int>(shelf.blocks.size()) < shelf.demand.Target(SteadyMs())) {
          shelf.blocks.push_back(block.value());
          held_.fetch_add(bytes, std::memory_order_relaxed);
          kept = true;
        } else if (!filled.ok()) {
          // /dev/shm full, say: no more tries (each would fail the same) until a free, or a Trim
          // (which runs while the stock holds blocks).
          paused_ = true;
        }
      }
      if (!kept && block.ok()) (void)inner_->Free(ctx, block.value());
      if (!filled.ok()) Log(LogLevel::kDebug, "host ready stock: " + filled.ToString());
    }
  }

  // The size of the next block to make, 0 when none is due. mutex_ held.
  uint64_t NextToMake() const {
    const int64_t now = SteadyMs();
    const uint64_t held = held_.load(std::memory_order_relaxed) + making_bytes_ +
                          giving_back_.load(std::memory_order_relaxed);
    for (const auto& [bytes, shelf] : shelves_) {
      if (static_cast<int>(shelf.blocks.size()) + shelf.making >= shelf.demand.Target(now) ||
          held + bytes > max_bytes_ || !LeavesReserve(bytes))
        continue;
      return bytes;
    }
    return 0;
  }

  // Whether a block of `bytes` being made (counted in its shelf's `making`) is still due.
  bool StillWanted(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Shelf& shelf = shelves_[bytes];
    return !stopping_ && !paused_ &&
           static_cast<int>(shelf.blocks.size()) + shelf.making <= shelf.demand.Target(SteadyMs());
  }

  // Whatever the stock has in /dev/shm: held, being made, or yet to be given back.
  bool HoldsAny() {
    std::lock_guard<std::mutex> lock(mutex_);
    return ReadyBytes() > 0 || making_bytes_ > 0 || giving_back_.load() > 0;
  }

  static bool LeavesReserve(uint64_t bytes) {
    ShmSpace space = ReadShmSpace();
    return space.available >= bytes && static_cast<double>(space.available - bytes) >=
                                           static_cast<double>(space.total) * kReadyFreeReserve;
  }

  // Takes out of the shelves the blocks above their demand (all of them when `everything` or
  // the size is idle), and drops the shelves with nothing left to count.
  std::vector<Allocation> TakeBlocks(bool everything) {
    std::vector<Allocation> out;
    std::lock_guard<std::mutex> lock(mutex_);
    paused_ = false;
    const int64_t now = SteadyMs();
    for (auto it = shelves_.begin(); it != shelves_.end();) {
      Shelf& shelf = it->second;
      const bool idle = shelf.demand.Idle(now);
      if (everything || idle || shelf.demand.NextWindow()) {
        const int keep = everything ? 0 : shelf.demand.Target(now);
        while (static_cast<int>(shelf.blocks.size()) > keep) {
          held_.fetch_sub(shelf.blocks.front().bytes, std::memory_order_relaxed);
          out.push_back(std::move(shelf.blocks.front()));
          shelf.blocks.pop_front();
        }
      }
      // A shelf with tensors still out stays, so that their frees are counted.
      const bool empty = shelf.blocks.empty() && shelf.making == 0 && shelf.demand.live == 0;
      it = idle && empty ? shelves_.erase(it) : std::next(it);
    }
    return out;
  }

  void GiveBack(DeviceContext& ctx, const std::vector<Allocation>& blocks) {
    for (const Allocation& block : blocks) (void)inner_->Free(ctx, block);
  }

  std::unique_ptr<Allocator> inner_;  // host_shm: its Allocate and Free are thread-safe
  uint64_t max_bytes_ = 0;
  uint64_t max_block_ = 0;
  std::mutex mutex_;
  std::map<uint64_t, Shelf> shelves_;  // by size in bytes; under mutex_
  // The objects of the tensors its demand counts (live), so that a free of another (a plain
  // create's) is not counted. Under mutex_.
  std::unordered_set<std::string> counted_;
  uint64_t making_bytes_ = 0;  // under mutex_
  bool fill_posted_ = false;   // under mutex_
  bool paused_ = false;        // under mutex_: a block could not be made
  bool stopping_ = false;      // under mutex_: the stock is being destroyed
  std::atomic<uint64_t> held_{0};
  std::atomic<uint64_t> giving_back_{0};  // taken out of the shelves, not unlinked yet
  // Declared last: destroyed first, its jobs (which touch the members above) all run by then.
  GpuWorker filler_{kHostDevice};
};

}  // namespace

std::unique_ptr<Allocator> WithHostStock(std::unique_ptr<Allocator> inner, ReadyLimit limit) {
  if (limit.bytes == 0 && limit.fraction <= 0) return inner;
  return std::make_unique<HostStock>(std::move(inner), limit);
}

}  // namespace mcd
