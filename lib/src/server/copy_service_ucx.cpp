// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// CopyService over UCX's active messages (ucp_am_send_nbx, ucp_am_recv_data_nbx), through the
// functions server/ucx_api.h looks up at run time: the worker's thread, the reads it is sent and
// the answers it sends. Its connections to other servers: server/copy_endpoints_ucx.h; its
// fetches' pieces: server/copy_fetches_ucx.h.
#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "alloc/allocator.h"
#include "common/hex.h"
#include "common/log.h"
#include "server/copy_endpoints_ucx.h"
#include "server/copy_fetches_ucx.h"
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

// What a send keeps alive until UCX says it went.
struct SendState {
  std::string header;
  const void* data = nullptr;
  uint64_t bytes = 0;
  Memory memory = Memory::kHost;
  std::function<void(Status)> sent;       // once UCX no longer reads `data`
  Status outcome;                         // the send's
  std::shared_ptr<PendingFetch> fetch;    // a READ: failed if the send fails
  std::atomic<int>* under_way = nullptr;  // the service's count of sends UCX has, while it has it
  ~SendState() {
    if (under_way != nullptr) --*under_way;
    if (sent) sent(outcome);
  }
};

// A SendState handed to a job of the service's loop, which owns it until the job takes it. A job
// that never runs (the service stopped first) frees it with itself, its sender told that
// nothing went.
class PostedSend {
 public:
  explicit PostedSend(std::unique_ptr<SendState> state) : state_(std::move(state)) {}
  ~PostedSend() {
    if (state_) state_->outcome = Status(ErrorCode::kUnavailable, "the copy service stopped");
  }
  std::unique_ptr<SendState> Take() { return std::move(state_); }

 private:
  std::unique_ptr<SendState> state_;
};

// The read a READ message's header says, and the address of the worker that sent it; none where
// the header does not hold together.
std::optional<CopyService::Read> DecodeRead(const void* header, size_t header_length,
                                            std::string* asker_address) {
  ReadHeader h{};
  if (header_length < sizeof(h)) return std::nullopt;
  std::memcpy(&h, header, sizeof(h));
  size_t text_length = header_length - sizeof(h);
  if (h.name_length > text_length || h.node_length > text_length - h.name_length ||
      h.address_length > text_length - h.name_length - h.node_length) {
    return std::nullopt;
  }
  const char* text = static_cast<const char*>(header) + sizeof(h);
  auto raw = [](const uint8_t* id) {
    return std::string(reinterpret_cast<const char*>(id), kIdBytes);
  };
  CopyService::Read read;
  read.fetch = raw(h.fetch);
  read.grant = CopyGrant{raw(h.grant), raw(h.token)};
  read.ctime_ms = h.ctime_ms;
  read.name.assign(text, h.name_length);
  read.asker_node.assign(text + h.name_length, h.node_length);
  read.rendezvous = (h.flags & copy_wire::kReadRendezvous) != 0;
  // The asker's word, bounded: pieces of a few bytes would make a tensor millions of sends.
  read.piece_bytes = std::clamp<uint64_t>(h.piece_bytes, kMinCopyPieceBytes, kMaxCopyPieceBytes);
  asker_address->assign(text + h.name_length + h.node_length, h.address_length);
  return read;
}

class UcxCopyService final : public CopyService {
 public:
  explicit UcxCopyService(std::function<void()> wake) : wake_(std::move(wake)) {}
  ~UcxCopyService() override;

  Status Init();
  const std::string& address_hex() const override { return address_hex_; }
  bool reads_gpu_memory() const override { return reads_gpu_memory_; }
  std::string version() const override { return ucx->ucp_get_version_string(); }
  Waiting TakeReads() override;
  void Refuse(const Read& read, const Status& status) override;
  void SendPiece(const Read& read, uint64_t offset, const void* data, uint64_t length,
                 uint64_t total, Memory memory, std::function<void(Status)> sent) override;
  void SendAll(const Read& read, const void* data, uint64_t total, Memory memory,
               std::function<void()> release) override;
  Result<std::unique_ptr<Fetching>> Begin(const std::string& address_hex, const std::string& name,
                                          int64_t ctime_ms, const CopyGrant& grant,
                                          const std::string& asker_node, Sink sink,
                                          uint64_t piece_bytes, int timeout_ms) override;

