// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// CopyService over UCX's active messages (ucp_am_send_nbx, ucp_am_recv_data_nbx), through the
// functions server/ucx_api.h looks up at run time.
#include <ucp/api/ucp.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "alloc/allocator.h"
#include "common/hex.h"
#include "common/log.h"
#include "server/copy_grant.h"
#include "server/copy_service.h"
#include "server/copy_wire.h"
#include "server/ucx_api.h"

namespace mcd {

namespace {

// Reads waiting for the serving loop at most: more, from a peer that floods the worker, are
// answered unavailable at once rather than kept (or dropped, which would leave a real asker
// waiting out its whole timeout).
constexpr size_t kMaxWaitingReads = 1024;

using copy_wire::DataHeader;
using copy_wire::kDataId;
using copy_wire::kIdBytes;
using copy_wire::kReadId;
using copy_wire::ReadHeader;

ucs_memory_type_t UcxMemoryType(Memory memory) {
  return memory == Memory::kGpu ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

// A fetch the main thread waits for; completed on the service's thread.
struct PendingFetch {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  Status status;
  void* into = nullptr;
  Memory memory = Memory::kHost;
  bool receiving = false;  // UCX is writing into `into` (a rendezvous in flight)
  uint64_t expected = 0;
  ucp_ep_h ep = nullptr;       // set on the service's thread when the read is sent
  std::function<void()> wake;  // the serving loop's, told when the fetch ends
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
};

// What a send keeps alive until UCX says it went.
struct SendState {
  std::string header;
  const void* data = nullptr;
  uint64_t bytes = 0;
  Memory memory = Memory::kHost;
  std::function<void()> release;        // once UCX no longer reads `data`
  std::shared_ptr<PendingFetch> fetch;  // a READ: failed if the send fails
  ~SendState() {
    if (release) release();
  }
};

class UcxCopyService final : public CopyService {
 public:
  explicit UcxCopyService(std::function<void()> wake) : wake_(std::move(wake)) {}
  ~UcxCopyService() override;

  Status Init();
  const std::string& address_hex() const override { return address_hex_; }
  bool reads_gpu_memory() const override { return reads_gpu_memory_; }
  std::string version() const override { return ucx->ucp_get_version_string(); }
  Waiting TakeReads() override;
  void Answer(const Read& read, const Status& status, const void* data, uint64_t bytes,
              Memory memory, std::function<void()> release) override;
  Result<std::unique_ptr<Fetching>> Begin(const std::string& address_hex, const std::string& name,
                                          int64_t ctime_ms, const CopyGrant& grant,
                                          const std::string& asker_node, void* into, uint64_t bytes,
                                          Memory memory, int timeout_ms) override;

 private:
  friend class UcxFetching;
  void Loop();
  void Post(std::function<void()> job);
  // Sends an active message; `state` lives until UCX is done with it.
  void Send(ucp_ep_h ep, unsigned id, std::unique_ptr<SendState> state, uint32_t flags);
  Result<ucp_ep_h> Endpoint(const std::string& address_hex);
  ucs_status_t OnRead(const void* header, size_t header_length, const ucp_am_recv_param_t* param);
  ucs_status_t OnData(const void* header, size_t header_length, void* data, size_t length,
                      const ucp_am_recv_param_t* param);
  // Whether the bytes of another fetch from the server `waiting` asked are arriving: a fetch
  // waiting behind them has its time run from their end, not from its read.
  bool ReceivingBefore(const PendingFetch& waiting);
  // The fetch `fetch_id` names, taken out; null when there is none. With `answered_by`, only
  // when that is the endpoint its read went to.
  std::shared_ptr<PendingFetch> TakeFetch(const std::string& fetch_id,
                                          const ucp_ep_h* answered_by = nullptr);
  void PeerLost(ucp_ep_h ep, ucs_status_t status);

  std::function<void()> wake_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::string address_hex_;
  bool reads_gpu_memory_ = false;
  std::thread thread_;
  bool stop_ = false;  // under jobs_mutex_
  std::mutex jobs_mutex_;
  std::deque<std::function<void()>> jobs_;
  std::mutex reads_mutex_;
  std::vector<Read> reads_;
  uint64_t turned_away_ = 0;  // under reads_mutex_
  std::mutex fetches_mutex_;
  std::map<std::string, std::shared_ptr<PendingFetch>> fetches_;  // by fetch id
  std::vector<std::weak_ptr<PendingFetch>> receiving_;  // answers whose bytes are arriving
  std::map<std::string, ucp_ep_h> endpoints_;           // the service's thread only
  std::vector<ucp_ep_h> failed_;  // endpoints whose peer failed; all are closed at stop
};

Status UcxCopyService::Init() {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucx->ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcxError("ucp_config_read", s);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  s = ucx->ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context_);
  ucx->ucp_config_release(config);
  if (s != UCS_OK) return UcxError("ucp_init", s);
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucx->ucp_context_query(context_, &attr) == UCS_OK) {
    reads_gpu_memory_ = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_MULTI;  // ucp_worker_signal comes from other threads
  s = ucx->ucp_worker_create(context_, &wp, &worker_);
  if (s != UCS_OK) return UcxError("ucp_worker_create", s);
  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  s = ucx->ucp_worker_get_address(worker_, &address, &address_length);
  if (s != UCS_OK) return UcxError("ucp_worker_get_address", s);
  address_hex_ =
      HexEncode(std::string_view(reinterpret_cast<const char*>(address), address_length));
  ucx->ucp_worker_release_address(worker_, address);
  for (unsigned id : {kReadId, kDataId}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.arg = this;
    hp.cb = id == kReadId
                ? +[](void* arg, const void* header, size_t header_length, void*, size_t,
                      const ucp_am_recv_param_t* param) {
                    return static_cast<UcxCopyService*>(arg)->OnRead(header, header_length, param);
                  }
                : +[](void* arg, const void* header, size_t header_length, void* data, size_t length,
                      const ucp_am_recv_param_t* param) {
                    return static_cast<UcxCopyService*>(arg)->OnData(header, header_length, data,
                                                                     length, param);
                  };
    s = ucx->ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK) return UcxError("ucp_worker_set_am_recv_handler", s);
  }
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

UcxCopyService::~UcxCopyService() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(jobs_mutex_);
      stop_ = true;
    }
    ucx->ucp_worker_signal(worker_);
    thread_.join();
  }
  {
    std::lock_guard<std::mutex> lock(fetches_mutex_);
    for (auto& [req, fetch] : fetches_) {
      fetch->wake = nullptr;  // the serving loop has stopped
      fetch->Complete(Status(ErrorCode::kStopped, "the server is stopping"));
    }
  }
  if (worker_ != nullptr) ucx->ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucx->ucp_cleanup(context_);
}

