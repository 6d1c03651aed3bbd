// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The ready stock in front of a GPU allocator (WithReadyStock in allocator.h).
//
// Why: on the H100 host a create's GPU step (allocation, zeroing, stream synchronization,
// export) takes ~30 us with the pool and ~55 us with cudaMalloc, on the path of every create,
// and ~1.2 ms for 1 GiB (~11 ms for 8 GiB). A block taken from the stock costs none of that; the
// allocation happens afterwards (Refill), while the create's commit travels through Redis, and
// the zeroing of a refilled or returned block runs on the stream while the worker goes on
// (Stock, TakeZeroed).
//
// How much it holds follows demand, per size (StockDemand): one block more than the most tensors of
// the size alive at once lately, so that a create right after a delete takes a block zeroed
// before rather than wait for the delete's (zeroing 8 GiB takes ~2.7 ms on an H100).
#include <algorithm>
#include <atomic>
#include <cassert>
#include <deque>
#include <map>
#include <vector>

#include "alloc/allocator.h"
#include "alloc/stock_demand.h"
#include "common/log.h"
#include "common/process.h"
#include "gpu/cuda_check.h"

namespace mcd {
namespace {

class ReadyStock final : public Allocator {
 public:
  ReadyStock(std::unique_ptr<Allocator> inner, ReadyLimit limit)
      : inner_(std::move(inner)), limit_(limit) {
    SetMax(limit.bytes);
  }

  IpcKind kind() const noexcept override { return inner_->kind(); }
  int pool_fd() const noexcept override { return inner_->pool_fd(); }
  std::string primer() const override { return inner_->primer(); }
  uint64_t SlabBytes() const noexcept override { return inner_->SlabBytes(); }
  uint64_t SlabFreeBytes() const noexcept override { return inner_->SlabFreeBytes(); }
  // The stock's blocks and what the inner allocator keeps ready itself (cuda_ipc's empty slabs).
  uint64_t ReadyBytes() const noexcept override { return Held() + inner_->ReadyBytes(); }
  bool RefillDue() const noexcept override { return refill_due_.load(std::memory_order_relaxed); }

  Status Init(DeviceContext& ctx) override {
    MCD_RETURN_IF_ERROR(inner_->Init(ctx));
    if (limit_.bytes == 0 && limit_.fraction > 0 && ctx.gpu_up()) {
      size_t free = 0, total = 0;
      MCD_CUDA_RETURN(cudaMemGetInfo(&free, &total));
      SetMax(static_cast<uint64_t>(static_cast<double>(total) * limit_.fraction));
    }
    // What --ready-max came to, which a share of the device does not say by itself.
    Log(LogLevel::kInfo, "device " + std::to_string(ctx.device()) + ": ready stock of up to " +
                             std::to_string(max_bytes_ >> 20) + " MiB, sizes up to " +
                             std::to_string(max_block_ >> 20) + " MiB");
    if (!hook_added_) {
      // Newest first at Reset: the stock goes back before the inner allocator's own cleanup
      // (the pool's destruction).
      ctx.AddResetHook([this, &ctx] {
        Trim(ctx, true);
        idle_live_.clear();  // the context's memory is gone, tensors and all
      });
      hook_added_ = true;
    }
    return Status::Ok();
  }

