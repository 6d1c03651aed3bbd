// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/copy_fetches_ucx.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "alloc/allocator.h"
#include "common/process.h"
#include "server/copy_wire.h"
#include "server/ucx_api.h"

namespace mcd {

using copy_wire::DataHeader;
using copy_wire::kIdBytes;

ucs_memory_type_t UcxMemoryType(Memory memory) {
  return memory == Memory::kGpu ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

Result<std::shared_ptr<PendingFetch>> UcxFetches::Add(CopyService::Sink sink, uint64_t piece_bytes,
                                                      std::function<void()> wake) {
  auto fetch = std::make_shared<PendingFetch>();
  fetch->piece = piece_bytes;
  auto pieces = static_cast<size_t>(CopyPieces(sink.bytes, piece_bytes));
  fetch->seen.assign(pieces, false);
  fetch->pieces_left = pieces;
  fetch->free_slots = sink.slots;
  fetch->sink = std::move(sink);
  fetch->wake = std::move(wake);
  fetch->id.assign(kIdBytes, '\0');
  MCD_RETURN_IF_ERROR(SecureRandom(fetch->id.data(), fetch->id.size()));
  std::lock_guard<std::mutex> lock(mutex_);
  fetches_[fetch->id] = fetch;
  return fetch;
}

void UcxFetches::SentTo(const std::shared_ptr<PendingFetch>& fetch, ucp_ep_h ep) {
  std::lock_guard<std::mutex> lock(mutex_);
  fetch->ep = ep;
}

size_t UcxFetches::PeerLost(ucp_ep_h ep, const std::string& why) {
  std::vector<std::shared_ptr<PendingFetch>> failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, fetch] : fetches_) {
      if (fetch->ep == ep) failed.push_back(fetch);
    }
  }
  // Failed out of the lock (Fail takes them out); each ends once its receives under way have
  // (UCX fails them with the endpoint), and wakes the serving loop, a Redis round trip.
  for (auto& fetch : failed) Fail(fetch, Status(ErrorCode::kUnavailable, why));
  return failed.size();
}

void UcxFetches::StopAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, fetch] : fetches_) {
    fetch->wake = nullptr;  // the serving loop has stopped
    fetch->abandoned = true;
    fetch->Complete(Status(ErrorCode::kStopped, "the server is stopping"));
  }
}

void UcxFetches::FailIfIdle(const std::shared_ptr<PendingFetch>& fetch, int timeout_ms) {
  service_.post([this, fetch, timeout_ms] {
    auto idle = std::chrono::steady_clock::now() - fetch->last_piece;
    if (fetch->failed || fetch->in_flight > 0 || idle < std::chrono::milliseconds(timeout_ms))
      return;
    Fail(fetch, Status(ErrorCode::kTimeout, "no piece from the other server for " +
                                                std::to_string(timeout_ms / 1000) + " s, with " +
                                                std::to_string(fetch->pieces_left) +
                                                " of its pieces still to come"));
  });
}

int UcxFetches::PageMakers() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 4, 1u, 4u));
}

bool UcxFetches::ReceivingBefore(const PendingFetch& waiting) {
  std::lock_guard<std::mutex> lock(mutex_);
  ucp_ep_h ep = waiting.ep;
  if (ep == nullptr) return false;
  bool any = false;
  for (auto it = receiving_.begin(); it != receiving_.end();) {
    std::shared_ptr<PendingFetch> other = it->lock();
    bool live = false;
    if (other) {
      std::lock_guard<std::mutex> other_lock(other->mutex);
      live = !other->done;
    }
    if (!live) {
      it = receiving_.erase(it);
      continue;
    }
    any = any || other->ep == ep;
    ++it;
  }
  return any;
}

std::shared_ptr<PendingFetch> UcxFetches::Take(const std::string& fetch_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = fetches_.find(fetch_id);
  if (found == fetches_.end()) return nullptr;
  auto fetch = found->second;
  fetches_.erase(found);
  return fetch;
}

std::shared_ptr<PendingFetch> UcxFetches::Find(const std::string& fetch_id,
                                               const ucp_ep_h& answered_by) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = fetches_.find(fetch_id);
  if (found == fetches_.end() || answered_by == nullptr || answered_by != found->second->ep)
    return nullptr;
  return found->second;
}