 private:
  void Loop();
  void Post(std::function<void()> job);
  // Sends an active message; `state` lives until UCX is done with it.
  void Send(ucp_ep_h ep, unsigned id, std::unique_ptr<SendState> state, uint32_t flags);
  // The message refusing `read` with `status`.
  std::unique_ptr<SendState> Refusal(const Read& read, const Status& status);
  // Logs a read left unanswered, up to one line a second, counting the others.
  void LogUnanswered(const Read& read);
  uint64_t unanswered_ = 0;                                // the service's thread only
  std::chrono::steady_clock::time_point unanswered_at_{};  // its last line
  std::atomic<bool> closing_{false};     // Loop closes the endpoints: reads are ignored
  std::atomic<int> sends_under_way_{0};  // handed to UCX, their callback not run yet
  ucs_status_t OnRead(const void* header, size_t header_length, const ucp_am_recv_param_t* param);
  // Runs `job` on a thread of its own, which the service outlives (its destructor waits for
  // every one; `stopping_` tells them to end), or here where no thread can be started.
  void RunAside(std::function<void()> job);
  std::atomic<int> aside_{0};  // threads of RunAside still running
  std::atomic<bool> stopping_{false};
  static constexpr int kSendWindow = 4;  // SendAll's pieces in flight at most
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
  UcxFetches fetches_;
  UcxEndpoints connections_;  // the service's thread only
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
  connections_.Bind(worker_, [this](ucp_ep_h ep, ucs_status_t status) { PeerLost(ep, status); });
  Status reporting = connections_.CheckFailureReporting(address);
  ucx->ucp_worker_release_address(worker_, address);
  MCD_RETURN_IF_ERROR(reporting);
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
                    return static_cast<UcxCopyService*>(arg)->fetches_.OnData(
                        header, header_length, data, length, param);
                  };
    s = ucx->ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK) return UcxError("ucp_worker_set_am_recv_handler", s);
  }
  fetches_.Bind({worker_, [this](std::function<void()> job) { Post(std::move(job)); },
                 [this](std::function<void()> job) { RunAside(std::move(job)); }, &stopping_});
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
  fetches_.StopAll();
  // Their piece, then they go: what they post is never run, and goes here, while what its
  // senders' callbacks touch is still there.
  stopping_ = true;
  while (aside_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::deque<std::function<void()>> unrun;
  {
    std::lock_guard<std::mutex> lock(jobs_mutex_);
    unrun.swap(jobs_);
  }
  unrun.clear();
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
  // Endpoints closed while the worker still progresses their closing: a read that comes
  // meanwhile takes no connection over. Answers go on these endpoints alone
  // (UcxEndpoints::TakeOver), so closing them ends the sends under way, which UCX's worker must
  // not be destroyed with.
  closing_ = true;
  connections_.CloseAll();
  // The sends those endpoints had under way end with them, cancelled from UCX's callbacks, which
  // only progress runs: run before the worker goes, so that the callbacks free what they own.
  // Bounded, for a send whose cancelling waits for hardware that never answers.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (sends_under_way_ > 0 && std::chrono::steady_clock::now() < deadline)
    ucx->ucp_worker_progress(worker_);
  if (sends_under_way_ > 0) {
    Log(LogLevel::kWarn, "copy service: " + std::to_string(sends_under_way_.load()) +
                             " send(s) still under way at stop, left to UCX");
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
    if (status != UCS_OK) done->outcome = UcxError("sending", status);
    if (status != UCS_OK && done->fetch)
      done->fetch->Complete(UcxError("sending the read", status));
    ucx->ucp_request_free(request);
  };
  SendState* raw = state.get();
  ucs_status_ptr_t sent = ucx->ucp_am_send_nbx(ep, id, raw->header.data(), raw->header.size(),
                                               raw->data, raw->bytes, &param);
  if (UCS_PTR_IS_PTR(sent)) {
    ++sends_under_way_;
    raw->under_way = &sends_under_way_;
    state.release();  // the callback owns it now
    return;
  }
  if (UCS_PTR_IS_ERR(sent)) raw->outcome = UcxError("sending", UCS_PTR_STATUS(sent));
  if (UCS_PTR_IS_ERR(sent) && raw->fetch)
    raw->fetch->Complete(UcxError("sending the read", UCS_PTR_STATUS(sent)));
}

