// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/set_applier.h"

#include <algorithm>
#include <unordered_set>

#include "common/log.h"
#include "common/process.h"
#include "protocol/json_codec.h"
#include "redis/script_calls.h"

namespace mcd {

SetApplier::SetApplier(const ApplierOptions& opt, CommitPipeline& pipeline, TensorTable& table,
                       DeviceSet& devices, OutcomeLog& outcomes, Responder& responder,
                       const NodeCopier& copier)
    : opt_(opt),
      pipeline_(pipeline),
      table_(table),
      devices_(devices),
      outcomes_(outcomes),
      responder_(responder),
      copier_(copier) {}

template <typename Then>
void SetApplier::Queue(Pending pending, Request& request, Then then) {
  pending.done = [this, request = std::move(request), then = std::move(then)](
                     Pending& p, Result<CommitResult> committed) mutable {
    responder_.Committed(p, std::move(committed),
                         [&](Result<CommitResult> r) { then(request, std::move(r)); });
  };
  pipeline_.Queue(std::move(pending));
}

void SetApplier::Fail(const Request& request, const char* op, const Status& status,
                      Clock::time_point t0) {
  responder_.Fail(request, op, status);
  outcomes_.Record(op, request.parsed->name, status, t0);
}

void SetApplier::DropEmptied() {
  static const std::vector<CommitMember> kNoMembers;
  for (const std::string& set : table_.TakeEmptiedSets()) {
    pipeline_.Queue(pipeline_.Make(Route{}, "", "", set, "", Pre::kNone,
                                   CommitChange::DelMany(kNoMembers), CommitEvent{}));
  }
}

Result<std::vector<SetMember>> SetApplier::ReadMembers(const Command& cmd) {
  const std::string key = opt_.keys.Members(cmd.members);
  // Taken out of Redis whole, after Redis checked how many and how long (set_members.lua).
  std::vector<std::string> argv = SetMembersCall(key, kMaxSetMembers, kMaxCommandBytes);
  auto listed = ParseSetMembersReply(
      pipeline_.Command(std::vector<std::string_view>(argv.begin(), argv.end())));
  if (!listed.ok()) {
    return Status(listed.status().code(), "the members of set '" + cmd.name + "' at " + key + ": " +
                                              listed.status().message() + " (at most " +
                                              std::to_string(kMaxSetMembers) + " members of " +
                                              std::to_string(kMaxCommandBytes) + " bytes each)");
  }
  if (listed->empty()) {
    return Status(ErrorCode::kInvalidArgument,
                  "no members at " + key + " (push them before the create_set, within a minute)");
  }
  std::vector<SetMember> members;
  members.reserve(listed->size());
  std::unordered_set<std::string> names;
  for (const std::string& raw : *listed) {
    auto member = ParseSetMember(raw, cmd.name);
    if (!member.ok()) {
      return Status(member.status().code(), "member " + std::to_string(members.size() + 1) +
                                                " of set '" + cmd.name +
                                                "': " + member.status().message());
    }
    if (!names.insert(member->name).second) {
      return Status(ErrorCode::kInvalidArgument,
                    "set '" + cmd.name + "' names member '" + member->name + "' twice");
    }
    if (table_.find(member->name) != table_.end()) {
      return Status(ErrorCode::kAlreadyExists, "tensor '" + member->name + "' already exists");
    }
    if (copier_.Copying(member->name)) {
      return Status(ErrorCode::kAlreadyExists,
                    "tensor '" + member->name + "' is being made already, by a copy under way");
    }
    members.push_back(std::move(member).value());
  }
  return members;
}

std::vector<Entry> SetApplier::MemberEntries(const Command& cmd,
                                             const std::vector<SetMember>& members,
                                             const SetLayout& layout, const Allocation& block,
                                             const std::optional<Holder>& filler) const {
  auto shared = std::make_shared<SharedBlock>();
  shared->whole = block;
  shared->members = members.size();
  TensorRecord base = NewRecord(cmd, opt_);
  base.set = cmd.name;
  base.ipc_kind = block.ipc_kind;
  base.ipc_handle = block.ipc_handle;
  std::vector<Entry> entries;
  entries.reserve(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    TensorRecord record = base;
    record.name = members[i].name;
    record.dtype = members[i].dtype;
    record.shape = members[i].shape;
    record.bytes = members[i].bytes;
    record.offset = block.offset + layout.offsets[i];
    Allocation part;
    part.ptr = static_cast<char*>(block.ptr) + layout.offsets[i];
    part.bytes = members[i].bytes;
    part.ipc_kind = block.ipc_kind;
    part.ipc_handle = block.ipc_handle;
    part.offset = record.offset;
    part.shared = shared;
    std::string head = RecordJsonHead(record);
    entries.push_back(Entry{std::move(record), std::move(part), std::move(head), filler});
  }
  return entries;
}

std::vector<CommitMember> SetApplier::CommitMembers(const std::vector<const TensorRecord*>& records,
                                                    const std::vector<std::string>* fields) const {
  std::vector<CommitMember> out;
  out.reserve(records.size());
  for (const TensorRecord* record : records) {
    CommitMember member{opt_.keys.Tensor(record->name), record->name, {}};
    if (fields != nullptr) {
      member.fields = *fields;
    } else {
      for (auto& [field, value] : HashFields(*record)) {
        member.fields.push_back(field);
        member.fields.push_back(std::move(value));
      }
    }
    out.push_back(std::move(member));
  }
  return out;
}

TensorRecord SetApplier::SetRecord(const std::string& set,
                                   const std::vector<TensorTable::Map::iterator>& members,
                                   const std::string& state) {
  const Entry& first = members.front()->second;
  uint64_t start = first.allocation.shared ? first.allocation.shared->whole.offset : 0;
  uint64_t end = start;
  for (const auto& it : members) {
    end = std::max(end, it->second.record.offset + it->second.record.bytes);
  }
  TensorRecord record = first.record;
  record.name = set;
  record.set.clear();
  record.dtype = DType::kU8;
  record.shape = {static_cast<int64_t>(end - start)};
  record.bytes = end - start;
  record.offset = start;
  record.state = state;
  return record;
}

void SetApplier::HandleCreate(Request& request) {
  auto t0 = Clock::now();
  const Command& cmd = request.parsed.value();
  if (!table_.SetMembers(cmd.name).empty()) {
    return Fail(request, "create_set",
                Status(ErrorCode::kAlreadyExists, "tensor set '" + cmd.name + "' already exists"),
                t0);
  }
  if (!devices_.Serves(cmd.device)) {
    return Fail(request, "create_set",
                Status(ErrorCode::kNoDevice,
                       "device " + DeviceName(cmd.device) +
                           " is not served here (devices: " + devices_.devices_text() + ")"),
                t0);
  }
  auto filler = FillerOf(cmd);
  if (!filler.ok()) return Fail(request, "create_set", filler.status(), t0);
  auto members = ReadMembers(cmd);
  if (!members.ok()) return Fail(request, "create_set", members.status(), t0);
  auto layout = LayOutSet(*members);
  if (!layout.ok()) return Fail(request, "create_set", layout.status(), t0);
  auto block = devices_.Allocate(cmd.device, layout->total, cmd.zero_init && !cmd.fill);
  if (!block.ok()) return Fail(request, "create_set", block.status(), t0);
  std::vector<Entry> entries = MemberEntries(cmd, *members, *layout, *block, *filler);

  std::vector<const TensorRecord*> records;
  for (const Entry& entry : entries) records.push_back(&entry.record);
  std::vector<CommitMember> commit = CommitMembers(records, nullptr);
  // The set's list in Redis goes by name: its first member still there is then the one first by
  // name, whose reference a set's get takes without comparing names (reference_many.lua).
  std::sort(commit.begin(), commit.end(),
            [](const CommitMember& a, const CommitMember& b) { return a.name < b.name; });
  TensorRecord whole = entries.front().record;
  whole.name = cmd.name;
  whole.set.clear();
  whole.dtype = DType::kU8;
  whole.shape = {static_cast<int64_t>(layout->total)};
  whole.bytes = layout->total;
  whole.offset = block->offset;
  std::string reply = TensorReplyJson(cmd.req, Op::kCreateSet, RecordJsonHead(whole), 1);
  Queue(pipeline_.Make(request.route, request.raw, cmd.req, cmd.name, reply, Pre::kAbsent,
                       CommitChange::HsetMany(commit),
                       *filler ? CommitEvent{} : CommitEvent{"create", cmd.pid}),
        request,
        [this, t0, entries = std::move(entries)](const Request& made,
                                                 Result<CommitResult> committed) mutable {
          Created(made, std::move(entries), t0, std::move(committed));
        });
}

void SetApplier::Created(const Request& request, std::vector<Entry> entries, Clock::time_point t0,
                         Result<CommitResult> committed) {
  const std::string& set = request.parsed->name;
  const int device = entries.front().record.device;
  if (committed.ok() && committed->kind == CommitResult::kOk) {
    std::string detail = "device=" + DeviceName(device) +
                         " members=" + std::to_string(entries.size()) +
                         " bytes=" + std::to_string(entries.front().allocation.shared->whole.bytes);
    for (Entry& entry : entries) table_.Keep(std::move(entry));
    return outcomes_.Record("create_set", set, Status::Ok(), t0, detail);
  }
  if (!committed.ok() && !pipeline_.connected()) {
    // The connection broke: the script may or may not have run. Decided after reconnecting,
    // member by member (all of them or none went through).
    for (Entry& entry : entries) table_.Unsettled(std::move(entry));
    return outcomes_.Record("create_set", set, committed.status(), t0, "outcome=unknown");
  }
  for (const Entry& entry : entries) (void)devices_.Free(device, entry.allocation);
  if (!committed.ok()) {
    responder_.Refused(request, "create_set", committed.status());
    return outcomes_.Record("create_set", set, committed.status(), t0);
  }
  if (committed->kind == CommitResult::kDup) {
    return outcomes_.Record("create_set", set, Status::Ok(), t0, "repeated_req=" + request.req);
  }
  Status exists(ErrorCode::kAlreadyExists,
                "a member of tensor set '" + set + "', or the set, already exists");
  responder_.AnswerNow(request, "create_set", exists);
  outcomes_.Record("create_set", set, exists, t0);
}

Result<std::vector<TensorTable::Map::iterator>> SetApplier::FilledMembers(const Command& cmd) {
  std::vector<TensorTable::Map::iterator> members;
  for (const std::string& name : table_.SetMembers(cmd.name)) {
    auto it = table_.find(name);
    const Entry& entry = it->second;
    if (!entry.filler) {
      return Status(ErrorCode::kInvalidArgument, "tensor set '" + cmd.name + "' is " +
                                                     entry.record.state + ", not being filled");
    }
    if (entry.filler->pid != cmd.pid) {
      return Status(ErrorCode::kInvalidArgument,
                    "tensor set '" + cmd.name + "' is being filled by process " +
                        std::to_string(entry.filler->pid) + "; only it may publish or abandon it");
    }
    members.push_back(it);
  }
  if (members.empty()) {
    return Status(ErrorCode::kNotFound, "no tensor set named '" + cmd.name + "'");
  }
  return members;
}

void SetApplier::NotCommitted(const Request& made, const char* op,
                              const Result<CommitResult>& committed, Clock::time_point t0) {
  const std::string& set = made.parsed->name;
  if (committed.ok() && committed->kind == CommitResult::kDup) {
    return outcomes_.Record(op, set, Status::Ok(), t0, "repeated_req=" + made.req);
  }
  if (!committed.ok()) {
    responder_.Refused(made, op, committed.status());
    return outcomes_.Record(op, set, committed.status(), t0);
  }
  Status gone(ErrorCode::kNotFound, "tensor set '" + set +
                                        "' is gone (its members were removed underneath the "
                                        "server)");
  responder_.AnswerNow(made, op, gone);
  outcomes_.Record(op, set, gone, t0);
}

void SetApplier::HandlePublish(Request& request) {
  auto t0 = Clock::now();
  const Command& cmd = request.parsed.value();
  auto members = FilledMembers(cmd);
  if (!members.ok()) return Fail(request, "publish", members.status(), t0);
  std::vector<const TensorRecord*> records;
  for (const auto& it : *members) records.push_back(&it->second.record);
  static const std::vector<std::string> kReady = {"state", "ready"};
  std::vector<CommitMember> commit = CommitMembers(records, &kReady);
  std::string reply = TensorReplyJson(cmd.req, Op::kPublish,
                                      RecordJsonHead(SetRecord(cmd.name, *members, "ready")), 1);
  Queue(pipeline_.Make(request.route, request.raw, cmd.req, cmd.name, reply, Pre::kCreating,
                       CommitChange::HsetMany(commit), CommitEvent{"create", cmd.pid}),
        request, [this, t0](const Request& made, Result<CommitResult> committed) {
          const std::string& set = made.parsed->name;
          if (committed.ok() && committed->kind == CommitResult::kOk) {
            for (const std::string& name : table_.SetMembers(set)) {
              table_.Published(table_.find(name));
            }
            return outcomes_.Record("publish", set, Status::Ok(), t0, "set");
          }
          NotCommitted(made, "publish", committed, t0);
        });
}

void SetApplier::HandleAbandon(Request& request) {
  auto t0 = Clock::now();
  const Command& cmd = request.parsed.value();
  auto members = FilledMembers(cmd);
  if (!members.ok()) return Fail(request, "abandon", members.status(), t0);
  std::vector<const TensorRecord*> records;
  for (const auto& it : *members) records.push_back(&it->second.record);
  static const std::vector<std::string> kNoFields;
  std::vector<CommitMember> commit = CommitMembers(records, &kNoFields);
  std::string reply = TensorReplyJson(cmd.req, Op::kAbandon,
                                      RecordJsonHead(SetRecord(cmd.name, *members, "creating")), 0);
  // Never announced, so no event.
  Queue(pipeline_.Make(request.route, request.raw, cmd.req, cmd.name, reply, Pre::kCreating,
                       CommitChange::DelMany(commit), CommitEvent{}),
        request, [this, t0](const Request& made, Result<CommitResult> committed) {
          const std::string& set = made.parsed->name;
          if (committed.ok() && committed->kind == CommitResult::kOk) {
            std::vector<std::string> names = table_.SetMembers(set);
            uint64_t freed = 0;
            for (const std::string& name : names) {
              Entry entry = table_.Forget(table_.find(name));
              freed += entry.record.bytes;
              (void)devices_.Free(entry.record.device, entry.allocation);
            }
            return outcomes_.Record("abandon", set, Status::Ok(), t0,
                                    "set freed=" + std::to_string(freed));
          }
          NotCommitted(made, "abandon", committed, t0);
        });
}

}  // namespace mcd