ucs_status_t UcxFetches::OnData(const void* header, size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param) {
  DataHeader h{};
  if (header_length < sizeof(h)) return UCS_OK;
  std::memcpy(&h, header, sizeof(h));
  ucp_ep_h from = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
  auto fetch = Find(std::string(reinterpret_cast<const char*>(h.fetch), kIdBytes), from);
  // Timed out, or not the asked server's answer (anyone may send to the worker): dropped.
  if (!fetch) return UCS_OK;
  {
    std::lock_guard<std::mutex> lock(fetch->mutex);
    if (fetch->done) return UCS_OK;  // timed out or called off meanwhile: the sink may be gone
    fetch->receiving = true;
  }
  if (fetch->failed) return UCS_OK;
  fetch->last_piece = std::chrono::steady_clock::now();
  if (h.code != 0) {
    size_t n = std::min<size_t>(h.message_length, header_length - sizeof(h));
    Fail(fetch, Status(static_cast<ErrorCode>(h.code),
                       std::string(static_cast<const char*>(header) + sizeof(h), n)));
    return UCS_OK;
  }
  bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  Status fits = CheckPiece(*fetch, h, length, rendezvous);
  if (!fits.ok()) {
    Fail(fetch, fits);
    return UCS_OK;
  }
  uint64_t index = h.offset / fetch->piece;
  fetch->seen[index] = true;
  NoteReceiving(fetch);
  if (fetch->sink.into == nullptr) return TakeStaged(fetch, data, h.offset, length);
  char* at = static_cast<char*>(fetch->sink.into) + h.offset;
  if (!rendezvous) {
    // A few bytes, UCX's until this returns: their pages made here (a page that cannot be had
    // fails the copy, where the write would raise SIGBUS).
    Status made = fetch->sink.memory == Memory::kHost && length > 0 ? PopulateHost(at, length, true)
                                                                    : Status::Ok();
    if (made.ok() && length > 0) std::memcpy(at, data, length);
    PiecePlaced(fetch, made);
    return UCS_OK;
  }
  if (fetch->sink.memory == Memory::kHost) {
    // Not before a piece has come and fit: a fetch that ends before its first piece ends at
    // once, and its memory goes with it.
    if (fetch->made.empty()) MakePages(fetch);
    if (!fetch->made[index]) {
      fetch->unmade[index] = {data, h.offset, length};
      return UCS_INPROGRESS;
    }
  }
  Receive(fetch, data, at, length,
          [this, fetch](Status received) { PiecePlaced(fetch, received); });
  return UCS_INPROGRESS;
}

Status UcxFetches::CheckPiece(const PendingFetch& fetch, const DataHeader& h, size_t length,
                              bool rendezvous) {
  const CopyService::Sink& sink = fetch.sink;
  uint64_t index = h.offset / fetch.piece;
  if (h.total != sink.bytes || h.offset % fetch.piece != 0 || index >= fetch.seen.size() ||
      length != std::min(fetch.piece, sink.bytes - h.offset) || fetch.seen[index]) {
    return Status(ErrorCode::kUnexpectedReply,
                  "the other server sent " + std::to_string(length) + " bytes at " +
                      std::to_string(h.offset) + " of " + std::to_string(h.total) +
                      ", not a piece of " + std::to_string(fetch.piece) + " of the " +
                      std::to_string(sink.bytes) + " asked for");
  }
  if (!rendezvous && length > 0 && (sink.into == nullptr || sink.memory == Memory::kGpu)) {
    // A server that did not heed kReadRendezvous: eager bytes are UCX's, gone after this call.
    return Status(ErrorCode::kUnsupported,
                  "the other server sent the bytes eagerly, which cannot go into GPU memory or "
                  "staging slots: run it with this version");
  }
  return Status::Ok();
}

void UcxFetches::NoteReceiving(const std::shared_ptr<PendingFetch>& fetch) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::any_of(receiving_.begin(), receiving_.end(),
                  [&](const std::weak_ptr<PendingFetch>& f) { return f.lock() == fetch; }))
    return;
  receiving_.erase(std::remove_if(receiving_.begin(), receiving_.end(),
                                  [](const std::weak_ptr<PendingFetch>& f) { return f.expired(); }),
                   receiving_.end());
  receiving_.push_back(fetch);
}

ucs_status_t UcxFetches::TakeStaged(const std::shared_ptr<PendingFetch>& fetch, void* desc,
                                    uint64_t offset, uint64_t length) {
  if (length == 0) {  // an empty tensor's one piece: nothing to land
    PiecePlaced(fetch, Status::Ok());
    return UCS_OK;
  }
  if (fetch->free_slots.empty()) {
    // Every slot holds a piece still being placed: this one waits in the sender's memory.
    fetch->waiting.push_back({desc, offset, length});
    return UCS_INPROGRESS;
  }
  Land(fetch, desc, offset, length);
  return UCS_INPROGRESS;
}

void UcxFetches::PiecePlaced(const std::shared_ptr<PendingFetch>& fetch, const Status& placed) {
  if (placed.ok()) {
    --fetch->pieces_left;
    fetch->last_piece = std::chrono::steady_clock::now();
  } else {
    Fail(fetch, placed);
  }
  Settle(fetch);
}

