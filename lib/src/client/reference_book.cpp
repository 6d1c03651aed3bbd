// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// ReferenceBook (reference_book.h): the client's memory of its references. The client's thread.
#include "client/reference_book.h"

#include <utility>

namespace mcd {

void ReferenceBook::Created(const std::string& name, int64_t refcount) {
  if (seen_refcount_.size() < kMax) seen_refcount_[name] = refcount;
}

void ReferenceBook::Took(const std::string& name, int64_t refcount, std::string epoch) {
  Saw(name, refcount);
  if (taken_epochs_.size() < kMax || taken_epochs_.count(name) != 0)
    taken_epochs_[name].push_back(std::move(epoch));
}

void ReferenceBook::Saw(const std::string& name, int64_t refcount) {
  auto seen = seen_refcount_.find(name);
  if (seen == seen_refcount_.end()) return;
  if (refcount <= 0) {
    seen_refcount_.erase(seen);
  } else {
    seen->second = refcount;
  }
}

ReferenceBook::Release ReferenceBook::PlanRelease(const std::string& name,
                                                  const std::string& any_epoch) {
  Release plan;
  plan.epoch = any_epoch;
  auto taken = taken_epochs_.find(name);
  auto seen = seen_refcount_.find(name);
  if (taken != taken_epochs_.end()) {
    plan.epoch = std::move(taken->second.front());
    plan.whose = Whose::kTaken;
    taken->second.erase(taken->second.begin());
    if (taken->second.empty()) taken_epochs_.erase(taken);
  } else if (seen != seen_refcount_.end()) {
    plan.whose = Whose::kCreated;
    plan.last = seen->second <= 1;
  }
  return plan;
}

void ReferenceBook::Refused(const std::string& name, Release plan) {
  if (plan.whose != Whose::kTaken) return;  // a created tensor's stays tracked (Saw is not told)
  std::vector<std::string>& epochs = taken_epochs_[name];
  epochs.insert(epochs.begin(), std::move(plan.epoch));
}

}  // namespace mcd
