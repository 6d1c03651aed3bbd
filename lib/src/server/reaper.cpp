// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/reaper.h"

#include "common/log.h"
#include "common/process.h"
#include "redis/script_calls.h"

namespace mcd {

Reaper::Reaper(ReaperOptions opt, std::string instance, CommitPipeline& pipeline,
               TensorTable& table, DeviceSet& devices, OutcomeLog& outcomes)
    : opt_(std::move(opt)),
      instance_(std::move(instance)),
      holders_key_(opt_.keys.Holders(opt_.node)),
      pipeline_(pipeline),
      table_(table),
      devices_(devices),
      outcomes_(outcomes) {}

void Reaper::ReapStackTensors() {
  pipeline_.Drain();  // a delete on its way may already have removed one
  for (const std::string& name : table_.DeadStackTensors()) {
    auto t0 = OutcomeLog::Clock::now();
    auto found = table_.find(name);
    std::string owner = "owner_pid=" + std::to_string(found->second.record.owner_pid);
    // "mine": only the hash this instance wrote goes, and the commit says how many references
    // it still had. One still being filled was never announced: it goes without an event.
    bool filling = found->second.filler.has_value();
    CommitEvent event{"reclaim", found->second.record.owner_pid, "owner_exited"};
    auto committed = pipeline_.CommitNow(pipeline_.Make(
        Route{}, "", "", name, "", filling ? Pre::kCreating : Pre::kMine,
        CommitChange::Del().Of(found->second.record.set), filling ? CommitEvent{} : event));
    Reclaimed("reclaim", name, std::move(committed), t0, owner);
  }
}

void Reaper::ReapDeadFillers() {
  pipeline_.Drain();
  for (const std::string& name : table_.DeadFillers()) {
    auto t0 = OutcomeLog::Clock::now();
    auto found = table_.find(name);
    std::string filler = "filler_pid=" + std::to_string(found->second.filler->pid);
    auto committed = pipeline_.CommitNow(
        pipeline_.Make(Route{}, "", "", name, "", Pre::kCreating,
                       CommitChange::Del().Of(found->second.record.set), CommitEvent{}));
    Reclaimed("reclaim_unfilled", name, std::move(committed), t0, filler);
  }
}

void Reaper::ReapDeadHolders() {
  auto holders = pipeline_.Command({"SMEMBERS", holders_key_});
  if (!holders.ok()) {
    Log(LogLevel::kWarn, "reading the node's holders: " + holders.status().ToString());
    return;
  }
  for (const RedisValue& id : holders->elements) {
    std::optional<Holder> holder = ParseHolderId(id.str);
    if (holder && ProcessAlive(holder->pid, holder->start)) continue;
    Status given = GiveBackAll(id.str);
    if (!given.ok()) Log(LogLevel::kWarn, "references of " + id.str + ": " + given.ToString());
  }
}

Status Reaper::GiveBackAll(const std::string& holder) {
  std::string held_key = opt_.keys.Held(opt_.node, holder);
  std::optional<Holder> parsed = ParseHolderId(holder);
  CommitEvent event{"reclaim", parsed ? parsed->pid : 0, "holder_exited"};
  MCD_ASSIGN_OR_RETURN(RedisValue held, pipeline_.Command({"SMEMBERS", held_key}));
  // One commit per tensor, pipelined: a holder may have touched thousands.
  for (const RedisValue& key : held.elements) {
    std::string name = opt_.keys.NameFromTensorKey(key.str);
    auto found = table_.find(name);
    if (found == table_.end()) continue;  // gone already (deleted, reclaimed)
    // A tensor still being filled has no reference of any holder (gets are refused until its
    // publish): the key in the holder's set is an earlier tensor's of the same name, and the
    // give-back, which needs a ready hash, would find this one "not mine".
    if (found->second.filler) continue;
    auto t0 = OutcomeLog::Clock::now();
    // "mine": a hash this instance wrote; the script gives back what the hash says the holder
    // holds (none when it gave them back itself).
    pipeline_.Queue(pipeline_.Make(
        Route{}, "", "", name, "", Pre::kMine,
        CommitChange::Unhold(holder).Of(found->second.record.set), event,
        [this, name, holder, t0](Pending&, Result<CommitResult> committed) {
          if (committed.ok() && committed->kind == CommitResult::kOk && committed->refcount > 0) {
            return outcomes_.Record(
                "release_dead", name, Status::Ok(), t0,
                "holder=" + holder + " refcount=" + std::to_string(committed->refcount));
          }
          Reclaimed("release_dead", name, std::move(committed), t0, "holder=" + holder);
        }));
  }
  pipeline_.Flush();
  pipeline_.Drain();  // every reference given back, before the holder may be forgotten
  if (!pipeline_.connected()) return Status(ErrorCode::kUnavailable, "Redis went away");
  // Forgotten only by the script that finds nothing of it left: a get bound to it that came
  // after the SMEMBERS above keeps it for the next round (forget_holder.lua).
  return ParseForgetHolderReply(
             pipeline_.Command(ForgetHolderCall({holders_key_, held_key, holder, instance_})))
      .status();
}

void Reaper::Reclaimed(const char* what, const std::string& name, Result<CommitResult> committed,
                       OutcomeLog::Clock::time_point t0, const std::string& detail) {
  if (!committed.ok()) {
    Log(LogLevel::kWarn,
        std::string(what) + " of '" + name + "': " + committed.status().ToString());
    if (!pipeline_.connected()) table_.MaybeDeleted(name);  // decided after reconnecting
    return;
  }
  auto found = table_.find(name);
  if (found == table_.end()) return;
  if (committed->kind != CommitResult::kOk) {
    // The hash is gone or another's (changed by hand): a process may still map the memory.
    Log(LogLevel::kWarn, "the hash of tensor '" + name +
                             "' is not this server's any more; its memory is kept until shutdown");
    table_.Orphan(table_.Forget(found));
    return;
  }
  Entry entry = table_.Forget(found);
  Status freed = devices_.Free(entry.record.device, entry.allocation);
  outcomes_.Record(what, name, freed, t0,
                   detail + " refcount=" + std::to_string(committed->refcount) +
                       " freed=" + std::to_string(entry.record.bytes));
}

}  // namespace mcd
