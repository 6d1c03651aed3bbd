// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What a client remembers of the references it holds, to give each one back the cheapest way
// that is right, and only one of its own kind (Whose): the tensors it created, with the refcount
// it last saw of each (one it last saw at 1 has its release sent to the server at once, as the
// last one most likely is), and the epoch each reference it took was taken in (a reference taken
// before Redis lost the hash must not give back another's: TensorRecord::epoch). Bounded: past
// the bound a tensor is not tracked, and its release is as a tool's (Whose::kUnknown: the
// holder's own first, else one bound to nobody), which is right unless another client of the
// same process holds references to the same tensor. No Redis, no I/O. Used by one Client, so by
// one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace mcd {

class ReferenceBook {
 public:
  // How many tensors each of the two maps tracks at most.
  static constexpr size_t kMax = 1 << 16;

  // This client created `name`, whose refcount is now `refcount`.
  void Created(const std::string& name, int64_t refcount);
  // This client took a reference to `name` in hash epoch `epoch`, leaving `refcount`.
  void Took(const std::string& name, int64_t refcount, std::string epoch);
  // The refcount of `name` as this client last saw it; at 0 (or after a failed release) a
  // created tensor is no longer tracked. Only a hint: any count is right for the server's delete.
  void Saw(const std::string& name, int64_t refcount);

  // How to give one reference to `name` back. `epoch`: that of the oldest reference this client
  // took and has not given back, which it then stops tracking; `any_epoch` when it holds none
  // it took (the creator's is the one a hash put back keeps, and any other is not known here).
  // `last`: a tensor it created, last seen at refcount 1, with no reference of its own taken:
  // most likely the last reference, which only the server's delete command gives back.
  // `whose`: the reference given back is one this client took (kTaken), else, of a tensor it
  // created, its creator's (kCreated), else not known (kUnknown: a tensor it neither took nor
  // made, or one past the bound). A client gives back only what it holds (holders.lua).
  enum class Whose { kUnknown, kTaken, kCreated };
  struct Release {
    std::string epoch;
    bool last = false;
    Whose whose = Whose::kUnknown;
  };
  Release PlanRelease(const std::string& name, const std::string& any_epoch);
  // A release planned by PlanRelease was refused and changed nothing (not_held): the reference
  // it planned to give back is the client's to give back again, of the same kind.
  void Refused(const std::string& name, Release plan);

  // Tracked tensors, for tests: created ones, and ones with references taken.
  size_t created_tracked() const { return seen_refcount_.size(); }
  size_t taken_tracked() const { return taken_epochs_.size(); }

 private:
  std::unordered_map<std::string, int64_t> seen_refcount_;  // created tensors, by name
  // The epoch of each reference taken and not given back, oldest first, by name.
  std::unordered_map<std::string, std::vector<std::string>> taken_epochs_;
};

}  // namespace mcd