ucs_status_t UcxCopyService::OnRead(const void* header, size_t header_length,
                                    const ucp_am_recv_param_t* param) {
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) return UCS_OK;
  std::string asker_address;
  std::optional<Read> decoded = DecodeRead(header, header_length, &asker_address);
  if (!decoded) return UCS_OK;
  Read& read = *decoded;
  if (closing_) return UCS_OK;
  switch (connections_.TakeOver(asker_address, param->reply_ep)) {
    case UcxEndpoints::Connection::kTaken:
      read.reply_ep = param->reply_ep;
      break;
    case UcxEndpoints::Connection::kOther:
      // Refused on the connection it came on, now, while UCX keeps it for this callback.
      Send(param->reply_ep, kDataId,
           Refusal(read, Status(ErrorCode::kUnavailable,
                                "the other server cannot answer on the connection the read came "
                                "on: the read names another worker's address, or the two "
                                "servers' connections to each other are out of step (restart "
                                "one of them)")),
           UCP_AM_SEND_FLAG_REPLY);
      return UCS_OK;
    case UcxEndpoints::Connection::kLost:
      LogUnanswered(read);
      return UCS_OK;
  }
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
    Refuse(read, Status(ErrorCode::kUnavailable, "the other server has " +
                                                     std::to_string(kMaxWaitingReads) +
                                                     " reads waiting already: try again"));
  }
  // Once until the loop takes them: a wake costs a Redis round trip on this thread, which a
  // flood of reads must not multiply.
  if (first && wake_) wake_();
  return UCS_OK;
}

void UcxCopyService::PeerLost(ucp_ep_h ep, ucs_status_t status) {
  // The peer went away: its fetches fail now rather than at their timeout (the endpoint has
  // left the ones in use, so the next fetch makes a new one).
  std::string why =
      std::string("the other server went away mid-copy (") + ucx->ucs_status_string(status) + ")";
  if (fetches_.PeerLost(ep, why) > 0) return Log(LogLevel::kWarn, "copy service: " + why);
  // A server that stopped after its copies, or one whose read waits here for its answer.
  Log(LogLevel::kInfo, std::string("copy service: a server this one exchanged copies with has "
                                   "gone (") +
                           ucx->ucs_status_string(status) + ")");
}

void UcxCopyService::RunAside(std::function<void()> job) {
  ++aside_;
  auto run = [this, job = std::move(job)] {
    job();
    --aside_;
  };
  try {
    std::thread(run).detach();
  } catch (const std::system_error&) {
    run();
  }
}

CopyService::Waiting UcxCopyService::TakeReads() {
  std::lock_guard<std::mutex> lock(reads_mutex_);
  Waiting out;
  out.reads.swap(reads_);
  std::swap(out.turned_away, turned_away_);
  return out;
}

void UcxCopyService::LogUnanswered(const Read& read) {
  ++unanswered_;
  auto now = std::chrono::steady_clock::now();
  if (now - unanswered_at_ < std::chrono::seconds(1)) return;
  unanswered_at_ = now;
  Log(LogLevel::kWarn, "copy service: a read from node '" + read.asker_node +
                           "' left unanswered: UCX gave its connection up when this server "
                           "tried to take it over (" +
                           std::to_string(unanswered_) + " read(s) so far)");
}

std::unique_ptr<SendState> UcxCopyService::Refusal(const Read& read, const Status& status) {
  auto state = std::make_unique<SendState>();
  DataHeader h{};
  std::memcpy(h.fetch, read.fetch.data(), kIdBytes);
  h.code =
      static_cast<int32_t>(status.code() == ErrorCode::kOk ? ErrorCode::kInternal : status.code());
  h.message_length = static_cast<uint32_t>(status.message().size());
  state->header.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  state->header += status.message();
  return state;
}

void UcxCopyService::Refuse(const Read& read, const Status& status) {
  auto posted = std::make_shared<PostedSend>(Refusal(read, status));
  ucp_ep_h ep = static_cast<ucp_ep_h>(read.reply_ep);
  // With a reply endpoint: the asker checks that the answer comes from the server it asked.
  Post([this, ep, posted] { Send(ep, kDataId, posted->Take(), UCP_AM_SEND_FLAG_REPLY); });
}

void UcxCopyService::SendPiece(const Read& read, uint64_t offset, const void* data, uint64_t length,
                               uint64_t total, Memory memory, std::function<void(Status)> sent) {
  auto state = std::make_unique<SendState>();
  DataHeader h{};
  std::memcpy(h.fetch, read.fetch.data(), kIdBytes);
  h.total = total;
  h.offset = offset;
  state->header.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  state->data = data;
  state->bytes = length;
  state->memory = memory;
  state->sent = std::move(sent);
  auto posted = std::make_shared<PostedSend>(std::move(state));
  ucp_ep_h ep = static_cast<ucp_ep_h>(read.reply_ep);
  uint32_t flags = UCP_AM_SEND_FLAG_REPLY | (read.rendezvous ? UCP_AM_SEND_FLAG_RNDV : 0);
  Post([this, ep, posted, flags] { Send(ep, kDataId, posted->Take(), flags); });
}

