// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The fetching side of the UCX copy service (server/copy_service_ucx.cpp): the fetches under
// way, and each one's pieces as DATA messages bring them: checked against the fetch (its
// place, its size, once each), received in place or into a staging slot and placed from there,
// into pages made ahead of them, and the fetch ended once nothing writes into its sink any
// more. Private to the service.
#pragma once

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/copy_service.h"
#include "server/copy_wire.h"

namespace mcd {

ucs_memory_type_t UcxMemoryType(Memory memory);

// A fetch the main thread waits for; its pieces arrive on the service's thread.
struct PendingFetch {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;  // final: nothing writes into the sink any more
  Status status;
  bool receiving = false;  // a piece has come: the fetch ends with the bytes, not at its timeout
  std::string id;
  CopyService::Sink sink;
  uint64_t piece = 0;
  ucp_ep_h ep = nullptr;       // set on the service's thread when the read is sent
  std::function<void()> wake;  // the serving loop's, told when the fetch ends

  // The service's thread only.
  std::vector<bool> seen;  // pieces come, by index
  size_t pieces_left = 0;  // not in place yet
  int in_flight = 0;       // receives and placements under way, which write into the sink
  std::optional<Status> failed;
  std::vector<void*> free_slots;  // a staged sink's
  std::vector<bool> made;         // a host sink's: pieces whose pages are made (MakePages)
  struct Waiting {  // a piece that came before a slot was free, or before its pages were made
    void* desc;     // UCX's rendezvous descriptor
    uint64_t offset, length;
  };
  std::deque<Waiting> waiting;         // a staged sink's, for a free slot, first come first
  std::map<uint64_t, Waiting> unmade;  // a host sink's, for their pages, by piece index
  std::chrono::steady_clock::time_point last_piece;  // come or placed
  std::atomic<bool> abandoned{false};                // failed: the threads making pages stop

  void Complete(Status s) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (done) return;
      status = std::move(s);
      done = true;
      done_cv.notify_all();
    }
    if (wake) wake();
  }
  // Completes with `s` unless a piece has come (whose bytes the fetch then waits for): a
  // timeout, or a fetch called off. Whether it did.
  bool CompleteBeforeBytes(Status s) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (done || receiving) return false;
      status = std::move(s);
      done = true;
      done_cv.notify_all();
    }
    if (wake) wake();
    return true;
  }
};

class UcxFetches {
 public:
  // What the fetches use of the service: its worker, its thread (`post` runs a job there) and
  // threads of their own (`aside`, which the service outlives; `stopping` tells them to end).
  struct Service {
    ucp_worker_h worker = nullptr;
    std::function<void(std::function<void()>)> post;
    std::function<void(std::function<void()>)> aside;
    const std::atomic<bool>* stopping = nullptr;
  };
  void Bind(Service service) { service_ = std::move(service); }

  // A new fetch into `sink` in pieces of `piece_bytes`, under an unguessable id: an answer
  // counts only if it names it, which only its read carries.
  Result<std::shared_ptr<PendingFetch>> Add(CopyService::Sink sink, uint64_t piece_bytes,
                                            std::function<void()> wake);
  // The fetch `fetch_id` names, taken out: no further piece of it is taken. Null if none.
  std::shared_ptr<PendingFetch> Take(const std::string& fetch_id);
  // The endpoint `fetch`'s read went to, the only one whose answers it takes.
  void SentTo(const std::shared_ptr<PendingFetch>& fetch, ucp_ep_h ep);
  // A DATA message (the service's thread).
  ucs_status_t OnData(const void* header, size_t header_length, void* data, size_t length,
                      const ucp_am_recv_param_t* param);
  // Fails every fetch whose read went to `ep`, whose peer went away; how many (the service's
  // thread).
  size_t PeerLost(ucp_ep_h ep, const std::string& why);
  // Whether the bytes of another fetch from the server `waiting` asked are arriving: a fetch
  // waiting behind them has its time run from their end, not from its read.
  bool ReceivingBefore(const PendingFetch& waiting);
  // Fails `fetch` (kTimeout) if no piece of it has come or been placed for `timeout_ms` and none
  // is in flight: its sender stopped between two pieces without its connection failing (UCX's
  // shared-memory transports report no peer's failure). Posted to the service's thread.
  void FailIfIdle(const std::shared_ptr<PendingFetch>& fetch, int timeout_ms);
  // At the service's end, after the serving loop stopped its copies (NodeCopier::StopCopies):
  // every fetch left ends (kStopped), and the threads making pages stop.
  void StopAll();