  // Init has run (the server sets every allocator up before serving); the inner allocator
  // checks its own state.
  Result<Allocation> Allocate(DeviceContext& ctx, uint64_t bytes, bool zero) override {
    Shelf* shelf = nullptr;
    if (bytes <= max_block_) {
      refill_due_.store(true, std::memory_order_relaxed);
      shelf = &ShelfFor(bytes);
      if (!shelf->blocks.empty()) {
        MCD_ASSIGN_OR_RETURN(Allocation block, TakeZeroed(*shelf));
        assert(block.bytes == bytes);  // a shelf holds blocks of its own size only
        Hold(-static_cast<int64_t>(bytes));
        shelf->demand.HandOut();
        return block;
      }
    }
    auto allocated = inner_->Allocate(ctx, bytes, zero);
    if (!allocated.ok() && allocated.status().code() == ErrorCode::kOutOfMemory &&
        ReadyBytes() > 0) {
      Log(LogLevel::kInfo, "out of memory for " + std::to_string(bytes) +
                               " bytes: giving back the " + std::to_string(ReadyBytes()) +
                               " bytes held ready, then retrying");
      Trim(ctx, true);  // the live counts are kept (idle_live_)
      shelf = bytes <= max_block_ ? &ShelfFor(bytes) : nullptr;
      allocated = inner_->Allocate(ctx, bytes, zero);
    }
    if (shelf != nullptr && allocated.ok()) {
      shelf->demand.HandOut();
    } else if (shelf != nullptr && shelf->demand.live == 0 && shelf->blocks.empty()) {
      // A size the inner allocator refuses (too large for the pool, past its limit) gets no
      // shelf: Refill would try it, fail and pause every size's refills.
      shelves_.erase(bytes);
    }
    return allocated;
  }

  Status Free(DeviceContext& ctx, const Allocation& allocation) override {
    refill_paused_ = false;
    auto shelf = shelves_.find(allocation.bytes);
    if (shelf == shelves_.end()) {
      ForgetIdleLive(allocation.bytes);
      return inner_->Free(ctx, allocation);
    }
    assert(shelf->second.demand.live > 0);  // every block handed out was counted (HandOut)
    shelf->second.demand.Freed();
    // A block freed keeps its place while the size's demand wants it: it was in use a moment
    // ago, so holding it takes nothing from another process that it had.
    if (static_cast<int>(shelf->second.blocks.size()) < shelf->second.demand.Target(SteadyMs()) &&
        Held() + allocation.bytes <= max_bytes_ && ctx.gpu_up() &&
        Stock(ctx, shelf->second, allocation, /*handed_out=*/true)) {
      return Status::Ok();
    }
    return inner_->Free(ctx, allocation);
  }

  // One block more per size short of its Target and call, so that a Refill job stays short: the
  // allocation waits here, its zeroing does not (Stock). A block allocated ahead is memory the
  // server did not hold before, so past kReadyAheadFreely in all it is taken only while the
  // device keeps kReadyFreeReserve of its memory free after it.
  void Refill(DeviceContext& ctx) override {
    refill_due_.store(false, std::memory_order_relaxed);
    if (refill_paused_) return;
    const int64_t now = SteadyMs();
    for (auto& [bytes, shelf] : shelves_) {
      if (static_cast<int>(shelf.blocks.size()) >= shelf.demand.Target(now) ||
          Held() + bytes > max_bytes_ || !LeavesReserve(bytes))
        continue;
      auto block = inner_->Allocate(ctx, bytes, /*zero=*/false);
      if (!block.ok() || !Stock(ctx, shelf, block.value(), /*handed_out=*/false)) {
        // Out of memory, say: the stock stays smaller, and it stops trying (each try would make
        // the pool give back its cached memory) until memory is freed.
        if (block.ok()) (void)inner_->Free(ctx, block.value());
        refill_paused_ = true;
        return;
      }
    }
  }

