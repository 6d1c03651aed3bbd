// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The client facade: Client's methods over Client::Impl (client_impl.h, which lists the parts).
// Here: connecting, creating (and filling) a tensor, releasing, and the reads that change
// nothing. Elsewhere by job: tensor_open.cpp (Get, Open, Fill, Close), tensor_bytes.cpp (copies
// of bytes), waits.cpp (waits on the event stream), c_api.cpp (the C ABI, memcuda.h). Used by
// one thread at a time (client.h).
#include "memcuda/client.h"

#include <unistd.h>

#include <algorithm>
#include <optional>

#include "client/client_impl.h"
#include "common/process.h"

namespace mcd {

Status CheckBatch(const std::vector<std::string>& names);  // tensor_open.cpp

namespace {

Status ValidateGlob(const std::string& glob) {
  if (glob.size() > 2 * kMaxNameLength) return Status(ErrorCode::kInvalidArgument, "glob too long");
  for (char c : glob) {
    if (c == '{' || c == '}' || static_cast<unsigned char>(c) < 0x20) {
      return Status(ErrorCode::kInvalidArgument, "glob holds a brace or control character");
    }
  }
  return Status::Ok();
}

// The create command of `spec`, checked; without the fill (Client::Create adds it).
Result<Command> CreateCommand(const CreateSpec& spec) {
  MCD_RETURN_IF_ERROR(ValidateNewName(spec.name));
  Command cmd;
  cmd.op = Op::kCreate;
  cmd.name = spec.name;
  cmd.dtype = spec.dtype;
  cmd.shape = spec.shape;
  MCD_ASSIGN_OR_RETURN(cmd.bytes, ShapeBytes(spec.shape, spec.dtype));
  cmd.device = spec.device;
  cmd.lifetime = spec.lifetime;
  cmd.zero_init = spec.zero_init;
  cmd.copy_of = spec.copy_of;
  cmd.owner_pid = spec.owner_pid;
  if (spec.lifetime == Lifetime::kStack &&
      (spec.owner_pid != 0 ? spec.owner_pid : static_cast<int64_t>(getpid())) == kInitPid) {
    return Status(ErrorCode::kInvalidArgument,
                  "a stack tensor bound to pid 1 (init), which never exits while the server "
                  "runs, would never be reclaimed: name another owner process, or make a heap "
                  "tensor");
  }
  if (spec.lifetime == Lifetime::kStack && spec.owner_pid != 0) {
    cmd.owner_start = ProcessStartTime(spec.owner_pid);
    if (cmd.owner_start == 0) {
      return Status(ErrorCode::kInvalidArgument,
                    "owner process " + std::to_string(spec.owner_pid) + " is not running");
    }
  }
  if (spec.contents == nullptr) return cmd;
  if (!spec.copy_of.empty()) {
    return Status(ErrorCode::kInvalidArgument, "a copy of another node's tensor takes no contents");
  }
  if (spec.contents_bytes != cmd.bytes) {
    return Status(ErrorCode::kInvalidArgument,
                  "contents of " + std::to_string(spec.contents_bytes) + " bytes for tensor '" +
                      spec.name + "' of " + std::to_string(cmd.bytes));
  }
  return cmd;
}

}  // namespace

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  MCD_RETURN_IF_ERROR(impl->Connect());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const ClientOptions& Client::options() const noexcept { return impl_->options(); }

Result<HeartbeatRecord> Client::ServerRecord() { return impl_->server().Read(); }

Result<std::vector<HeartbeatRecord>> Client::LiveServerRecords(
    std::vector<HeartbeatRecord>* dead, std::vector<std::string>* unreadable) {
  return impl_->Retrying("listing servers", true, [&] {
    if (dead != nullptr) dead->clear();
    if (unreadable != nullptr) unreadable->clear();
    return ServerView::Live(impl_->redis(), impl_->options().keys, dead, unreadable);
  });
}

Result<std::map<std::string, std::string>> Client::ServerInfo() {
  MCD_ASSIGN_OR_RETURN(HeartbeatRecord heartbeat, ServerRecord());
  return HeartbeatMap(heartbeat);
}

Result<std::vector<std::map<std::string, std::string>>> Client::LiveServers(
    std::vector<std::map<std::string, std::string>>* dead) {
  std::vector<HeartbeatRecord> dead_ones;
  MCD_ASSIGN_OR_RETURN(auto live, LiveServerRecords(dead != nullptr ? &dead_ones : nullptr));
  std::vector<std::map<std::string, std::string>> out;
  for (const HeartbeatRecord& server : live) out.push_back(HeartbeatMap(server));
  if (dead != nullptr) {
    dead->clear();
    for (const HeartbeatRecord& server : dead_ones) dead->push_back(HeartbeatMap(server));
  }
  return out;
}

bool Client::node_discovered() const noexcept { return impl_->node_discovered(); }

bool Client::BindsToInit() const { return impl_->holder() && impl_->holder()->pid == kInitPid; }

// With contents: created "creating", filled here, then published; a create that fails on the
// way leaves nothing behind.
Result<TensorRecord> Client::Create(const CreateSpec& spec) {
  MCD_ASSIGN_OR_RETURN(Command cmd, CreateCommand(spec));
  if (spec.contents == nullptr) return impl_->Create(std::move(cmd));
  cmd.fill = true;
  cmd.pid_space = PidSpace();
  cmd.zero_init = false;  // every byte is about to be written
  auto creating = impl_->Create(std::move(cmd));
  if (!creating.ok()) {
    // A create that timed out, or whose answer was lost, may still be applied: then it would
    // stay "creating" for as long as this process lives.
    ErrorCode code = creating.status().code();
    if (code == ErrorCode::kTimeout || code == ErrorCode::kTryAgain ||
        code == ErrorCode::kUnavailable || code == ErrorCode::kInternal) {
      impl_->Abandon(spec.name);
    }
    return creating.status();
  }
  Status filled = Fill(creating.value(), spec.contents);
  if (filled.ok()) {
    auto published = impl_->Publish(spec.name);
    if (published.ok()) return published;
    filled = published.status();
    if (filled.code() == ErrorCode::kNotFound) {
      // Only its server removes a tensor being filled: one that is gone went with that server.
      filled = Status(ErrorCode::kUnavailable,
                      "tensor '" + spec.name +
                          "' went with its server before it was published (the server was "
                          "killed or restarted): nothing was created");
    }
  }
  impl_->Abandon(spec.name);
  return filled;
}

Result<TensorRecord> Client::Release(const std::string& name) {
  MCD_RETURN_IF_ERROR(ValidateName(name));
  // Unmap before the count drops: at zero the server frees the memory.
  MCD_RETURN_IF_ERROR(Close(name));
  return ReleaseReference(name);
}

Result<std::vector<TensorRecord>> Client::ReleaseMany(const std::vector<std::string>& names) {
  MCD_RETURN_IF_ERROR(CheckBatch(names));
  for (const std::string& name : names) MCD_RETURN_IF_ERROR(Close(name));
  return impl_->ReleaseMany(names);
}

Result<TensorRecord> Client::ReleaseReference(const std::string& name) {
  return impl_->Release(name);
}

Result<std::vector<TensorRecord>> Client::ReleaseReferences(const std::vector<std::string>& names) {
  MCD_RETURN_IF_ERROR(CheckBatch(names));
  return impl_->ReleaseMany(names);
}

Result<TensorRecord> Client::Stat(const std::string& name) { return impl_->Stat(name); }

namespace {

// The set a glob "SET/" names: its members, as every tool reads it (no tensor's name ends in
// '/'). The glob SET/* matches them, and also what is named under them without being a member
// (the members of a set named SET/x, a plain tensor SET/x/y), which only their records tell apart.
std::optional<std::string> SetOfGlob(const std::string& glob) {
  if (glob.size() < 2 || glob.back() != '/') return std::nullopt;
  std::string set = glob.substr(0, glob.size() - 1);
  if (!ValidateName(set).ok()) return std::nullopt;  // names hold no glob characters
  return set;
}

}  // namespace

Result<std::vector<TensorRecord>> Client::List(const std::string& glob,
                                               std::vector<std::string>* unreadable, bool holders) {
  MCD_RETURN_IF_ERROR(ValidateGlob(glob));
  std::optional<std::string> set = SetOfGlob(glob);
  if (!set) return impl_->List(glob, unreadable, holders);
  MCD_ASSIGN_OR_RETURN(std::vector<TensorRecord> records,
                       impl_->List(*set + "/*", unreadable, holders));
  records.erase(std::remove_if(records.begin(), records.end(),
                               [&](const TensorRecord& r) { return r.set != *set; }),
                records.end());
  return records;
}

Result<std::vector<std::string>> Client::ListNames(const std::string& glob) {
  MCD_RETURN_IF_ERROR(ValidateGlob(glob));
  if (std::optional<std::string> set = SetOfGlob(glob)) return SetMembers(*set);
  return impl_->ListNames(glob);
}

}  // namespace mcd
