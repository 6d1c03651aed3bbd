// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Tensor sets (client.h, CreateSetSpec): CreateSet (the members pushed, one create_set command,
// then the bytes written through one mapping of the whole set and one publish), GetSet (every
// member read and one reference for the whole set in one script call, and one mapping) and
// ReleaseSet. The client's thread.
#include <algorithm>
#include <unordered_set>

#include "client/client_impl.h"
#include "client/mapping_registry.h"
#include "common/process.h"

namespace mcd {

namespace {

// The create_set command of `spec`, checked; the members' bytes worked out.
Result<Command> CreateSetCommand(CreateSetSpec& spec) {
  MCD_RETURN_IF_ERROR(ValidateNewName(spec.name));
  if (spec.members.empty() || spec.members.size() > kMaxSetMembers) {
    return Status(ErrorCode::kInvalidArgument,
                  "a tensor set has 1 to " + std::to_string(kMaxSetMembers) + " members");
  }
  if (!spec.contents.empty() && spec.contents.size() != spec.members.size()) {
    return Status(ErrorCode::kInvalidArgument,
                  "contents for " + std::to_string(spec.contents.size()) + " of " +
                      std::to_string(spec.members.size()) + " members");
  }
  std::unordered_set<std::string_view> names;
  for (SetMember& member : spec.members) {
    // The server checks them again (ParseSetMember): this says what is wrong before anything
    // is sent.
    auto parsed = ParseSetMember(SetMemberToJson(member), spec.name);
    if (!parsed.ok()) return parsed.status();
    member.bytes = parsed->bytes;
    if (!names.insert(member.name).second) {
      return Status(ErrorCode::kInvalidArgument, "member '" + member.name + "' is named twice");
    }
  }
  Command cmd;
  cmd.op = Op::kCreateSet;
  cmd.name = spec.name;
  cmd.device = spec.device;
  cmd.lifetime = spec.lifetime;
  cmd.zero_init = spec.zero_init;
  if (spec.lifetime == Lifetime::kStack) cmd.owner_pid = getpid();
  if (!spec.contents.empty()) {
    cmd.fill = true;
    cmd.pid_space = PidSpace();
    cmd.zero_init = false;  // every byte is about to be written
  }
  return cmd;
}

// The members' records, as the server wrote their hashes: parts of `whole` (the set's record)
// at `layout`'s offsets.
std::vector<TensorRecord> MemberRecords(const CreateSetSpec& spec, const SetLayout& layout,
                                        const TensorRecord& whole) {
  std::vector<TensorRecord> records;
  records.reserve(spec.members.size());
  for (size_t i = 0; i < spec.members.size(); ++i) {
    TensorRecord record = whole;
    record.name = spec.members[i].name;
    record.dtype = spec.members[i].dtype;
    record.shape = spec.members[i].shape;
    record.bytes = spec.members[i].bytes;
    record.offset = whole.offset + layout.offsets[i];
    record.set = spec.name;
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace

Result<std::vector<TensorRecord>> Client::CreateSet(const CreateSetSpec& spec_in) {
  CreateSetSpec spec = spec_in;
  MCD_ASSIGN_OR_RETURN(Command cmd, CreateSetCommand(spec));
  MCD_ASSIGN_OR_RETURN(SetLayout layout, LayOutSet(spec.members));
  auto created = impl_->CreateSet(std::move(cmd), spec.members);
  if (!created.ok()) {
    ErrorCode code = created.status().code();
    if (!spec.contents.empty() &&
        (code == ErrorCode::kTimeout || code == ErrorCode::kTryAgain ||
         code == ErrorCode::kUnavailable || code == ErrorCode::kInternal)) {
      impl_->AbandonSet(spec.name);  // as Create: it may still have been made
    }
    return created.status();
  }
  if (created->bytes != layout.total) {
    return Status(ErrorCode::kUnexpectedReply, "the server laid set '" + spec.name + "' out in " +
                                                   std::to_string(created->bytes) + " bytes, not " +
                                                   std::to_string(layout.total));
  }
  if (spec.contents.empty()) return MemberRecords(spec, layout, created.value());
  // One mapping of the whole set, every member written through it.
  Status filled = Status::Ok();
  auto ptr = MappingRegistry::Get().Open(created.value(), impl_->server().PoolSourceOf());
  if (!ptr.ok()) filled = impl_->WhyNotOpened(ptr.status());
  for (size_t i = 0; filled.ok() && i < spec.members.size(); ++i) {
    TensorView part{created.value(), static_cast<char*>(ptr.value()) + layout.offsets[i]};
    filled = CopyFromHost(part, spec.contents[i], spec.members[i].bytes);
  }
  if (ptr.ok()) {
    Status closed = MappingRegistry::Get().Close(created.value());
    if (filled.ok()) filled = closed;
  }
  if (filled.ok()) {
    auto published = impl_->PublishSet(spec.name);
    if (published.ok()) return MemberRecords(spec, layout, published.value());
    filled = published.status();
  }
  impl_->AbandonSet(spec.name);
  return filled;
}

Result<std::vector<std::string>> Client::SetMembers(const std::string& set) {
  MCD_RETURN_IF_ERROR(ValidateName(set));
  const KeySpace& keys = impl_->options().keys;
  return impl_->Retrying("read", true, [&]() -> Result<std::vector<std::string>> {
    RedisConnection& redis = impl_->redis();
    MCD_ASSIGN_OR_RETURN(RedisValue listed, redis.Command({"LRANGE", keys.Set(set), "0", "-1"}));
    for (const RedisValue& key : listed.elements) {
      MCD_RETURN_IF_ERROR(redis.Append({"HGET", key.str, "set"}));
    }
    // A member freed on its own has left the set, and a tensor of its name made since is none.
    std::vector<std::string> names;
    for (const RedisValue& key : listed.elements) {
      MCD_ASSIGN_OR_RETURN(RedisValue of, redis.ReadReply());
      std::string name = keys.NameFromTensorKey(key.str);
      if (!of.is_nil() && of.str == set && !name.empty()) names.push_back(std::move(name));
    }
    std::sort(names.begin(), names.end());
    return names;
  });
}

Result<std::vector<TensorView>> Client::GetSet(const std::string& set) {
  MCD_RETURN_IF_ERROR(ValidateName(set));
  impl_->server().PrefetchImports();
  MCD_ASSIGN_OR_RETURN(std::vector<TensorRecord> records, impl_->DirectGetSet(set));
  std::string leader = records.front().name;
  std::sort(records.begin(), records.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.name < b.name; });
  return impl_->OpenReferenced(std::move(records), {std::move(leader)});
}

Result<TensorRecord> Client::ReleaseSet(const std::vector<TensorView>& views) {
  if (views.empty()) return Status(ErrorCode::kInvalidArgument, "ReleaseSet of no views");
  const TensorView* leader = &views.front();
  std::unordered_set<std::string_view> seen;
  for (const TensorView& view : views) {
    if (!seen.insert(view.record.name).second) {
      return Status(ErrorCode::kInvalidArgument,
                    "ReleaseSet names '" + view.record.name + "' twice; nothing changed");
    }
    if (view.record.set.empty() || view.record.set != views.front().record.set) {
      return Status(ErrorCode::kInvalidArgument, "ReleaseSet takes the views of one GetSet; '" +
                                                     view.record.name + "' is not of set '" +
                                                     views.front().record.set + "'");
    }
    if (view.record.name < leader->record.name) leader = &view;
  }
  // Every mapping closes before the reference goes: the memory stays while any is open here.
  // One that could not be closed keeps the reference, as Release keeps its own.
  for (const TensorView& view : views) MCD_RETURN_IF_ERROR(Close(view));
  return impl_->Release(leader->record.name);
}

}  // namespace mcd