  void Trim(DeviceContext& ctx, bool everything) override {
    refill_paused_ = false;
    int64_t now = SteadyMs();
    bool synchronized = false;
    for (auto it = shelves_.begin(); it != shelves_.end();) {
      if (!everything && !it->second.demand.Idle(now)) {
        GiveBackSurplus(ctx, it->second, now);
        ++it;
        continue;
      }
      // No memset runs on a block freed here. Synchronized only when one is: Trim runs every
      // second on the worker, which a needless sync would stall.
      if (!synchronized && !it->second.blocks.empty() && ctx.gpu_up()) {
        (void)cudaStreamSynchronize(ctx.stream());
        synchronized = true;
      }
      for (Block& block : it->second.blocks) {
        (void)inner_->Free(ctx, block.memory);
        spare_events_.push_back(block.zeroed);
        Hold(-static_cast<int64_t>(block.memory.bytes));
      }
      // Its tensors still out are counted apart, for when the size is created again.
      if (it->second.demand.live > 0) idle_live_[it->first] += it->second.demand.live;
      it = shelves_.erase(it);
    }
    inner_->Trim(ctx, everything);  // the inner allocator's own caches (cuda_ipc's empty slabs)
    if (everything) {
      for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
      spare_events_.clear();
      if (ctx.gpu_up()) (void)cudaStreamSynchronize(ctx.stream());  // the frees are done
    }
  }

  uint64_t PoolUsedBytes(DeviceContext& ctx) override {
    uint64_t used = inner_->PoolUsedBytes(ctx);
    uint64_t ready = Held();
    return used > ready ? used - ready : 0;  // tensors only: blocks held ready are not in use
  }

 private:
  struct Block {
    Allocation memory;             // exported
    cudaEvent_t zeroed = nullptr;  // recorded after its memset on the worker's stream
    bool handed_out = false;       // a tensor's before: opened by other processes already
  };
  struct Shelf {
    std::deque<Block> blocks;  // oldest first: its memset was queued first
    StockDemand demand;
  };

  // The shelf of a size being created now: made (with the count of its tensors still out from
  // before, idle_live_) or found.
  Shelf& ShelfFor(uint64_t bytes) {
    auto [it, made] = shelves_.try_emplace(bytes);
    Shelf& shelf = it->second;
    if (made) {
      if (auto idle = idle_live_.find(bytes); idle != idle_live_.end()) {
        shelf.demand.live = idle->second;
        idle_live_.erase(idle);
      }
    }
    shelf.demand.Asked(SteadyMs());
    return shelf;
  }

  // A tensor of a size with no shelf is freed: one fewer of it out.
  void ForgetIdleLive(uint64_t bytes) {
    auto idle = idle_live_.find(bytes);
    if (idle != idle_live_.end() && --idle->second <= 0) idle_live_.erase(idle);
  }

  // Each Trim (about a second apart) while the size is created: the blocks above the target
  // that are zeroed already go back (the others at the next Trim, so that no free waits for a
  // memset). A size no longer created keeps its stock until it is idle, then gives all of it
  // back (Trim).
  void GiveBackSurplus(DeviceContext& ctx, Shelf& shelf, int64_t now) {
    if (!shelf.demand.NextWindow()) return;
    while (static_cast<int>(shelf.blocks.size()) > shelf.demand.Target(now) &&
           cudaEventQuery(shelf.blocks.front().zeroed) == cudaSuccess) {
      Block& block = shelf.blocks.front();
      (void)inner_->Free(ctx, block.memory);
      spare_events_.push_back(block.zeroed);
      Hold(-static_cast<int64_t>(block.memory.bytes));
      shelf.blocks.pop_front();
    }
    cudaGetLastError();  // cudaErrorNotReady from a query
  }

  // Whether the device keeps kReadyFreeReserve of its memory free once `bytes` more are taken.
  // Not asked while the stock holds under kReadyAheadFreely with them: the query would cost
  // small creates more than such blocks weigh.
  bool LeavesReserve(uint64_t bytes) const {
    if (Held() + bytes <= kReadyAheadFreely) return true;
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return free >= bytes &&
           static_cast<double>(free - bytes) >= static_cast<double>(total) * kReadyFreeReserve;
  }

  void SetMax(uint64_t max_bytes) {
    max_bytes_ = max_bytes;
    max_block_ = max_bytes / 2;
  }

