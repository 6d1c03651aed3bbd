// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Tensor sets (memcuda(7), TENSOR SETS): create_set lays every member out in one allocation and
// writes every member's hash, and the set's list of them, in one commit; publish and abandon with
// "set" do the same for a set being filled. From then on each member is a tensor of its own (got,
// released and freed as any other), whose part of the allocation is a SharedBlock's: the
// allocation goes with the set's last member (DeviceSet::Free). Main thread of the server only.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "server/applier.h"

namespace mcd {

class SetApplier {
 public:
  using Clock = std::chrono::steady_clock;
  SetApplier(const ApplierOptions& opt, CommitPipeline& pipeline, TensorTable& table,
             DeviceSet& devices, OutcomeLog& outcomes, Responder& responder,
             const NodeCopier& copier);

  // Each takes the request (its parsed command ok), and queues its commit or answers why not.
  void HandleCreate(Request& request);
  void HandlePublish(Request& request);
  void HandleAbandon(Request& request);
  // Queues, for each set whose last member left the table (freed, reclaimed, abandoned), the
  // removal of its list of members: only once no hash it names is left, so that a set made again
  // meanwhile keeps its own (commit.lua del_many under "none").
  void DropEmptied();

 private:
  template <typename Then>
  void Queue(Pending pending, Request& request, Then then);
  // The members the create_set pushed (KeySpace::Members), read and taken out of Redis, each
  // checked, none named twice nor held here already.
  Result<std::vector<SetMember>> ReadMembers(const Command& cmd);
  // The members' entries: each a part of `block`, at the layout's offset.
  std::vector<Entry> MemberEntries(const Command& cmd, const std::vector<SetMember>& members,
                                   const SetLayout& layout, const Allocation& block,
                                   const std::optional<Holder>& filler) const;
  void Created(const Request& request, std::vector<Entry> entries, Clock::time_point t0,
               Result<CommitResult> committed);
  // The entries of the members of the set `cmd` publishes or abandons, every one of them being
  // filled by cmd.pid; or why not.
  Result<std::vector<TensorTable::Map::iterator>> FilledMembers(const Command& cmd);
  // What replies say of a whole set: a u8 tensor named after it, over its allocation from its
  // first member's start to its last member's end, in `state`.
  static TensorRecord SetRecord(const std::string& set,
                                const std::vector<TensorTable::Map::iterator>& members,
                                const std::string& state);
  // The commit's members: each one's key and name, with `fields` (all of its hash when null).
  std::vector<CommitMember> CommitMembers(const std::vector<const TensorRecord*>& records,
                                          const std::vector<std::string>* fields) const;
  void Fail(const Request& request, const char* op, const Status& status, Clock::time_point t0);
  // A set's publish or abandon (`op`) whose commit did not go through: a repeated req, Redis's
  // refusal, or members gone underneath the server.
  void NotCommitted(const Request& made, const char* op, const Result<CommitResult>& committed,
                    Clock::time_point t0);

  const ApplierOptions& opt_;
  CommitPipeline& pipeline_;
  TensorTable& table_;
  DeviceSet& devices_;
  OutcomeLog& outcomes_;
  Responder& responder_;
  const NodeCopier& copier_;  // the names copies under way will take
};

}  // namespace mcd
