// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/node_copy.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "alloc/allocator.h"
#include "common/log.h"
#include "memcuda/heartbeat.h"
#include "protocol/text.h"

namespace mcd {

namespace {
// "1.22" of "1.22.0".
std::string MajorMinor(const std::string& version) {
  size_t first = version.find('.');
  if (first == std::string::npos) return version;
  return version.substr(0, version.find('.', first + 1));
}

}  // namespace

// The answer of a read of a GPU tensor where UCX cannot read GPU memory: each piece copied into
// a pinned slot on the device's worker, then sent from it, the next piece copied into a slot
// as soon as UCX is done with it, so that the device's copies overlap the transport. Alive
// while any of its jobs is; holds the tensor's memory (an rm meanwhile frees it after).
class StagedAnswer : public std::enable_shared_from_this<StagedAnswer> {
 public:
  StagedAnswer(CopyService& service, DeviceSet& devices, CopyService::Read read, int device,
               const void* from, uint64_t total, std::function<void()> hold)
      : service_(service),
        devices_(devices),
        read_(std::move(read)),
        device_(device),
        from_(static_cast<const char*>(from)),
        total_(total),
        pieces_(CopyPieces(total, read_.piece_bytes)),
        hold_(std::move(hold)) {}
  ~StagedAnswer() {
    if (hold_) hold_();
  }
  // Starts a piece in each slot (main thread).
  void Start(const std::vector<std::shared_ptr<char>>& slots) {
    for (const auto& slot : slots) Next(slot);
  }
  // Sends nothing more (main thread, before the copy service stops): true once no device copy
  // of its own is under way, after which it calls the service no more.
  bool Stop() {
    stopped_ = true;
    return device_jobs_ == 0;
  }

 private:
  // Copies the next piece into `slot` and sends it; the slot goes back to the pool once every
  // piece is sent.
  void Next(std::shared_ptr<char> slot) {
    uint64_t index = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failed_ || stopped_ || next_ == pieces_) return;
      index = next_++;
    }
    uint64_t offset = index * read_.piece_bytes;
    uint64_t length = std::min(read_.piece_bytes, total_ - offset);
    auto self = shared_from_this();
    ++device_jobs_;
    devices_.CopyOnWorker(device_, slot.get(), from_ + offset, length, cudaMemcpyDeviceToHost,
                          [self, slot, offset, length](Status copied) {
                            self->Copied(copied, slot, offset, length);
                            --self->device_jobs_;  // after its last call of the service
                          });
  }
  // A piece in `slot`, copied out of the GPU on the device's worker: sent, unless stopped.
  void Copied(const Status& copied, const std::shared_ptr<char>& slot, uint64_t offset,
              uint64_t length) {
    if (stopped_) return;
    if (!copied.ok()) return Failed(copied);
    auto self = shared_from_this();
    service_.SendPiece(read_, offset, slot.get(), length, total_, Memory::kHost,
                       [self, slot](Status sent) {
                         // A send that failed failed the asker's fetch too.
                         if (!sent.ok()) return self->Failed(sent);
                         self->Next(slot);
                       });
  }
  void Failed(const Status& why) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failed_ || stopped_) return;
      failed_ = true;
    }
    Log(LogLevel::kWarn, "a copy of '" + read_.name + "' for node '" +
                             Printable(read_.asker_node, 64) + "' stopped: " + why.ToString());
    service_.Refuse(read_, why);
  }

  CopyService& service_;
  DeviceSet& devices_;
  const CopyService::Read read_;
  const int device_;
  const char* const from_;
  const uint64_t total_;
  const uint64_t pieces_;
  std::function<void()> hold_;
  std::mutex mutex_;
  uint64_t next_ = 0;  // the next piece to copy
  bool failed_ = false;
  std::atomic<bool> stopped_{false};
  std::atomic<int> device_jobs_{0};
};