  // Queues the block's zeroing on the worker's stream and shelves it, without waiting for the
  // memset: a 1 GiB memset takes ~0.3 ms on an H100, which a create of another block need not
  // wait for. False when the memset cannot be queued (the block is then not shelved).
  bool Stock(DeviceContext& ctx, Shelf& shelf, const Allocation& memory, bool handed_out) {
    Block block{memory, nullptr, handed_out};
    if (!spare_events_.empty()) {
      block.zeroed = spare_events_.back();
      spare_events_.pop_back();
    } else if (cudaEventCreateWithFlags(&block.zeroed, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (cudaMemsetAsync(memory.ptr, 0, memory.bytes, ctx.stream()) != cudaSuccess ||
        cudaEventRecord(block.zeroed, ctx.stream()) != cudaSuccess) {
      cudaGetLastError();
      spare_events_.push_back(block.zeroed);
      return false;
    }
    shelf.blocks.push_back(std::move(block));
    Hold(static_cast<int64_t>(memory.bytes));
    return true;
  }

  // Hands out a block whose zeroing has finished, one handed out before first: the driver makes
  // another process's open of an allocation made a moment ago slow (~0.7-0.9 ms for 1 GiB on an
  // H200, against ~0.2 ms for an older one), and a reused block is not new. Then the oldest; when
  // no zeroing has finished, waits for the oldest. The memsets run in stream order, so the
  // finished ones are a prefix of the shelf: the search stops at the first that is not. A block
  // never carries a former tenant's bytes.
  Result<Allocation> TakeZeroed(Shelf& shelf) {
    assert(!shelf.blocks.empty());
    auto pick = shelf.blocks.end();
    for (auto it = shelf.blocks.begin(); it != shelf.blocks.end(); ++it) {
      if (cudaEventQuery(it->zeroed) != cudaSuccess) break;
      if (pick == shelf.blocks.end() || (it->handed_out && !pick->handed_out)) pick = it;
      if (pick->handed_out) break;
    }
    cudaGetLastError();  // cudaErrorNotReady from the queries
    if (pick == shelf.blocks.end()) {
      pick = shelf.blocks.begin();
      MCD_CUDA_RETURN(cudaEventSynchronize(pick->zeroed));
    }
    Allocation memory = std::move(pick->memory);
    spare_events_.push_back(pick->zeroed);
    shelf.blocks.erase(pick);
    return memory;
  }

  uint64_t Held() const noexcept { return held_.load(std::memory_order_relaxed); }
  // The worker thread alone changes it, so the check before the add holds after it.
  void Hold(int64_t delta) {
    assert(delta >= 0 || Held() >= static_cast<uint64_t>(-delta));
    held_.fetch_add(static_cast<uint64_t>(delta), std::memory_order_relaxed);
  }

  std::unique_ptr<Allocator> inner_;
  const ReadyLimit limit_;
  uint64_t max_bytes_ = 0;  // set before serving (constructor, Init); worker thread after
  uint64_t max_block_ = 0;
  std::map<uint64_t, Shelf> shelves_;  // by size in bytes; worker thread only
  // Sizes whose shelf went idle with tensors still out: how many, so that their frees are
  // counted and a shelf made again for the size starts from them. Worker thread only.
  std::map<uint64_t, int> idle_live_;
  std::vector<cudaEvent_t> spare_events_;  // of blocks handed out or freed, for the next Stock
  std::atomic<uint64_t> held_{0};
  // Set by Allocate for a stocked size, cleared by Refill (both on the worker thread); the
  // server reads it after the Allocate it waited for.
  std::atomic<bool> refill_due_{false};
  bool hook_added_ = false;
  bool refill_paused_ = false;  // a Refill ran out of memory; until the next Free or Trim
};

}  // namespace

std::unique_ptr<Allocator> WithReadyStock(std::unique_ptr<Allocator> inner, ReadyLimit limit) {
  if (limit.bytes == 0 && limit.fraction <= 0) return inner;
  return std::make_unique<ReadyStock>(std::move(inner), limit);
}

}  // namespace mcd