void UcxCopyService::Loop() {
  for (;;) {
    std::deque<std::function<void()>> jobs;
    {
      std::lock_guard<std::mutex> lock(jobs_mutex_);
      if (stop_) break;
      jobs.swap(jobs_);
    }
    for (auto& job : jobs) job();
    while (ucx->ucp_worker_progress(worker_) != 0) {
    }
    {
      std::lock_guard<std::mutex> lock(jobs_mutex_);
      if (stop_ || !jobs_.empty()) continue;
    }
    // Sleeps until the network or a Post wakes the worker (UCP_FEATURE_WAKEUP): no polling.
    ucs_status_t armed = ucx->ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) continue;
    if (armed == UCS_OK) ucx->ucp_worker_wait(worker_);
  }
  // Endpoints closed while the worker still progresses their closing, taken out first: progress
  // while closing may report another endpoint lost (PeerLost).
  std::vector<ucp_ep_h> closing_all = std::move(failed_);
  for (auto& [address, ep] : endpoints_) closing_all.push_back(ep);
  endpoints_.clear();
  failed_.clear();
  for (ucp_ep_h ep : closing_all) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t closing = ucx->ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(closing)) {
      while (ucx->ucp_request_check_status(closing) == UCS_INPROGRESS)
        ucx->ucp_worker_progress(worker_);
      ucx->ucp_request_free(closing);
    }
  }
}

void UcxCopyService::Post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(jobs_mutex_);
    jobs_.push_back(std::move(job));
  }
  ucx->ucp_worker_signal(worker_);
}