Result<uint64_t> CopyPieceFromEnvironment() {
  const char* text = std::getenv("MCD_COPY_PIECE");
  if (text == nullptr || *text == '\0') return kCopyPieceBytes;
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  // strtoull also takes leading blanks and a sign, which the value must not have either.
  bool whole = *end == '\0' && errno == 0 && text[0] >= '0' && text[0] <= '9';
  if (whole && value >= kMinCopyPieceBytes && value <= kMaxCopyPieceBytes) {
    return static_cast<uint64_t>(value);
  }
  return Status(ErrorCode::kInvalidArgument, "MCD_COPY_PIECE=" + Printable(text) +
                                                 " is not a whole number of bytes from " +
                                                 std::to_string(kMinCopyPieceBytes) + " to " +
                                                 std::to_string(kMaxCopyPieceBytes));
}

uint64_t CopyPieceBytes() {
  static const uint64_t piece = [] {
    auto asked = CopyPieceFromEnvironment();
    return asked.ok() ? asked.value() : kCopyPieceBytes;
  }();
  return piece;
}

Result<std::shared_ptr<char>> PinnedSlots::Take(int device, uint64_t bytes) {
  std::shared_ptr<char> slot;
  {
    std::lock_guard<std::mutex> lock(free_->mutex);
    auto& kept = free_->slots[device];
    auto found =
        std::find_if(kept.begin(), kept.end(), [&](const auto& k) { return k.first == bytes; });
    if (found != kept.end()) {
      slot = std::move(found->second);
      kept.erase(found);
    }
  }
  if (!slot) {
    MCD_ASSIGN_OR_RETURN(slot, devices_.PinnedBuffer(device, bytes));
  }
  // The pool's own reference goes back to it when the caller's last copy goes, unless the pool
  // is gone or holds enough already.
  std::weak_ptr<Free> pool = free_;
  char* raw = slot.get();
  return std::shared_ptr<char>(raw, [pool, slot, device, bytes](char*) mutable {
    if (auto free = pool.lock()) {
      std::lock_guard<std::mutex> lock(free->mutex);
      auto& kept = free->slots[device];
      if (kept.size() < kKeptSlots) kept.emplace_back(bytes, std::move(slot));
    }
    slot.reset();
  });
}

Result<NodeCopier::Source> NodeCopier::Locate(const Command& cmd) {
  const std::string& name = cmd.copy_of;
  MCD_ASSIGN_OR_RETURN(RedisValue f, serving_.Command({"HMGET", keys_.Tensor(name), "node", "bytes",
                                                       "ctime", "state"}));
  if (f.elements.size() != 4 || f.elements[0].is_nil()) {
    return Status(ErrorCode::kNotFound, "no tensor named '" + name + "' to copy");
  }
  Source source;
  source.node = f.elements[0].str;
  if (source.node == node_) {
    return Status(ErrorCode::kInvalidArgument,
                  "tensor '" + name +
                      "' is on this node already: open it here (mcd-get), or copy "
                      "it with mcd-get -o FILE.npy and mcd-create --from FILE.npy");
  }
  if (f.elements[3].str != "ready") {
    return Status(ErrorCode::kNotReady, "tensor '" + name + "' is " + f.elements[3].str);
  }
  if (std::strtoull(f.elements[1].str.c_str(), nullptr, 10) != cmd.bytes) {
    return Status(ErrorCode::kInvalidArgument, "tensor '" + name + "' holds " + f.elements[1].str +
                                                   " bytes, not " + std::to_string(cmd.bytes) +
                                                   ": a copy has its dtype and shape");
  }
  source.ctime_ms = std::strtoll(f.elements[2].str.c_str(), nullptr, 10);
  static const std::vector<const char*> kFields = {
      heartbeat_field::kInstance, heartbeat_field::kUcxAddress, heartbeat_field::kUcxVersion};
  std::string heartbeat = keys_.Server(source.node);
  std::vector<std::string_view> hmget = {"HMGET", heartbeat};
  hmget.insert(hmget.end(), kFields.begin(), kFields.end());
  MCD_ASSIGN_OR_RETURN(RedisValue reply, serving_.Command(hmget));
  MCD_ASSIGN_OR_RETURN(HeartbeatRecord server, HeartbeatFromHmget(kFields, reply));
  if (server.instance.empty()) {
    return Status(ErrorCode::kUnavailable, "tensor '" + name + "' lives on node '" + source.node +
                                               "', which has no live server");
  }
  source.ucx_address = std::move(server.ucx_address);
  if (service_ == nullptr) return Status(ErrorCode::kUnsupported, off_);  // this server's first
  if (source.ucx_address.empty()) {
    return Status(ErrorCode::kUnsupported, "the server of node '" + source.node +
                                               "' does not copy between nodes (its log says "
                                               "why: no UCX there, --no-node-copies, or a UCX_TLS "
                                               "without failure reporting)");
  }
  // UCX's wire protocol changes between minor versions, and an older UCX aborts its process when
  // a newer one connects: never connect across versions (nothing to check against a server too
  // old to say its version).
  const std::string& theirs = server.ucx_version;
  std::string ours = service_->version();
  if (!theirs.empty() && MajorMinor(theirs) != MajorMinor(ours)) {
    return Status(ErrorCode::kUnsupported, "the server of node '" + source.node + "' runs UCX " +
                                               theirs + " and this one UCX " + ours +
                                               ", which cannot talk to each other: run one UCX "
                                               "version (major.minor) on every node");
  }
  return source;
}

