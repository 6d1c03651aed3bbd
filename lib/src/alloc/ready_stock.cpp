// The ready stock in front of a GPU allocator (WithReadyStock in allocator.h).
//
// Why: on the H100 host a create's GPU step (allocation, zeroing, stream synchronization,
// export) takes ~30 us with the pool and ~55 us with cudaMalloc, on the path of every create.
// A block taken from the stock costs none of that; the allocation happens afterwards (Refill),
// while the create's commit travels through Redis, and the zeroing of a refilled or returned block
// runs on the stream while the worker goes on (Stock, TakeZeroed).
#include <algorithm>
#include <atomic>
#include <cassert>
#include <deque>
#include <map>
#include <vector>

#include "alloc/allocator.h"
#include "common/log.h"
#include "common/process.h"
#include "gpu/cuda_check.h"

namespace mcd {
namespace {

class ReadyStock final : public Allocator {
 public:
  ReadyStock(std::unique_ptr<Allocator> inner, uint64_t max_bytes)
      : inner_(std::move(inner)), max_bytes_(max_bytes), max_block_(max_bytes / 2) {}

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
    if (!hook_added_) {
      // Newest first at Reset: the stock goes back before the inner allocator's own cleanup
      // (the pool's destruction).
      ctx.AddResetHook([this, &ctx] { Trim(ctx, true); });
      hook_added_ = true;
    }
    return Status::Ok();
  }

  // Init has run (the server sets every allocator up before serving); the inner allocator
  // checks its own state.
  Result<Allocation> Allocate(DeviceContext& ctx, uint64_t bytes, bool zero) override {
    if (bytes <= max_block_) {
      refill_due_.store(true, std::memory_order_relaxed);
      Shelf& shelf = shelves_[bytes];
      shelf.last_create_ms = SteadyMs();
      shelf.wanted = std::min(shelf.wanted + 1, kReadyPerSize);
      if (!shelf.blocks.empty()) {
        MCD_ASSIGN_OR_RETURN(Allocation block, TakeZeroed(shelf));
        assert(block.bytes == bytes);  // a shelf holds blocks of its own size only
        Hold(-static_cast<int64_t>(bytes));
        return block;
      }
    }
    auto allocated = inner_->Allocate(ctx, bytes, zero);
    if (!allocated.ok() && allocated.status().code() == ErrorCode::kOutOfMemory &&
        ReadyBytes() > 0) {
      Log(LogLevel::kInfo, "out of memory for " + std::to_string(bytes) +
                               " bytes: giving back the " + std::to_string(ReadyBytes()) +
                               " bytes held ready, then retrying");
      Trim(ctx, true);
      allocated = inner_->Allocate(ctx, bytes, zero);
    }
    return allocated;
  }

  Status Free(DeviceContext& ctx, const Allocation& allocation) override {
    refill_paused_ = false;
    auto shelf = shelves_.find(allocation.bytes);
    if (shelf != shelves_.end() && static_cast<int>(shelf->second.blocks.size()) < kReadyPerSize &&
        Held() + allocation.bytes <= max_bytes_ && ctx.gpu_up() &&
        Stock(ctx, shelf->second, allocation, /*handed_out=*/true)) {
      return Status::Ok();
    }
    return inner_->Free(ctx, allocation);
  }

  // One block more per wanted size and call, so that a Refill job stays short: the allocation
  // waits here, its zeroing does not (Stock).
  void Refill(DeviceContext& ctx) override {
    refill_due_.store(false, std::memory_order_relaxed);
    if (refill_paused_) return;
    for (auto& [bytes, shelf] : shelves_) {
      if (static_cast<int>(shelf.blocks.size()) >= shelf.wanted || Held() + bytes > max_bytes_)
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
      if (!everything && now - it->second.last_create_ms <= kReadyIdleMs) {
        ++it;
        continue;
      }
      // No memset runs on a block freed here. Synchronized only when one is: Trim runs every
      // second on the worker, which a needless sync would stall.
      if (!synchronized && ctx.gpu_up()) {
        (void)cudaStreamSynchronize(ctx.stream());
        synchronized = true;
      }
      for (Block& block : it->second.blocks) {
        (void)inner_->Free(ctx, block.memory);
        spare_events_.push_back(block.zeroed);
        Hold(-static_cast<int64_t>(block.memory.bytes));
      }
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
    int wanted = 0;            // grows by one per create of the size, up to kReadyPerSize
    int64_t last_create_ms = 0;
  };

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
  const uint64_t max_bytes_;
  const uint64_t max_block_;
  std::map<uint64_t, Shelf> shelves_;      // by size in bytes; worker thread only
  std::vector<cudaEvent_t> spare_events_;  // of blocks handed out or freed, for the next Stock
  std::atomic<uint64_t> held_{0};
  // Set by Allocate for a stocked size, cleared by Refill (both on the worker thread); the
  // server reads it after the Allocate it waited for.
  std::atomic<bool> refill_due_{false};
  bool hook_added_ = false;
  bool refill_paused_ = false;  // a Refill ran out of memory; until the next Free or Trim
};

}  // namespace

std::unique_ptr<Allocator> WithReadyStock(std::unique_ptr<Allocator> inner, uint64_t max_bytes) {
  if (max_bytes == 0) return inner;
  return std::make_unique<ReadyStock>(std::move(inner), max_bytes);
}

}  // namespace mcd
