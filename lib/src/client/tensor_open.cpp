// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Opening a tensor in this process (client.h): Get (a reference, then the mapping), Open (the
// mapping alone, of a ready tensor of the node's live server), and Fill (the mapping of a tensor
// this client is creating, written and closed again); and what a failed open means. Mappings are
// process-wide (MappingRegistry). The client's thread, but for GetManyOverlapped's opening threads,
// which touch the MappingRegistry alone.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "client/client_impl.h"
#include "client/mapping_registry.h"
#include "common/process.h"

namespace mcd {

// The names of one batched call: some, not too many, each valid, none twice.
Status CheckBatch(const std::vector<std::string>& names);

Status Client::Impl::WhyNotOpened(const Status& failed) const {
  if (failed.code() != ErrorCode::kCudaError) return failed;
  // The server's heartbeat outlives it by up to its TTL, and the driver then calls the handle
  // invalid.
  int64_t pid = server_->heartbeat().pid;
  // A second is far more than a context's teardown takes once the kernel marks the server
  // exiting (ServerView::DiedWithin), and only a failed open waits it.
  if (pid <= 0 || (!server_->DiedWithin(1000) && ProcessAlive(pid, 0))) return failed;
  return Status(ErrorCode::kUnavailable,
                "the mcd-serve that owns the tensor (pid " + std::to_string(pid) +
                    ") has died; its tensors are gone (" + failed.message() + ")");
}

// A read without a reference races the tensor's removal, after which its memory is given to
// other tensors (zeroed and handed out again, on a GPU). The hash goes before the memory, so the
// same hash still there once the copy is done means the copy read the tensor's own bytes.
Status Client::Impl::StillThere(const TensorRecord& read) {
  auto now = Stat(read.name);
  if (!now.ok() && now.status().code() != ErrorCode::kNotFound) return now.status();
  if (now.ok() && now->ctime_ms == read.ctime_ms && now->owner == read.owner &&
      now->ipc_handle == read.ipc_handle && now->offset == read.offset) {
    return Status::Ok();
  }
  return Status(ErrorCode::kNotFound,
                "tensor '" + read.name +
                    "' was removed while it was read without a reference, so what was read "
                    "may be another tensor's bytes (take a reference to keep it alive "
                    "meanwhile)");
}

Status Client::Fill(const TensorRecord& creating, const void* contents) {
  // Mapped from the create's own record: the hash says "creating", which Open refuses.
  auto ptr = MappingRegistry::Get().Open(creating, impl_->server().PoolSourceOf());
  if (!ptr.ok()) return impl_->WhyNotOpened(ptr.status());
  Status copied = CopyFromHost(TensorView{creating, ptr.value()}, contents, creating.bytes);
  Status closed = MappingRegistry::Get().Close(creating);
  return copied.ok() ? closed : copied;
}

Result<TensorView> Client::Get(const std::string& name) {
  MCD_RETURN_IF_ERROR(ValidateName(name));
  // The same effect as the queue's get command (refcount+1 on a ready tensor of a live server),
  // in one Redis round trip, during which the driver's once-per-process costs are being paid.
  impl_->server().PrefetchImports();
  MCD_ASSIGN_OR_RETURN(TensorRecord record, impl_->DirectGet(name));
  auto ptr = MappingRegistry::Get().Open(record, impl_->server().PoolSourceOf());
  if (!ptr.ok()) {
    (void)ReleaseReference(name);  // nobody in this process holds it: give it back
    return impl_->WhyNotOpened(ptr.status());
  }
  return TensorView{record, ptr.value()};
}

Status CheckBatch(const std::vector<std::string>& names) {
  if (names.empty())
    return Status(ErrorCode::kInvalidArgument, "no tensor named: the list of names is empty");
  if (names.size() > kMaxBatch) {
    return Status(ErrorCode::kInvalidArgument, std::to_string(names.size()) +
                                                   " tensors in one call, over the limit of " +
                                                   std::to_string(kMaxBatch));
  }
  std::unordered_set<std::string_view> seen;
  for (const std::string& name : names) {
    MCD_RETURN_IF_ERROR(ValidateName(name));
    if (!seen.insert(name).second) {
      return Status(ErrorCode::kInvalidArgument, "tensor '" + name + "' is named twice");
    }
  }
  return Status::Ok();
}

// A batch's tensors referenced per script call when a batch larger than this is opened while its
// references are taken (GetManyOverlapped). 64: see docs/design.md, "Fast paths and knobs".
constexpr size_t kGetManyChunk = 64;

// How many tensors a batched get references per script call when it opens them meanwhile
// (GetManyOverlapped); 0: the whole batch in one call. MCD_GET_MANY_CHUNK sets it.
size_t GetManyChunk() {
  static const size_t chunk = [] {
    const char* env = std::getenv("MCD_GET_MANY_CHUNK");
    if (env == nullptr || *env == '\0') return kGetManyChunk;
    // A whole number (one above kMaxBatch, or too large to read, chunks no batch, as 0), nothing
    // else: anything other leaves the default.
    char* end = nullptr;
    errno = 0;
    unsigned long long value = std::strtoull(env, &end, 10);
    if (*end != '\0' || !std::isdigit(static_cast<unsigned char>(*env))) return kGetManyChunk;
    if (errno == ERANGE || value > kMaxBatch) return size_t{0};
    return static_cast<size_t>(value);
  }();
  return chunk;
}

Result<std::vector<TensorView>> Client::GetMany(const std::vector<std::string>& names) {
  MCD_RETURN_IF_ERROR(CheckBatch(names));
  impl_->server().PrefetchImports();
  // In chunks only where the references are this process's own: one killed between two calls
  // leaves the ones it took to its server's reaper. References bound to another process (mcd-get
  // binds them to its caller) or to nobody would outlive a kill there, some taken and some not.
  const std::optional<Holder>& holder = impl_->holder();
  bool own = holder && holder->pid == static_cast<int64_t>(getpid());
  size_t chunk = GetManyChunk();
  if (own && chunk > 0 && names.size() > chunk) return impl_->GetManyOverlapped(names, chunk);
  MCD_ASSIGN_OR_RETURN(std::vector<TensorRecord> records, impl_->DirectGetMany(names));
  return impl_->OpenReferenced(std::move(records));
}

namespace {

// What a thread opening one chunk of a batched get hands back.
struct OpenedChunk {
  std::vector<TensorView> views;
  Status status;          // the first open that failed; the chunk's other opens are closed then
  std::string failed_at;  // its tensor
};

// Maps `records` in this thread (each open runs on its device's worker), all or none.
OpenedChunk OpenChunk(std::vector<TensorRecord> records,
                      const MappingRegistry::SourceOf& source_of) {
  OpenedChunk out;
  out.views.reserve(records.size());
  for (TensorRecord& record : records) {
    auto ptr = MappingRegistry::Get().Open(record, source_of);
    if (!ptr.ok()) {
      for (const TensorView& opened : out.views) (void)MappingRegistry::Get().Close(opened.record);
      out.views.clear();
      out.status = ptr.status();
      out.failed_at = record.name;
      return out;
    }
    out.views.push_back(TensorView{std::move(record), ptr.value()});
  }
  return out;
}

// A chunk's failed open as the caller's error: its tensor named, and a mapping that failed because
// the server died said so.
Status NotOpened(const Client::Impl& impl, const OpenedChunk& chunk) {
  Status why = impl.WhyNotOpened(chunk.status);
  return Status(why.code(), "tensor '" + chunk.failed_at + "': " + why.message());
}

}  // namespace

// A batched get of many GPU tensors waits for two things in turn: its script call, which Redis
// runs for every tensor (and, when several processes ask at once, for each of theirs before it
// answers any), and the driver's opens. Four processes getting a model's 291 tensors at once on
// an H200 spent 41 ms in the script call and 45-48 ms in the opens after it
// (docs/performance.md, "A model's weights to every worker"). Here the references are taken
// `chunk` tensors per script call, and each chunk is opened on a thread of its own while the next
// chunk's call is under way: one chunk opening at a time (the driver calls run one after another
// on the device's worker anyway), so one thread more at most. All or nothing still: when a
// chunk's call or any open fails, no further chunk is asked for, every mapping is closed and
// every reference taken is given back.
Result<std::vector<TensorView>> Client::Impl::GetManyOverlapped(
    const std::vector<std::string>& names, size_t chunk) {
  std::vector<OpenedChunk> opened;
  std::future<OpenedChunk> opening;  // the chunk being opened, when there is one
  std::vector<std::string> taken;
  Status failed = Status::Ok();
  auto collect = [&] {  // the chunk being opened, done; false when it failed
    if (!opening.valid()) return true;
    opened.push_back(opening.get());
    if (opened.back().status.ok()) return true;
    failed = NotOpened(*this, opened.back());
    return false;
  };
  for (size_t at = 0; at < names.size();) {
    size_t n = std::min(chunk, names.size() - at);
    auto first = names.begin() + static_cast<std::ptrdiff_t>(at);
    std::vector<std::string> part(first, first + static_cast<std::ptrdiff_t>(n));
    auto records = DirectGetMany(part);
    if (records.ok()) {
      taken.insert(taken.end(), part.begin(), part.end());
    } else {
      failed = records.status();
    }
    if (!collect() || !failed.ok()) break;
    at += n;
    // The pool sources resolved here, on the client's thread: resolving one may read Redis,
    // which the next chunk's call is using meanwhile. The records in a shared hold: still here
    // to open on this thread if no thread starts.
    MappingRegistry::SourceOf source_of = ResolvedPoolSources(records.value());
    auto chunk_records = std::make_shared<std::vector<TensorRecord>>(std::move(records).value());
    auto open = [chunk_records, source_of] {
      return OpenChunk(std::move(*chunk_records), source_of);
    };
    try {
      opening = std::async(std::launch::async, open);
    } catch (const std::system_error&) {  // no thread to be had: opened here, without overlap
      std::promise<OpenedChunk> here;
      here.set_value(open());
      opening = here.get_future();
    }
  }
  if (failed.ok()) collect();
  if (!failed.ok()) {
    for (const OpenedChunk& c : opened) {
      for (const TensorView& view : c.views) (void)MappingRegistry::Get().Close(view.record);
    }
    if (!taken.empty()) (void)ReleaseMany(taken);
    return failed;
  }
  std::vector<TensorView> views;
  views.reserve(names.size());
  for (OpenedChunk& c : opened) {
    for (TensorView& view : c.views) views.push_back(std::move(view));
  }
  return views;
}

MappingRegistry::SourceOf Client::Impl::ResolvedPoolSources(
    const std::vector<TensorRecord>& records) {
  std::map<std::pair<std::string, int>, Result<PoolSource>> sources;
  MappingRegistry::SourceOf resolve = server_->PoolSourceOf();
  for (const TensorRecord& r : records) {
    if (r.ipc_kind != IpcKind::kCudaMempool) continue;
    auto key = std::make_pair(r.owner, r.device);
    if (sources.count(key) == 0) sources.emplace(key, resolve(r.owner, r.device));
  }
  return
      [sources = std::move(sources)](const std::string& owner, int device) -> Result<PoolSource> {
        auto it = sources.find(std::make_pair(owner, device));
        if (it == sources.end()) return Status(ErrorCode::kInternal, "no pool source resolved");
        return it->second;
      };
}

Result<std::vector<TensorView>> Client::Impl::OpenReferenced(std::vector<TensorRecord> records,
                                                             std::vector<std::string> names) {
  if (names.empty()) {
    for (const TensorRecord& r : records) names.push_back(r.name);
  }
  OpenedChunk opened = OpenChunk(std::move(records), server_->PoolSourceOf());
  if (!opened.status.ok()) {
    (void)ReleaseMany(names);  // all or nothing: OpenChunk closed what it opened
    return NotOpened(*this, opened);
  }
  return std::move(opened.views);
}

Result<TensorView> Client::Open(const std::string& name) {
  ServerView& server = impl_->server();
  server.PrefetchImports();
  MCD_ASSIGN_OR_RETURN(TensorRecord record, impl_->Stat(name));
  if (record.state != "ready") {
    return Status(ErrorCode::kNotReady, "tensor '" + name + "' is " + record.state);
  }
  const std::string& node = impl_->options().node;
  if (record.node != node) {  // as the reference script answers a get
    return Status(ErrorCode::kWrongNode,
                  "tensor '" + name + "' lives on node '" + record.node + "', not '" + node + "'");
  }
  // A hash whose server instance is gone lingers until the node's next server removes it.
  if (record.owner != server.heartbeat().instance) {
    MCD_RETURN_IF_ERROR(impl_->Retrying("read", true, [&] { return server.Refresh(); }).status());
  }
  if (record.owner != server.heartbeat().instance) {
    return Status(ErrorCode::kUnavailable,
                  "the mcd-serve instance that owns tensor '" + name + "' is not running");
  }
  MCD_RETURN_IF_ERROR(server.Alive());  // its memory died with it
  auto ptr = MappingRegistry::Get().Open(record, server.PoolSourceOf());
  if (!ptr.ok()) {
    Status why = impl_->WhyNotOpened(ptr.status());
    // Without a reference, the tensor may have been removed since its hash was read.
    if (why.code() == ErrorCode::kCudaError &&
        impl_->StillThere(record).code() == ErrorCode::kNotFound) {
      return Status(ErrorCode::kNotFound,
                    "tensor '" + name + "' was removed while it was being opened");
    }
    return why;
  }
  return TensorView{record, ptr.value(), /*referenced=*/false};
}

Status Client::Close(const std::string& name) {
  auto record = MappingRegistry::Get().FindByName(name);
  if (!record) return Status::Ok();
  return MappingRegistry::Get().Close(*record);
}

Status Client::Close(const TensorView& view) { return MappingRegistry::Get().Close(view.record); }

Result<TensorView> Client::Opened(const std::string& name, void* data) {
  if (data == nullptr) {
    return Status(ErrorCode::kInvalidArgument, "tensor '" + name + "' has no address (data NULL)");
  }
  auto record = MappingRegistry::Get().FindByName(name, data);
  if (!record) {
    return Status(ErrorCode::kNotFound,
                  "tensor '" + name + "' is not open here at that address (released?)");
  }
  return TensorView{std::move(record).value(), data};
}

}  // namespace mcd
