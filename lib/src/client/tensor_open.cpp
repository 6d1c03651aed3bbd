// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Opening a tensor in this process (client.h): Get (a reference, then the mapping), Open (the
// mapping alone, of a ready tensor of the node's live server), and Fill (the mapping of a tensor
// this client is creating, written and closed again); and what a failed open means. Mappings are
// process-wide (MappingRegistry). The client's thread.
#include <cstdlib>
#include <string_view>
#include <unordered_set>

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
  if (names.empty()) return Status(ErrorCode::kInvalidArgument, "no tensor named");
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

Result<std::vector<TensorView>> Client::GetMany(const std::vector<std::string>& names) {
  MCD_RETURN_IF_ERROR(CheckBatch(names));
  impl_->server().PrefetchImports();
  MCD_ASSIGN_OR_RETURN(std::vector<TensorRecord> records, impl_->DirectGetMany(names));
  return impl_->OpenReferenced(std::move(records));
}

Result<std::vector<TensorView>> Client::Impl::OpenReferenced(std::vector<TensorRecord> records,
                                                             std::vector<std::string> names) {
  if (names.empty()) {
    for (const TensorRecord& r : records) names.push_back(r.name);
  }
  std::vector<TensorView> views;
  views.reserve(records.size());
  for (TensorRecord& record : records) {
    auto ptr = MappingRegistry::Get().Open(record, server_->PoolSourceOf());
    if (!ptr.ok()) {
      // All or nothing: what was opened is closed, and every reference goes back.
      for (const TensorView& opened : views) (void)MappingRegistry::Get().Close(opened.record);
      (void)ReleaseMany(names);
      Status why = WhyNotOpened(ptr.status());
      return Status(why.code(), "tensor '" + record.name + "': " + why.message());
    }
    views.push_back(TensorView{std::move(record), ptr.value()});
  }
  return views;
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