void UcxCopyService::SendAll(const Read& read, const void* data, uint64_t total, Memory memory,
                             std::function<void()> release) {
  // kSendWindow pieces in flight at most: a large tensor is not thousands of sends queued at
  // once, and a host piece's pages are mapped just ahead of its send.
  struct Left {
    std::mutex mutex;
    std::condition_variable cv;
    int in_flight = 0;
    uint64_t unsent;
    std::function<void()> release;  // once no piece is unsent
  };
  uint64_t pieces = CopyPieces(total, read.piece_bytes);
  auto left = std::make_shared<Left>();
  left->unsent = pieces;
  left->release = std::move(release);
  RunAside([this, read, data, total, memory, pieces, left] {
    for (uint64_t i = 0; i < pieces; ++i) {
      {
        std::unique_lock<std::mutex> lock(left->mutex);
        while (left->in_flight >= kSendWindow && !stopping_)
          left->cv.wait_for(lock, std::chrono::milliseconds(10));
        if (stopping_) return;  // what is not sent is not released: the server is going
        ++left->in_flight;
      }
      uint64_t offset = i * read.piece_bytes;
      uint64_t length = std::min(read.piece_bytes, total - offset);
      const char* at = static_cast<const char*>(data) + offset;
      // The tensor's own pages: mapped here rather than one fault at a time by UCX's send.
      if (memory == Memory::kHost) (void)PopulateHost(const_cast<char*>(at), length, false);
      SendPiece(read, offset, at, length, total, memory, [left](const Status&) {
        bool last = false;
        {
          std::lock_guard<std::mutex> lock(left->mutex);
          --left->in_flight;
          last = --left->unsent == 0;
        }
        left->cv.notify_one();
        if (last && left->release) left->release();
      });
    }
  });
}

Result<std::unique_ptr<CopyService::Fetching>> UcxCopyService::Begin(
    const std::string& address_hex, const std::string& name, int64_t ctime_ms,
    const CopyGrant& grant, const std::string& asker_node, Sink sink, uint64_t piece_bytes,
    int timeout_ms) {
  if (grant.id.size() != kIdBytes || grant.token.size() != kIdBytes) {
    return Status(ErrorCode::kInternal, "a copy's grant is not 2 x 16 bytes");
  }
  if (piece_bytes < kMinCopyPieceBytes || (sink.into == nullptr && sink.slots.empty())) {
    return Status(ErrorCode::kInternal, "a fetch's pieces are under 64 KiB, or it has no slots");
  }
  MCD_ASSIGN_OR_RETURN(std::shared_ptr<PendingFetch> fetch,
                       fetches_.Add(std::move(sink), piece_bytes, wake_));
  auto state = std::make_unique<SendState>();
  ReadHeader h{};
  std::memcpy(h.fetch, fetch->id.data(), kIdBytes);
  std::memcpy(h.grant, grant.id.data(), kIdBytes);
  std::memcpy(h.token, grant.token.data(), kIdBytes);
  h.ctime_ms = ctime_ms;
  h.name_length = static_cast<uint32_t>(name.size());
  h.node_length = static_cast<uint32_t>(asker_node.size());
  h.address_length = static_cast<uint32_t>(address_hex_.size());
  // Rendezvous where eager bytes cannot go: into GPU memory, or into slots that may all be busy.
  bool in_host_memory = fetch->sink.into != nullptr && fetch->sink.memory == Memory::kHost;
  h.flags = in_host_memory ? 0 : copy_wire::kReadRendezvous;
  h.piece_bytes = piece_bytes;
  state->header.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  state->header += name;
  state->header += asker_node;
  state->header += address_hex_;
  state->fetch = fetch;
  auto posted = std::make_shared<PostedSend>(std::move(state));
  Post([this, address_hex, posted, fetch] {
    {
      std::lock_guard<std::mutex> lock(fetch->mutex);
      if (fetch->done) return;  // stopped, or failed, before it was sent: `into` may be gone
    }
    auto ep = connections_.To(address_hex);
    if (!ep.ok()) return fetch->Complete(ep.status());
    fetches_.SentTo(fetch, ep.value());
    Send(ep.value(), kReadId, posted->Take(), UCP_AM_SEND_FLAG_REPLY);
  });
  return std::unique_ptr<Fetching>(
      std::make_unique<UcxFetching>(fetches_, fetch->id, fetch, timeout_ms));
}

}  // namespace

Result<std::unique_ptr<CopyService>> CopyService::Start(std::function<void()> wake) {
  MCD_RETURN_IF_ERROR(LoadUcx());
  auto service = std::make_unique<UcxCopyService>(std::move(wake));
  MCD_RETURN_IF_ERROR(service->Init());
  return std::unique_ptr<CopyService>(std::move(service));
}

}  // namespace mcd
