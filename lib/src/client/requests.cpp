// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The requests that change a tensor (Client::Impl, client_impl.h): create, publish and abandon
// through the server; get and release by the reference script, or a release through the server
// where it is most likely the last; each retried while Redis is away, and each noted in the
// ReferenceBook. Also the reads that change nothing, retried the same way. The client's thread.
#include "client/client_impl.h"
#include "client/records.h"

namespace mcd {

// Repeated after a lost connection: at worst this process then holds one more reference, given
// back when it exits.
Status Client::Impl::RefusesInit() const {
  if (!holder_ || holder_->pid != kInitPid) return Status::Ok();
  return Status(ErrorCode::kInvalidArgument,
                "this client's references would be bound to pid 1 (init), which never "
                "exits while the server runs, and never be given back: bind them to "
                "another process or to none (holder_pid kNoHolder), or run the program "
                "under an init (docker run --init)");
}

Result<TensorRecord> Client::Impl::DirectGet(const std::string& name) {
  MCD_RETURN_IF_ERROR(RefusesInit());
  auto record = Retrying("get", true, [&]() -> Result<TensorRecord> {
    MCD_RETURN_IF_ERROR(server_->EnsureAlive());  // its tensors died with it
    return script_->Get(name);
  });
  if (record.ok()) book_.Took(name, record->refcount, record->epoch);
  return record;
}

Result<std::vector<TensorRecord>> Client::Impl::DirectGetMany(
    const std::vector<std::string>& names) {
  return TakeAll([&] { return script_->GetMany(names); });
}

Result<std::vector<TensorRecord>> Client::Impl::DirectGetSet(const std::string& set) {
  return TakeAll([&] { return script_->GetSet(set); }, /*first_only=*/true);
}

// As DirectGet, for the references one batched script call takes: one of each record's, or, with
// `first_only`, of the first record's alone (a set's leader).
Result<std::vector<TensorRecord>> Client::Impl::TakeAll(
    const std::function<Result<std::vector<TensorRecord>>()>& take, bool first_only) {
  MCD_RETURN_IF_ERROR(RefusesInit());
  auto records = Retrying("get", true, [&]() -> Result<std::vector<TensorRecord>> {
    MCD_RETURN_IF_ERROR(server_->EnsureAlive());
    return take();
  });
  if (records.ok()) {
    for (const TensorRecord& r : records.value()) {
      book_.Took(r.name, r.refcount, r.epoch);
      if (first_only) break;
    }
  }
  return records;
}

// Every release through the script, which queues the delete command of each last reference:
// the creator's shortcut of Release (straight to the server) would cost a request per tensor.
Result<std::vector<TensorRecord>> Client::Impl::ReleaseMany(const std::vector<std::string>& names) {
  std::vector<ReferenceBook::Release> plans;
  std::vector<std::string> epochs;
  std::vector<ReferenceBook::Whose> whose;
  for (const std::string& name : names) {
    plans.push_back(book_.PlanRelease(name, ReferenceScript::kAnyEpoch));
    epochs.push_back(plans.back().epoch);
    whose.push_back(plans.back().whose);
  }
  auto released = Retrying("release", false, [&]() -> Result<std::vector<TensorRecord>> {
    MCD_RETURN_IF_ERROR(server_->EnsureAlive());
    return script_->ReleaseMany(names, epochs, whose);
  });
  if (released.ok()) {
    for (const TensorRecord& r : released.value()) book_.Saw(r.name, r.refcount);
  } else if (released.status().code() == ErrorCode::kNotHeld) {
    // Refused as a whole: every plan stands, so that no later release of these names is of
    // another kind (a refused 'own' retried as 'any' would give back the creator's).
    for (size_t i = 0; i < names.size(); ++i) book_.Refused(names[i], std::move(plans[i]));
  } else {
    for (const std::string& name : names) book_.Saw(name, 0);
  }
  return released;
}

Result<TensorRecord> Client::Impl::CreateSet(Command cmd, const std::vector<SetMember>& members) {
  MCD_ASSIGN_OR_RETURN(cmd.members, NewRequestId(""));
  const std::string key = opt_.keys.Members(cmd.members);
  std::vector<std::string> push = {"RPUSH", key};
  for (const SetMember& member : members) push.push_back(SetMemberToJson(member));
  auto pushed = Retrying("create_set", false, [&]() -> Result<RedisValue> {
    MCD_RETURN_IF_ERROR(redis_->Append(std::vector<std::string_view>(push.begin(), push.end())));
    MCD_RETURN_IF_ERROR(redis_->Append({"EXPIRE", key, "60"}));
    MCD_RETURN_IF_ERROR(redis_->ReadReply().status());
    return redis_->ReadReply();
  });
  MCD_RETURN_IF_ERROR(pushed.status());
  auto created = ServerRequest("create_set", cmd);
  if (created.ok()) {
    for (const SetMember& member : members) book_.Created(member.name, 1);
  }
  return created;
}

Result<TensorRecord> Client::Impl::PublishSet(const std::string& set) {
  Command cmd;
  cmd.op = Op::kPublish;
  cmd.name = set;
  cmd.set = true;
  return ServerRequest("publish", cmd);
}

void Client::Impl::AbandonSet(const std::string& set) {
  Command cmd;
  cmd.op = Op::kAbandon;
  cmd.name = set;
  cmd.set = true;
  (void)ServerRequest("abandon", cmd);
}

Result<TensorRecord> Client::Impl::ServerRequest(const char* what, const Command& cmd) {
  return Retrying(what, false, [&]() -> Result<TensorRecord> {
    // Nobody would take the command, or the tensor died with its server.
    MCD_RETURN_IF_ERROR(server_->EnsureAlive());
    return transport_->Request(cmd);
  });
}

// The tensor is then one this client tracks (ReferenceBook::Created).
Result<TensorRecord> Client::Impl::Create(Command cmd) {
  auto created = ServerRequest("create", cmd);
  if (created.ok()) book_.Created(cmd.name, created->refcount);
  return created;
}

Result<TensorRecord> Client::Impl::Publish(const std::string& name) {
  Command cmd;
  cmd.op = Op::kPublish;
  cmd.name = name;
  return ServerRequest("publish", cmd);
}

// Only a tensor this process is filling is touched, so it is safe whenever the create's outcome
// is not known; a failure is the original error's to report (the reaper removes it once this
// process exits).
void Client::Impl::Abandon(const std::string& name) {
  Command cmd;
  cmd.op = Op::kAbandon;
  cmd.name = name;
  (void)ServerRequest("abandon", cmd);
  book_.Saw(name, 0);
}

// A tensor this client created and whose refcount it last saw at 1 is most likely released for
// the last time, which only the server can do: its delete command goes to the server at once.
// Were another process to have taken a reference since, the server's delete gives back the
// creator's just the same. Any other release runs the reference script, which answers a release
// that leaves references itself and queues the delete command of the last one. A reference this
// client took names the epoch it was taken in, so that one taken before Redis lost the hash does
// not give back another's (TensorRecord::epoch). Either gives back only the kind of reference
// this client has (ReferenceBook::Whose): its holder's own for one it took, one bound to nobody
// for its creator's.
Result<TensorRecord> Client::Impl::Release(const std::string& name) {
  ReferenceBook::Release plan = book_.PlanRelease(name, ReferenceScript::kAnyEpoch);
  Result<TensorRecord> released = Retrying("release", false, [&]() -> Result<TensorRecord> {
    MCD_RETURN_IF_ERROR(server_->EnsureAlive());  // nobody holds its memory any more
    return plan.last ? transport_->Request(DeleteCommand(name, std::nullopt))  // the creator's
                     : script_->Release(name, plan.epoch, plan.whose);
  });
  if (!released.ok() && released.status().code() == ErrorCode::kNotHeld) {
    book_.Refused(name, std::move(plan));  // nothing changed: the next release is of the same kind
  } else {
    book_.Saw(name, released.ok() ? released->refcount : 0);  // a failed one: no longer tracked
  }
  return released;
}

Result<TensorRecord> Client::Impl::Stat(const std::string& name) {
  MCD_RETURN_IF_ERROR(ValidateName(name));
  return Retrying("read", true, [&] { return reads_->Stat(name); });
}

Result<std::vector<TensorRecord>> Client::Impl::List(const std::string& glob,
                                                     std::vector<std::string>* unreadable,
                                                     bool holders) {
  return Retrying("listing", true, [&] {
    if (unreadable) unreadable->clear();
    return reads_->List(glob, unreadable, holders);
  });
}

Result<std::vector<std::string>> Client::Impl::ListNames(const std::string& glob) {
  return Retrying("listing", true, [&] { return reads_->ListNames(glob); });
}

}  // namespace mcd