void NodeCopier::StartFill(const Command& cmd, const Source& source, const Allocation& allocation,
                           std::function<void(Status)> done) {
  // Past it with no byte come, the create fails and frees what it allocated.
  int timeout_ms = CopyFetchLimitMs(cmd.bytes);
  Copy copy;
  copy.name = cmd.name;
  copy.req = cmd.req;
  copy.what = "copying '" + cmd.copy_of + "' from node '" + source.node + "'";
  copy.device = cmd.device;
  copy.allocation = allocation;
  copy.bytes = cmd.bytes;
  copy.done = std::move(done);
  auto failed = [&](const Status& why) { copy.done(Ended(copy, why)); };
  uint64_t piece = CopyPieceBytes();
  CopyService::Sink sink;
  sink.bytes = cmd.bytes;
  sink.into = allocation.ptr;
  sink.memory = Memory::kGpu;
  if (cmd.device == kHostDevice) {
    // Straight into the new object's pages, which the copy service's thread maps before the
    // read goes.
    auto mapped = OpenHostShm(allocation.ipc_handle, cmd.bytes, allocation.offset);
    if (!mapped.ok()) return failed(mapped.status());
    sink.into = copy.mapped = mapped.value();
    sink.memory = Memory::kHost;
  } else if (!gpu_direct()) {
    // Nobody else knows of the new memory before the commit, so UCX may write into it as it goes
    // where it writes GPU memory; elsewhere each piece lands in a pinned slot and is copied to
    // its place on the device's worker while the next one comes.
    auto slots = StagingSlots(cmd.device, piece);
    if (!slots.ok()) return failed(slots.status());
    for (const auto& slot : *slots) sink.slots.push_back(slot.get());
    sink.keep = std::make_shared<std::vector<std::shared_ptr<char>>>(std::move(slots).value());
    sink.into = nullptr;
    DeviceSet* devices = &devices_;
    int device = cmd.device;
    char* base = static_cast<char*>(allocation.ptr);
    sink.place = [devices, device, base](uint64_t offset, uint64_t length, const void* slot,
                                         std::function<void(Status)> placed) {
      devices->CopyOnWorker(device, base + offset, slot, length, cudaMemcpyHostToDevice,
                            std::move(placed));
    };
  }
  auto grant = grants_.Issue(source.node, cmd.copy_of, source.ctime_ms, timeout_ms);
  if (!grant.ok()) return failed(grant.status());
  copy.grant = grant.value();
  auto fetching = service_->Begin(source.ucx_address, cmd.copy_of, source.ctime_ms, copy.grant,
                                  node_, std::move(sink), piece, timeout_ms);
  if (!fetching.ok()) return failed(fetching.status());
  copy.fetching = std::move(fetching).value();
  copies_.push_back(std::move(copy));
}