void UcxCopyService::Send(ucp_ep_h ep, unsigned id, std::unique_ptr<SendState> state,
                          uint32_t flags) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.flags = flags;
  param.memory_type = UcxMemoryType(state->memory);
  param.user_data = state.get();
  param.cb.send = [](void* request, ucs_status_t status, void* user_data) {
    std::unique_ptr<SendState> done(static_cast<SendState*>(user_data));
    if (status != UCS_OK && done->fetch)
      done->fetch->Complete(UcxError("sending the read", status));
    ucx->ucp_request_free(request);
  };
  SendState* raw = state.get();
  ucs_status_ptr_t sent = ucx->ucp_am_send_nbx(ep, id, raw->header.data(), raw->header.size(),
                                               raw->data, raw->bytes, &param);
  if (UCS_PTR_IS_PTR(sent)) {
    state.release();  // the callback owns it now
    return;
  }
  if (UCS_PTR_IS_ERR(sent) && raw->fetch)
    raw->fetch->Complete(UcxError("sending the read", UCS_PTR_STATUS(sent)));
}

Result<ucp_ep_h> UcxCopyService::Endpoint(const std::string& address_hex) {
  auto found = endpoints_.find(address_hex);
  if (found != endpoints_.end()) return found->second;
  Result<std::string> address = HexDecode(address_hex);
  if (!address.ok()) {
    return Status(ErrorCode::kUnexpectedReply, "the other server's ucx_address is not hex");
  }
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address->data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.arg = this;
  params.err_handler.cb = [](void* arg, ucp_ep_h ep, ucs_status_t status) {
    // The peer went away: its fetches fail now rather than at their timeout, and the endpoint
    // is forgotten, so the next fetch makes a new one.
    auto* self = static_cast<UcxCopyService*>(arg);
    self->PeerLost(ep, status);
  };
  ucp_ep_h ep = nullptr;
  ucs_status_t s = ucx->ucp_ep_create(worker_, &params, &ep);
  if (s == UCS_ERR_UNREACHABLE) {
    // UCX's shared-memory transports cannot report a peer's failure, so with only those at hand
    // (UCX_TLS=sm) the endpoint goes without: a peer that dies is then noticed at the fetch's
    // timeout instead of at once.
    params.field_mask &= ~static_cast<uint64_t>(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                                UCP_EP_PARAM_FIELD_ERR_HANDLER);
    s = ucx->ucp_ep_create(worker_, &params, &ep);
  }
  if (s != UCS_OK) return UcxError("connecting to the other server (ucp_ep_create)", s);
  endpoints_[address_hex] = ep;
  return ep;
}