void UcxFetches::MakePages(const std::shared_ptr<PendingFetch>& fetch) {
  fetch->made.assign(fetch->seen.size(), false);
  auto next = std::make_shared<std::atomic<size_t>>(0);
  size_t makers = std::min(static_cast<size_t>(PageMakers()), fetch->made.size());
  for (size_t i = 0; i < makers; ++i) {
    ++fetch->in_flight;
    service_.aside([this, fetch, next] {
      Status status = Status::Ok();
      for (size_t index = (*next)++;
           index < fetch->made.size() && !fetch->abandoned && !*service_.stopping;
           index = (*next)++) {
        uint64_t offset = index * fetch->piece;
        // A page that cannot be had fails the copy, where UCX writing into it would raise
        // SIGBUS.
        status = PopulateHost(static_cast<char*>(fetch->sink.into) + offset,
                              std::min(fetch->piece, fetch->sink.bytes - offset), true);
        if (!status.ok()) break;
        service_.post([this, fetch, index] { PiecePagesMade(fetch, index); });
      }
      service_.post([this, fetch, status] {
        --fetch->in_flight;
        if (!status.ok()) Fail(fetch, status);
        Settle(fetch);
      });
    });
  }
}

void UcxFetches::PiecePagesMade(const std::shared_ptr<PendingFetch>& fetch, size_t index) {
  fetch->made[index] = true;
  auto waiting = fetch->unmade.find(index);
  if (fetch->failed || waiting == fetch->unmade.end()) return;
  PendingFetch::Waiting piece = waiting->second;
  fetch->unmade.erase(waiting);
  Receive(fetch, piece.desc, static_cast<char*>(fetch->sink.into) + piece.offset, piece.length,
          [this, fetch](Status received) { PiecePlaced(fetch, received); });
}

void UcxFetches::Receive(const std::shared_ptr<PendingFetch>& fetch, void* desc, void* at,
                         uint64_t length, std::function<void(Status)> received) {
  ++fetch->in_flight;
  auto* keep =
      new std::function<void(Status)>([this, fetch, received = std::move(received)](Status status) {
        --fetch->in_flight;
        received(std::move(status));
      });
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  rp.memory_type = UcxMemoryType(fetch->sink.into != nullptr ? fetch->sink.memory : Memory::kHost);
  rp.user_data = keep;
  rp.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user_data) {
    std::unique_ptr<std::function<void(Status)>> done(
        static_cast<std::function<void(Status)>*>(user_data));
    (*done)(status == UCS_OK ? Status::Ok() : UcxError("receiving the bytes", status));
    ucx->ucp_request_free(request);
  };
  ucs_status_ptr_t got = ucx->ucp_am_recv_data_nbx(service_.worker, desc, at, length, &rp);
  if (UCS_PTR_IS_PTR(got)) return;
  std::unique_ptr<std::function<void(Status)>> done(keep);
  (*done)(got == nullptr ? Status::Ok() : UcxError("receiving the bytes", UCS_PTR_STATUS(got)));
}

void UcxFetches::Land(const std::shared_ptr<PendingFetch>& fetch, void* desc, uint64_t offset,
                      uint64_t length) {
  void* slot = fetch->free_slots.back();
  fetch->free_slots.pop_back();
  Receive(fetch, desc, slot, length, [this, fetch, slot, offset, length](Status received) {
    if (!received.ok() || fetch->failed) {
      fetch->free_slots.push_back(slot);
      return received.ok() ? Settle(fetch) : Fail(fetch, received);  // Fail settles
    }
    // Placed by the sink (a copy on the device's worker); back here once the slot is free.
    ++fetch->in_flight;
    fetch->sink.place(offset, length, slot, [this, fetch, slot](Status placed) {
      service_.post([this, fetch, slot, placed] {
        --fetch->in_flight;
        fetch->free_slots.push_back(slot);
        if (placed.ok() && !fetch->failed && !fetch->waiting.empty()) {
          PendingFetch::Waiting next = fetch->waiting.front();
          fetch->waiting.pop_front();
          Land(fetch, next.desc, next.offset, next.length);
        }
        PiecePlaced(fetch, placed);
      });
    });
  });
}

void UcxFetches::Fail(const std::shared_ptr<PendingFetch>& fetch, Status why) {
  if (!fetch->failed) fetch->failed = std::move(why);
  fetch->abandoned = true;
  (void)Take(fetch->id);  // no further piece is taken
  for (const PendingFetch::Waiting& waiting : fetch->waiting)
    ucx->ucp_am_data_release(service_.worker, waiting.desc);
  for (const auto& [index, waiting] : fetch->unmade)
    ucx->ucp_am_data_release(service_.worker, waiting.desc);
  fetch->waiting.clear();
  fetch->unmade.clear();
  Settle(fetch);
}

void UcxFetches::Settle(const std::shared_ptr<PendingFetch>& fetch) {
  if (fetch->in_flight > 0) return;
  if (fetch->failed) return fetch->Complete(*fetch->failed);
  if (fetch->pieces_left == 0) {
    (void)Take(fetch->id);
    fetch->Complete(Status::Ok());
  }
}

}  // namespace mcd