Status NodeCopier::Ended(Copy& copy, Status fetched) {
  copy.fetching.reset();  // nothing writes into the memory any more
  if (copy.mapped != nullptr) {
    Status closed = CloseHostShm(copy.mapped, copy.bytes, copy.allocation.offset);
    copy.mapped = nullptr;
    if (fetched.ok()) fetched = closed;
  }
  if (fetched.ok()) return fetched;
  if (!copy.grant.id.empty()) grants_.Withdraw(copy.grant);
  return Status(fetched.code(), copy.what + ": " + fetched.message());
}

size_t NodeCopier::FinishCopies() {
  std::vector<std::pair<Copy, Status>> ended;
  for (auto it = copies_.begin(); it != copies_.end();) {
    std::optional<Status> outcome = it->fetching->Poll();
    if (!outcome) {
      ++it;
      continue;
    }
    ended.emplace_back(std::move(*it), std::move(*outcome));
    it = copies_.erase(it);
  }
  // Out of the list first: what `done` does may start another copy.
  for (auto& [copy, outcome] : ended) {
    Status status = Ended(copy, std::move(outcome));
    copy.done(std::move(status));
  }
  return ended.size();
}

void NodeCopier::StopCopies() {
  std::vector<Copy> copies = std::move(copies_);
  copies_.clear();
  for (Copy& copy : copies) {
    // Called off before their first byte; those whose bytes are arriving end first, and count.
    Status status = copy.fetching->Stop();
    if (status.code() == ErrorCode::kStopped) {
      status = Status(ErrorCode::kStopped, "the server of node '" + node_ +
                                               "' is stopping, and no byte had come; nothing was "
                                               "made: run it again once a server serves the node");
    }
    status = Ended(copy, std::move(status));
    copy.done(std::move(status));
  }
}