ucs_status_t UcxCopyService::OnRead(const void* header, size_t header_length,
                                    const ucp_am_recv_param_t* param) {
  ReadHeader h{};
  if (header_length < sizeof(h) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
    return UCS_OK;
  std::memcpy(&h, header, sizeof(h));
  size_t text_length = header_length - sizeof(h);
  if (h.name_length > text_length || h.node_length > text_length - h.name_length) return UCS_OK;
  const char* text = static_cast<const char*>(header) + sizeof(h);
  auto raw = [](const uint8_t* id) {
    return std::string(reinterpret_cast<const char*>(id), kIdBytes);
  };
  Read read;
  read.fetch = raw(h.fetch);
  read.grant = CopyGrant{raw(h.grant), raw(h.token)};
  read.ctime_ms = h.ctime_ms;
  read.name.assign(text, h.name_length);
  read.asker_node.assign(text + h.name_length, h.node_length);
  read.reply_ep = param->reply_ep;
  read.rendezvous = (h.flags & copy_wire::kReadRendezvous) != 0;
  bool kept = false;
  bool first = false;  // the serving loop has nothing of this kind to take yet: woken
  {
    std::lock_guard<std::mutex> lock(reads_mutex_);
    kept = reads_.size() < kMaxWaitingReads;
    if (kept) {
      first = reads_.empty();
      reads_.push_back(std::move(read));
    } else {
      first = turned_away_++ == 0;
    }
  }
  if (!kept) {
    Answer(
        read,
        Status(ErrorCode::kUnavailable, "the other server has " + std::to_string(kMaxWaitingReads) +
                                            " reads waiting already: try again"),
        nullptr, 0, Memory::kHost, nullptr);
  }
  // Once until the loop takes them: a wake costs a Redis round trip on this thread, which a
  // flood of reads must not multiply.
  if (first && wake_) wake_();
  return UCS_OK;
}

void UcxCopyService::PeerLost(ucp_ep_h ep, ucs_status_t status) {
  std::string why =
      std::string("the other server went away mid-copy (") + ucx->ucs_status_string(status) + ")";
  for (auto it = endpoints_.begin(); it != endpoints_.end(); ++it) {
    if (it->second == ep) {
      endpoints_.erase(it);
      // Not closed yet: reads waiting for their answer may name it, which then fails to send.
      failed_.push_back(ep);
      break;
    }
  }
  std::vector<std::shared_ptr<PendingFetch>> failed;
  {
    std::lock_guard<std::mutex> lock(fetches_mutex_);
    for (auto it = fetches_.begin(); it != fetches_.end();) {
      if (it->second->ep == ep) {
        failed.push_back(std::move(it->second));
        it = fetches_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Completed out of the lock: each wakes the serving loop, a Redis round trip.
  for (auto& fetch : failed) fetch->Complete(Status(ErrorCode::kUnavailable, why));
  if (!failed.empty()) return Log(LogLevel::kWarn, "copy service: " + why);
  // A server that stopped after its copies, or one whose read waits here for its answer.
  Log(LogLevel::kInfo, std::string("copy service: a server this one exchanged copies with has "
                                   "gone (") +
                           ucx->ucs_status_string(status) + ")");
}

bool UcxCopyService::ReceivingBefore(const PendingFetch& waiting) {
  std::lock_guard<std::mutex> lock(fetches_mutex_);
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

std::shared_ptr<PendingFetch> UcxCopyService::TakeFetch(const std::string& fetch_id,
                                                        const ucp_ep_h* answered_by) {
  std::lock_guard<std::mutex> lock(fetches_mutex_);
  auto found = fetches_.find(fetch_id);
  if (found == fetches_.end()) return nullptr;
  auto fetch = found->second;
  if (answered_by != nullptr && (*answered_by == nullptr || *answered_by != fetch->ep))
    return nullptr;
  fetches_.erase(found);
  return fetch;
}

ucs_status_t UcxCopyService::OnData(const void* header, size_t header_length, void* data,
                                    size_t length, const ucp_am_recv_param_t* param) {
  DataHeader h{};
  if (header_length < sizeof(h)) return UCS_OK;
  std::memcpy(&h, header, sizeof(h));
  ucp_ep_h from = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
  auto fetch = TakeFetch(std::string(reinterpret_cast<const char*>(h.fetch), kIdBytes), &from);
  // Timed out, or not the asked server's answer (anyone may send to the worker): dropped.
  if (!fetch) return UCS_OK;
  {
    std::lock_guard<std::mutex> lock(fetch->mutex);
    if (fetch->done) return UCS_OK;  // failed meanwhile (its read's send): `into` may be gone
  }
  if (h.code != 0) {
    size_t n = std::min<size_t>(h.message_length, header_length - sizeof(h));
    fetch->Complete(Status(static_cast<ErrorCode>(h.code),
                           std::string(static_cast<const char*>(header) + sizeof(h), n)));
    return UCS_OK;
  }
  if (length != fetch->expected) {
    fetch->Complete(
        Status(ErrorCode::kUnexpectedReply, "the other server sent " + std::to_string(length) +
                                                " bytes, not " + std::to_string(fetch->expected)));
    return UCS_OK;
  }
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    if (fetch->memory == Memory::kGpu) {  // a server that did not heed kReadRendezvous
      fetch->Complete(
          Status(ErrorCode::kUnsupported,
                 "the other server sent the bytes eagerly, which cannot go into GPU memory "
                 "in place: run it with this version, or this one with --stage-gpu-copies"));
      return UCS_OK;
    }
    std::memcpy(fetch->into, data, length);
    fetch->Complete(Status::Ok());
    return UCS_OK;
  }
  // Rendezvous: UCX moves the bytes into the buffer, then calls back.
  auto* keep = new std::shared_ptr<PendingFetch>(fetch);
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  rp.memory_type = UcxMemoryType(fetch->memory);
  rp.user_data = keep;
  rp.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user_data) {
    std::unique_ptr<std::shared_ptr<PendingFetch>> done(
        static_cast<std::shared_ptr<PendingFetch>*>(user_data));
    (*done)->Complete(status == UCS_OK ? Status::Ok() : UcxError("receiving the bytes", status));
    ucx->ucp_request_free(request);
  };
  {
    std::lock_guard<std::mutex> lock(fetch->mutex);
    fetch->receiving = true;
  }
  {
    std::lock_guard<std::mutex> lock(fetches_mutex_);
    receiving_.erase(
        std::remove_if(receiving_.begin(), receiving_.end(),
                       [](const std::weak_ptr<PendingFetch>& f) { return f.expired(); }),
        receiving_.end());
    receiving_.push_back(fetch);
  }
  ucs_status_ptr_t got = ucx->ucp_am_recv_data_nbx(worker_, data, fetch->into, length, &rp);
  if (UCS_PTR_IS_PTR(got)) return UCS_INPROGRESS;
  delete keep;
  fetch->Complete(got == nullptr ? Status::Ok()
                                 : UcxError("receiving the bytes", UCS_PTR_STATUS(got)));
  return UCS_OK;
}

CopyService::Waiting UcxCopyService::TakeReads() {
  std::lock_guard<std::mutex> lock(reads_mutex_);
  Waiting out;
  out.reads.swap(reads_);
  std::swap(out.turned_away, turned_away_);
  return out;
}

void UcxCopyService::Answer(const Read& read, const Status& status, const void* data,
                            uint64_t bytes, Memory memory, std::function<void()> release) {
  auto state = std::make_unique<SendState>();
  DataHeader h{};
  std::memcpy(h.fetch, read.fetch.data(), kIdBytes);
  h.code = static_cast<int32_t>(status.code());
  std::string message = status.ok() ? "" : status.message();
  h.message_length = static_cast<uint32_t>(message.size());
  h.bytes = bytes;
  state->header.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  state->header += message;
  state->data = data;
  state->bytes = bytes;
  state->memory = memory;
  state->release = std::move(release);
  auto* shared = new std::unique_ptr<SendState>(std::move(state));
  ucp_ep_h ep = static_cast<ucp_ep_h>(read.reply_ep);
  // With a reply endpoint: the asker checks that the answer comes from the server it asked.
  uint32_t flags =
      UCP_AM_SEND_FLAG_REPLY | (read.rendezvous && status.ok() ? UCP_AM_SEND_FLAG_RNDV : 0);
  Post([this, ep, shared, flags] {
    std::unique_ptr<std::unique_ptr<SendState>> owned(shared);
    const SendState& answer = **owned;
    if (answer.memory == Memory::kHost && answer.data != nullptr)
      (void)PopulateHost(const_cast<void*>(answer.data), answer.bytes, false);  // a tensor's own
    Send(ep, kDataId, std::move(*owned), flags);
  });
}

// A fetch under way: its read sent, its answer awaited on the service's thread.
class UcxFetching final : public CopyService::Fetching {
 public:
  UcxFetching(UcxCopyService& service, std::string id, std::shared_ptr<PendingFetch> fetch,
              int timeout_ms)
      : service_(service),
        id_(std::move(id)),
        fetch_(std::move(fetch)),
        deadline_(std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms)),
        last_deadline_(deadline_ + std::chrono::milliseconds(timeout_ms)),
        timeout_ms_(timeout_ms) {}
  ~UcxFetching() override { (void)Stop(); }

  std::optional<Status> Poll() override {
    std::unique_lock<std::mutex> lock(fetch_->mutex);
    if (fetch_->done) return Finished(lock);
    // Once the bytes are arriving the receive ends either way: done, or failed with its endpoint.
    auto now = std::chrono::steady_clock::now();
    if (fetch_->receiving || now < deadline_) return std::nullopt;
    lock.unlock();
    // Behind another answer of the same server, whose bytes are still arriving: waits on, up to
    // twice its limit in all (the wait mcd-create allows a copy).
    if (now < last_deadline_ && service_.ReceivingBefore(*fetch_)) {
      deadline_ = std::min(now + std::chrono::milliseconds(timeout_ms_), last_deadline_);
      return std::nullopt;
    }
    if (service_.TakeFetch(id_) != nullptr) {  // a late answer is dropped
      fetch_->Complete(Status(ErrorCode::kTimeout, "no answer from the other server within " +
                                                       std::to_string(timeout_ms_ / 1000) + " s"));
    }
    lock.lock();
    // Else the answer came just now: its bytes are in, or arriving.
    if (fetch_->done) return Finished(lock);
    return std::nullopt;
  }

  Status Stop() override {
    if (auto outcome = Poll()) return *outcome;
    if (service_.TakeFetch(id_) != nullptr)
      fetch_->Complete(Status(ErrorCode::kStopped, "called off before the bytes came"));
    std::unique_lock<std::mutex> lock(fetch_->mutex);  // else answered: the bytes are arriving
    fetch_->done_cv.wait(lock, [&] { return fetch_->done; });
    return Finished(lock);
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
    (void)service_.TakeFetch(id_);
    return status;
  }
  UcxCopyService& service_;
  const std::string id_;
  std::shared_ptr<PendingFetch> fetch_;
  std::chrono::steady_clock::time_point deadline_;
  const std::chrono::steady_clock::time_point last_deadline_;  // however long others take
  const int timeout_ms_;
};

Result<std::unique_ptr<CopyService::Fetching>> UcxCopyService::Begin(
    const std::string& address_hex, const std::string& name, int64_t ctime_ms,
    const CopyGrant& grant, const std::string& asker_node, void* into, uint64_t bytes,
    Memory memory, int timeout_ms) {
  if (grant.id.size() != kIdBytes || grant.token.size() != kIdBytes) {
    return Status(ErrorCode::kInternal, "a copy's grant is not 2 x 16 bytes");
  }
  auto fetch = std::make_shared<PendingFetch>();
  fetch->expected = bytes;
  fetch->into = into;
  fetch->memory = memory;
  fetch->wake = wake_;
  // Unguessable: an answer counts only if it names this id, which only the read carries.
  std::string fetch_id(kIdBytes, '\0');
  MCD_RETURN_IF_ERROR(SecureRandom(fetch_id.data(), fetch_id.size()));
  {
    std::lock_guard<std::mutex> lock(fetches_mutex_);
    fetches_[fetch_id] = fetch;
  }
  auto state = std::make_unique<SendState>();
  ReadHeader h{};
  std::memcpy(h.fetch, fetch_id.data(), kIdBytes);
  std::memcpy(h.grant, grant.id.data(), kIdBytes);
  std::memcpy(h.token, grant.token.data(), kIdBytes);
  h.ctime_ms = ctime_ms;
  h.name_length = static_cast<uint32_t>(name.size());
  h.node_length = static_cast<uint32_t>(asker_node.size());
  h.flags = memory == Memory::kGpu ? copy_wire::kReadRendezvous : 0;
  state->header.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  state->header += name;
  state->header += asker_node;
  state->fetch = fetch;
  auto* shared = new std::unique_ptr<SendState>(std::move(state));
  Post([this, address_hex, shared, fetch] {
    std::unique_ptr<std::unique_ptr<SendState>> owned(shared);
    {
      std::lock_guard<std::mutex> lock(fetch->mutex);
      if (fetch->done) return;  // stopped, or failed, before it was sent: `into` may be gone
    }
    if (fetch->memory == Memory::kHost) {
      // Before the read goes: a page that cannot be had fails the copy, where UCX writing into
      // it would raise SIGBUS.
      Status populated = PopulateHost(fetch->into, fetch->expected, true);
      if (!populated.ok()) return fetch->Complete(populated);
    }
    auto ep = Endpoint(address_hex);
    if (!ep.ok()) return fetch->Complete(ep.status());
    {
      std::lock_guard<std::mutex> lock(fetches_mutex_);
      fetch->ep = ep.value();
    }
    Send(ep.value(), kReadId, std::move(*owned), UCP_AM_SEND_FLAG_REPLY);
  });
  return std::unique_ptr<Fetching>(
      std::make_unique<UcxFetching>(*this, std::move(fetch_id), std::move(fetch), timeout_ms));
}

}  // namespace

Result<std::unique_ptr<CopyService>> CopyService::Start(std::function<void()> wake) {
  MCD_RETURN_IF_ERROR(LoadUcx());
  auto service = std::make_unique<UcxCopyService>(std::move(wake));
  MCD_RETURN_IF_ERROR(service->Init());
  return std::unique_ptr<CopyService>(std::move(service));
}

}  // namespace mcd
