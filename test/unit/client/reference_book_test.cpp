// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// ReferenceBook: which release goes to the server at once (a created tensor last seen at refcount
// 1, with no reference of this client's own taken), and which epoch each release names (the
// oldest reference taken and not given back), within its bound. No Redis: the book is plain
// bookkeeping.
#include "client/reference_book.h"

#include <gtest/gtest.h>

#include <string>

namespace mcd {
namespace {

constexpr const char* kAny = "*";

TEST(ReferenceBook, ACreatedTensorLastSeenAtOneIsReleasedByTheServer) {
  ReferenceBook book;
  book.Created("t", 1);
  ReferenceBook::Release plan = book.PlanRelease("t", kAny);
  EXPECT_TRUE(plan.last);
  EXPECT_EQ(plan.epoch, kAny);
}

TEST(ReferenceBook, ACreatedTensorSeenHigherGoesToTheScriptUntilItIsSeenAtOneAgain) {
  ReferenceBook book;
  book.Created("t", 1);
  book.Saw("t", 3);
  EXPECT_FALSE(book.PlanRelease("t", kAny).last);
  book.Saw("t", 1);
  EXPECT_TRUE(book.PlanRelease("t", kAny).last);
}

TEST(ReferenceBook, ATensorNotCreatedHereIsNeverReleasedByTheServerDirectly) {
  ReferenceBook book;
  book.Saw("other", 1);  // seen without a create: not tracked
  EXPECT_FALSE(book.PlanRelease("other", kAny).last);
  EXPECT_EQ(book.created_tracked(), 0u);
}

TEST(ReferenceBook, ACreatedTensorSeenAtZeroIsNoLongerTracked) {
  ReferenceBook book;
  book.Created("t", 1);
  book.Saw("t", 0);
  EXPECT_EQ(book.created_tracked(), 0u);
  EXPECT_FALSE(book.PlanRelease("t", kAny).last);
}

// A reference this client took names its epoch, oldest first; the creator's own release (the
// one a hash put back keeps) names none and is the server's once no taken one is left.
TEST(ReferenceBook, ReleasesNameTheEpochsOfTakenReferencesOldestFirst) {
  ReferenceBook book;
  book.Created("t", 1);
  book.Took("t", 2, "");
  book.Took("t", 3, "e1");
  ReferenceBook::Release first = book.PlanRelease("t", kAny);
  EXPECT_EQ(first.epoch, "");
  EXPECT_FALSE(first.last) << "a taken reference's release is the script's";
  EXPECT_EQ(first.whose, ReferenceBook::Whose::kTaken);
  book.Saw("t", 2);
  ReferenceBook::Release second = book.PlanRelease("t", kAny);
  EXPECT_EQ(second.epoch, "e1");
  EXPECT_FALSE(second.last);
  EXPECT_EQ(second.whose, ReferenceBook::Whose::kTaken);
  book.Saw("t", 1);
  EXPECT_EQ(book.taken_tracked(), 0u);
  ReferenceBook::Release third = book.PlanRelease("t", kAny);
  EXPECT_EQ(third.epoch, kAny);
  EXPECT_TRUE(third.last);
  EXPECT_EQ(third.whose, ReferenceBook::Whose::kCreated) << "the creator's, bound to nobody";
  EXPECT_EQ(book.PlanRelease("neither", kAny).whose, ReferenceBook::Whose::kUnknown);
}

// Even at a count of 1, a release that gives back a reference this client took is the script's:
// only it checks the epoch (a reference from before Redis lost the hash gives nothing back).
TEST(ReferenceBook, AReleaseOfATakenReferenceIsTheScriptsAtAnyCount) {
  ReferenceBook book;
  book.Created("t", 1);
  book.Took("t", 2, "e");
  book.Saw("t", 1);
  ReferenceBook::Release plan = book.PlanRelease("t", kAny);
  EXPECT_EQ(plan.epoch, "e");
  EXPECT_FALSE(plan.last);
}

TEST(ReferenceBook, TakingAReferenceUpdatesTheRefcountSeenOfACreatedTensor) {
  ReferenceBook book;
  book.Created("t", 1);
  book.Took("t", 2, "");
  (void)book.PlanRelease("t", kAny);  // gives the taken one back; the count stays as seen
  EXPECT_FALSE(book.PlanRelease("t", kAny).last) << "last seen at 2, not 1";
}

TEST(ReferenceBook, PastTheBoundNewTensorsAreNotTrackedButTrackedOnesStillAre) {
  ReferenceBook book;
  for (size_t i = 0; i < ReferenceBook::kMax; ++i) {
    book.Created("c" + std::to_string(i), 1);
    book.Took("g" + std::to_string(i), 1, "e");
  }
  EXPECT_EQ(book.created_tracked(), ReferenceBook::kMax);
  EXPECT_EQ(book.taken_tracked(), ReferenceBook::kMax);
  book.Created("new", 1);
  book.Took("new-taken", 1, "e");
  EXPECT_EQ(book.created_tracked(), ReferenceBook::kMax);
  EXPECT_EQ(book.taken_tracked(), ReferenceBook::kMax);
  EXPECT_FALSE(book.PlanRelease("new", kAny).last);
  EXPECT_EQ(book.PlanRelease("new-taken", kAny).epoch, kAny);
  book.Took("g0", 1, "again");  // one tracked already takes more
  EXPECT_EQ(book.PlanRelease("g0", kAny).epoch, "e");
  EXPECT_EQ(book.PlanRelease("g0", kAny).epoch, "again");
}

// A release refused (not_held: nothing changed) keeps its plan: the next release of the name is
// of the same kind and epoch, never one not known (which would take another kind of reference).
TEST(ReferenceBook, ARefusedReleaseIsPlannedTheSameWayAgain) {
  ReferenceBook book;
  book.Created("t", 2);
  book.Took("t", 2, "e1");
  ReferenceBook::Release taken = book.PlanRelease("t", kAny);
  ASSERT_EQ(taken.whose, ReferenceBook::Whose::kTaken);
  book.Refused("t", taken);
  ReferenceBook::Release again = book.PlanRelease("t", kAny);
  EXPECT_EQ(again.whose, ReferenceBook::Whose::kTaken);
  EXPECT_EQ(again.epoch, "e1");
  ReferenceBook::Release created = book.PlanRelease("t", kAny);
  ASSERT_EQ(created.whose, ReferenceBook::Whose::kCreated);
  book.Refused("t", created);
  EXPECT_EQ(book.PlanRelease("t", kAny).whose, ReferenceBook::Whose::kCreated);
}

}  // namespace
}  // namespace mcd