 private:
  std::shared_ptr<PendingFetch> Find(const std::string& fetch_id, const ucp_ep_h& answered_by);
  // Whether a DATA fits `fetch`: its place, its size, not come before, and by rendezvous where
  // eager bytes cannot go.
  static Status CheckPiece(const PendingFetch& fetch, const copy_wire::DataHeader& h, size_t length,
                           bool rendezvous);
  // The fetch among those whose bytes are arriving (ReceivingBefore).
  void NoteReceiving(const std::shared_ptr<PendingFetch>& fetch);
  // A staged sink's piece: landed in a free slot, or waiting for one.
  ucs_status_t TakeStaged(const std::shared_ptr<PendingFetch>& fetch, void* desc, uint64_t offset,
                          uint64_t length);
  // A piece in its place (or failed to be), and the fetch settled.
  void PiecePlaced(const std::shared_ptr<PendingFetch>& fetch, const Status& placed);
  // A piece's bytes received into `at` (`desc`, a rendezvous), a staged piece landed in a slot
  // and handed to the sink's place, and the fetch's end once nothing is in flight: done when
  // every piece is in place, else its first failure.
  void Receive(const std::shared_ptr<PendingFetch>& fetch, void* desc, void* at, uint64_t length,
               std::function<void(Status)> received);
  void Land(const std::shared_ptr<PendingFetch>& fetch, void* desc, uint64_t offset,
            uint64_t length);
  void Fail(const std::shared_ptr<PendingFetch>& fetch, Status why);
  void Settle(const std::shared_ptr<PendingFetch>& fetch);
  // A host sink's pages, made ahead of its pieces on PageMakers() threads of their own, from its
  // first piece on: new shared memory takes longer to make than the transport takes to fill
  // it (2-3 GB/s a thread on an H200 host, docs/scale-out.md). A piece whose pages are not
  // made yet waits for them (PiecePagesMade).
  void MakePages(const std::shared_ptr<PendingFetch>& fetch);
  void PiecePagesMade(const std::shared_ptr<PendingFetch>& fetch, size_t index);
  // A thread per 4 cores, 1 to 4: on a 16-core H200 host four made a 1 GiB copy's pages fast
  // enough for 2.6-3.1 GB/s, two for 2.2-2.4 (docs/design.md).
  static int PageMakers();

  Service service_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<PendingFetch>> fetches_;  // by fetch id
  std::vector<std::weak_ptr<PendingFetch>> receiving_;  // fetches whose pieces are arriving
};

// A fetch under way: its read sent, its answer awaited on the service's thread.
class UcxFetching final : public CopyService::Fetching {
 public:
  UcxFetching(UcxFetches& fetches, std::string id, std::shared_ptr<PendingFetch> fetch,
              int timeout_ms)
      : fetches_(fetches),
        id_(std::move(id)),
        fetch_(std::move(fetch)),
        deadline_(std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms)),
        last_deadline_(deadline_ + std::chrono::milliseconds(timeout_ms)),
        timeout_ms_(timeout_ms) {}
  ~UcxFetching() override { (void)Stop(); }

  std::optional<Status> Poll() override {
    std::unique_lock<std::mutex> lock(fetch_->mutex);
    if (fetch_->done) return Finished(lock);
    // Once pieces are arriving the fetch ends with them, with its endpoint, or when none has come
    // for its time (FailIfIdle, looked at a few times in that time).
    auto now = std::chrono::steady_clock::now();
    if (fetch_->receiving) {
      lock.unlock();
      if (now >= idle_check_) {
        idle_check_ = now + std::chrono::milliseconds(std::max(timeout_ms_ / 4, 100));
        fetches_.FailIfIdle(fetch_, timeout_ms_);
      }
      return std::nullopt;
    }
    if (now < deadline_) return std::nullopt;
    lock.unlock();
    // Behind another answer of the same server, whose bytes are still arriving: waits on, up to
    // twice its limit in all (the wait mcd-create allows a copy).
    if (now < last_deadline_ && fetches_.ReceivingBefore(*fetch_)) {
      deadline_ = std::min(now + std::chrono::milliseconds(timeout_ms_), last_deadline_);
      return std::nullopt;
    }
    if (fetch_->CompleteBeforeBytes(
            Status(ErrorCode::kTimeout, "no answer from the other server within " +
                                            std::to_string(timeout_ms_ / 1000) + " s"))) {
      (void)fetches_.Take(id_);  // a late answer is dropped
    }
    lock.lock();
    // Else a piece came just now: the bytes are arriving.
    if (fetch_->done) return Finished(lock);
    return std::nullopt;
  }

  Status Stop() override {
    if (auto outcome = Poll()) return *outcome;
    if (fetch_->CompleteBeforeBytes(
            Status(ErrorCode::kStopped, "called off before the bytes came")))
      (void)fetches_.Take(id_);
    return Wait();  // else answered: the bytes are arriving
  }

  Status Wait() override {
    for (;;) {
      if (auto outcome = Poll()) return *outcome;
      std::unique_lock<std::mutex> lock(fetch_->mutex);
      // Past the deadline, a receive under way is looked at again every 10 ms until it ends.
      auto until =
          std::max(deadline_, std::chrono::steady_clock::now() + std::chrono::milliseconds(10));
      fetch_->done_cv.wait_until(lock, until, [&] { return fetch_->done; });
    }
  }

 private:
  Status Finished(std::unique_lock<std::mutex>& lock) {
    Status status = fetch_->status;
    lock.unlock();
    // Failed without an answer (no endpoint, the send refused): its entry goes too, not only
    // those an answer or a lost peer took out.
    (void)fetches_.Take(id_);
    return status;
  }
  UcxFetches& fetches_;
  const std::string id_;
  std::shared_ptr<PendingFetch> fetch_;
  std::chrono::steady_clock::time_point deadline_;
  const std::chrono::steady_clock::time_point last_deadline_;  // however long others take
  const int timeout_ms_;
  std::chrono::steady_clock::time_point idle_check_{};  // the next FailIfIdle
};

}  // namespace mcd