void NodeCopier::StopServing() {
  // Each device copy of theirs ends within milliseconds; the workers run until after this.
  for (;;) {
    bool idle = true;
    for (const auto& weak : staged_) {
      if (auto answer = weak.lock()) idle = answer->Stop() && idle;
    }
    if (idle) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  staged_.clear();
}

std::optional<std::string> NodeCopier::Copying(const std::string& name) const {
  for (const Copy& copy : copies_) {
    if (copy.name == name) return copy.req;
  }
  return std::nullopt;
}

void NodeCopier::ServeReads() {
  if (service_ == nullptr) return;
  CopyService::Waiting waiting = service_->TakeReads();
  if (waiting.turned_away > 0) {
    LogRefusals(waiting.turned_away, [&] {
      return "turned away " + std::to_string(waiting.turned_away) +
             " reads from UCX peers at once (unavailable): too many waited already, as when a "
             "peer floods the copy service";
    });
  }
  const std::vector<CopyService::Read>& reads = waiting.reads;
  if (reads.empty()) return;
  std::vector<Status> granted = grants_.Redeem(reads);
  for (size_t i = 0; i < reads.size(); ++i) {
    const CopyService::Read& read = reads[i];
    if (!granted[i].ok()) {
      // The name and node are the peer's word, whatever bytes it sent: shown printable.
      LogRefusals(1, [&] {
        return "refused a read of '" + Printable(read.name, 80) +
               "' from a UCX peer that says it is node '" + Printable(read.asker_node, 64) +
               "': " + granted[i].ToString();
      });
      service_->Refuse(read, granted[i]);
      continue;
    }
    auto found = table_.find(read.name);
    if (found == table_.end() || found->second.record.ctime_ms != read.ctime_ms) {
      service_->Refuse(read,
                       Status(ErrorCode::kNotFound,
                              "tensor '" + read.name + "' is gone from node '" + node_ + "'"));
      continue;
    }
    const Entry& entry = found->second;
    uint64_t bytes = entry.record.bytes;
    Status served = Serve(read, entry);
    if (!served.ok()) {
      Log(LogLevel::kWarn, "a copy of '" + read.name + "' for node '" +
                               Printable(read.asker_node, 64) + "': " + served.ToString());
      service_->Refuse(read, served);
      continue;
    }
    // The asker proved it holds this Redis's credentials: the node it named is the one its grant
    // names.
    Log(LogLevel::kInfo, "read name=" + read.name + " bytes=" + std::to_string(bytes) +
                             " for node '" + Printable(read.asker_node, 64) +
                             "' (a copy between nodes, granted in Redis)");
  }
}

void NodeCopier::LogRefusals(uint64_t count, const std::function<std::string()>& line) {
  auto now = std::chrono::steady_clock::now();
  if (now - refusals_since_ >= std::chrono::seconds(1)) {
    if (unlogged_refusals_ > 0) {
      Log(LogLevel::kWarn,
          std::to_string(unlogged_refusals_) + " more reads refused in that second");
    }
    refusals_since_ = now;
    refusal_lines_ = 0;
    unlogged_refusals_ = 0;
  }
  if (refusal_lines_ >= 10) {
    unlogged_refusals_ += count;
    return;
  }
  ++refusal_lines_;
  Log(LogLevel::kWarn, line());
}

Status NodeCopier::Serve(const CopyService::Read& read, const Entry& entry) {
  uint64_t bytes = entry.record.bytes;
  const Allocation& a = entry.allocation;
  if (entry.record.device == kHostDevice) {
    // Sent from a mapping of its own, which stays valid while UCX reads it even if the tensor is
    // freed meanwhile (the pages go when the last mapping does). Its pages are mapped on the
    // copy service's thread, ahead of the sends, not here on the serving loop's.
    MCD_ASSIGN_OR_RETURN(void* mapped, OpenHostShm(a.ipc_handle, bytes, a.offset));
    uint64_t offset = a.offset;
    service_->SendAll(read, mapped, bytes, Memory::kHost,
                      [mapped, bytes, offset] { (void)CloseHostShm(mapped, bytes, offset); });
    return Status::Ok();
  }
  if (gpu_direct()) {
    // In place: the memory is held (an rm meanwhile frees it once UCX is done), not copied.
    service_->SendAll(read, a.ptr, bytes, Memory::kGpu, devices_.Hold(entry.record.device, a));
    return Status::Ok();
  }
  MCD_ASSIGN_OR_RETURN(auto slots, StagingSlots(entry.record.device, read.piece_bytes));
  auto answer = std::make_shared<StagedAnswer>(*service_, devices_, read, entry.record.device,
                                               a.ptr, bytes, devices_.Hold(entry.record.device, a));
  staged_.erase(std::remove_if(staged_.begin(), staged_.end(),
                               [](const std::weak_ptr<StagedAnswer>& s) { return s.expired(); }),
                staged_.end());
  staged_.push_back(answer);
  answer->Start(slots);
  return Status::Ok();
}

Result<std::vector<std::shared_ptr<char>>> NodeCopier::StagingSlots(int device, uint64_t piece) {
  std::vector<std::shared_ptr<char>> slots;
  for (size_t i = 0; i < kStagingSlots; ++i) {
    MCD_ASSIGN_OR_RETURN(std::shared_ptr<char> slot, slots_.Take(device, piece));
    slots.push_back(std::move(slot));
  }
  return slots;
}

}  // namespace mcd
