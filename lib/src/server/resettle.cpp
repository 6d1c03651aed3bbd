// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/resettle.h"

#include <unistd.h>

#include <algorithm>
#include <set>

#include "common/log.h"
#include "common/process.h"
#include "redis/lua_scripts.h"
#include "server/startup.h"

namespace mcd {

Resettle::Resettle(ResettleOptions opt, std::string instance, CommitPipeline& pipeline,
                   TensorTable& table, DeviceSet& devices, Heartbeat& heartbeat,
                   CommandApplier& applier, std::function<void()> stop)
    : opt_(std::move(opt)),
      instance_(std::move(instance)),
      pipeline_(pipeline),
      table_(table),
      devices_(devices),
      heartbeat_(heartbeat),
      applier_(applier),
      stop_(std::move(stop)) {}

Status Resettle::Settle() {
  // The heartbeat first, in case Redis lost it: clients look for it before anything else.
  Status claimed = heartbeat_.Claim(*pipeline_.Drained());
  if (claimed.code() == ErrorCode::kAlreadyExists) {
    Log(LogLevel::kError, "after reconnecting: " + claimed.message());
    stop_();  // another instance serves the node now
  }
  MCD_RETURN_IF_ERROR(claimed);
  auto owner_of = [&](const std::string& name) -> Result<RedisValue> {
    return pipeline_.Command({"HMGET", opt_.keys.Tensor(name), "owner", "ipc_handle", "offset"});
  };
  for (Entry& entry : table_.TakeUnsettled()) {
    // Its allocation is its handle and offset: tensors carved from one slab share the handle.
    MCD_ASSIGN_OR_RETURN(RedisValue f, owner_of(entry.record.name));
    bool ran = f.elements.size() == 3 && f.elements[0].str == instance_ &&
               f.elements[1].str == entry.record.ipc_handle &&
               f.elements[2].str == std::to_string(entry.record.offset);
    Log(LogLevel::kInfo, "create of '" + entry.record.name + "' whose outcome was unknown: " +
                             (ran ? "it went through; kept" : "it did not; freed"));
    if (ran) {
      table_.Keep(std::move(entry));
    } else {
      (void)devices_.Free(entry.record.device,
                          entry.allocation);  // never published: nobody can have opened it
    }
  }
  std::set<std::string> maybe_deleted = table_.TakeMaybeDeleted();
  std::vector<std::string> lost, published;
  for (const auto& [name, entry] : table_.tensors()) {
    MCD_ASSIGN_OR_RETURN(RedisValue f,
                         pipeline_.Command({"HMGET", opt_.keys.Tensor(name), "owner", "state"}));
    if (f.elements.size() != 2 || f.elements[0].str != instance_) {
      lost.push_back(name);
    } else if (entry.filler && f.elements[1].str == "ready") {
      published.push_back(name);  // its publish went through, though its answer was lost
    }
  }
  for (const std::string& name : published) table_.Published(table_.find(name));
  std::set<std::string> sets_put_back;
  for (const std::string& name : lost) {
    auto found = table_.find(name);
    bool removed = false;
    if (maybe_deleted.count(name) != 0) {
      MCD_ASSIGN_OR_RETURN(removed, RemovalCommitted(name));
    }
    if (removed) {
      // Its last delete (or reclaim) went through before the connection broke.
      Entry entry = table_.Forget(found);
      Log(LogLevel::kInfo, "tensor '" + name + "' was removed just before Redis went away; freed");
      (void)devices_.Free(entry.record.device, entry.allocation);
      continue;
    }
    Status republished = Republish(found->second);
    if (republished.ok() && !found->second.record.set.empty()) {
      sets_put_back.insert(found->second.record.set);
    }
    if (republished.ok()) continue;
    if (!pipeline_.connected()) return republished;
    // Another instance's hash has the name now, or Redis refuses: processes may still map the
    // memory, so it is kept until shutdown.
    Log(LogLevel::kWarn, "tensor '" + name + "' lost its hash and cannot have it back (" +
                             republished.ToString() + "); its memory is kept until shutdown");
    table_.Orphan(table_.Forget(found));
  }
  for (const std::string& set : sets_put_back) MCD_RETURN_IF_ERROR(PutBackSetList(set));
  MCD_RETURN_IF_ERROR(RemovePhantoms());
  MCD_RETURN_IF_ERROR(applier_.ResumeUnfinished());
  return heartbeat_.MarkSettled(*pipeline_.Drained());
}

Status Resettle::Republish(Entry& entry) {
  // The server is the authority on what it holds: a tensor whose hash Redis lost (a restart
  // without persistence, a failover to a replica that missed writes) is put back as created,
  // with the one reference that is bound to nobody (its creator's); the references taken before
  // the loss are not known any more. A new epoch tells their releases apart, which then give
  // back nothing rather than the creator's reference (reference.lua).
  MCD_ASSIGN_OR_RETURN(entry.record.epoch, RandomHex(8));
  std::vector<std::string> fields;
  for (auto& [field, value] : HashFields(entry.record)) {
    fields.push_back(field);
    fields.push_back(std::move(value));
  }
  MCD_ASSIGN_OR_RETURN(
      CommitResult committed,
      pipeline_.CommitNow(pipeline_.Make(
          Route{}, "", "", entry.record.name, "", Pre::kAbsent, CommitChange::Hset(fields),
          // One still being filled is announced at its publish.
          entry.filler ? CommitEvent{}
                       : CommitEvent{"create", entry.record.creator_pid, "republished"})));
  if (committed.kind != CommitResult::kOk) {
    return Status(ErrorCode::kAlreadyExists, "another hash of that name exists");
  }
  Log(LogLevel::kWarn, "tensor '" + entry.record.name +
                           "' lost its hash with Redis; put it back (refcount 1, epoch " +
                           entry.record.epoch +
                           ": references taken before the loss are not known)");
  return Status::Ok();
}

Status Resettle::PutBackSetList(const std::string& set) {
  // The list and the record go with the members, when Redis loses them; each is a tensor of the
  // set's again.
  const std::string list = opt_.keys.Set(set);
  const std::string record = opt_.keys.SetRecord(set);
  std::vector<std::string> push = {"RPUSH", list};
  std::vector<std::string> fields = {"HSET", record};
  std::vector<std::string> members = table_.SetMembers(set);
  std::sort(members.begin(), members.end());  // as create_set writes it (SetApplier)
  for (const std::string& member : members) {
    push.push_back(opt_.keys.Tensor(member));
    fields.push_back(member);
    fields.push_back(SetRecordValue(table_.find(member)->second.record));
  }
  MCD_RETURN_IF_ERROR(pipeline_.Command({"DEL", list, record}).status());
  for (const std::vector<std::string>* command : {&push, &fields}) {
    MCD_RETURN_IF_ERROR(
        pipeline_.Command(std::vector<std::string_view>(command->begin(), command->end()))
            .status());
  }
  Log(LogLevel::kWarn, "tensor set '" + set + "' lost its list of members with Redis; put it back");
  return Status::Ok();
}

Result<bool> Resettle::RemovalCommitted(const std::string& name) {
  const EventTarget& stream = pipeline_.events();
  if (stream.cap == 0) return false;
  // The removal was among this server's last changes; the window is the stream's cap.
  MCD_ASSIGN_OR_RETURN(RedisValue events, pipeline_.Command({"XREVRANGE", stream.key, "+", "-",
                                                             "COUNT", std::to_string(stream.cap)}));
  for (const RedisValue& entry : events.elements) {
    if (entry.elements.size() != 2) continue;
    std::map<std::string, std::string> f = FieldMap(entry.elements[1]);
    if (f["name"] != name || f["node"] != opt_.node) continue;
    return f["refcount"] == "0" && (f["event"] == "delete" || f["event"] == "reclaim");
  }
  return false;
}

Status Resettle::RemovePhantoms() {
  std::vector<std::pair<std::string, std::string>> phantoms;  // name, set
  Status scanned =
      ScanNodeHashes(*pipeline_.Drained(), opt_.keys, opt_.node, {"set"},
                     [&](const std::string& key, RedisValue& f) {
                       std::string name = opt_.keys.NameFromTensorKey(key);
                       if (f.elements[0].str == instance_ && table_.find(name) == table_.end())
                         phantoms.emplace_back(name, f.elements[1].str);
                       return Status::Ok();
                     });
  MCD_RETURN_IF_ERROR(scanned);
  for (const auto& [name, set] : phantoms) {
    auto command =
        DeleteIfCommand(pipeline_.events(), opt_.keys.Tensor(name), "owner", instance_,
                        CommitEvent{"reclaim", getpid(), "stale"}, name, &opt_.keys, set);
    MCD_RETURN_IF_ERROR(
        pipeline_.Command(std::vector<std::string_view>(command.begin(), command.end())).status());
    Log(LogLevel::kWarn, "removed the hash of tensor '" + name +
                             "', which Redis brought back after it was removed (its memory is "
                             "freed already)");
  }
  return Status::Ok();
}

}  // namespace mcd
