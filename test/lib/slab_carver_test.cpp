// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The slab carver's bookkeeping, on plain memory standing in for the device's: size classes,
// blocks that never overlap and name their slab, the empty slab kept per class and no more, the
// fullest slab filled first, and running out of memory. (gpu_test runs it on cudaMalloc.)
#include "alloc/slab_carver.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

namespace mcd {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

class SlabCarverTest : public ::testing::Test {
 protected:
  SlabBackend Backend() {
    return SlabBackend{[this](uint64_t bytes) -> Result<SlabMemory> {
                         if (held_ + bytes > limit_) return Status(ErrorCode::kOutOfMemory, "full");
                         SlabMemory memory;
                         memory.base = std::aligned_alloc(SlabCarver::kAlign, bytes);
                         memory.handle = "slab-" + std::to_string(++made_);
                         held_ += bytes;
                         sizes_[memory.base] = bytes;
                         return memory;
                       },
                       [this](const SlabMemory& memory) {
                         held_ -= sizes_.at(memory.base);
                         sizes_.erase(memory.base);
                         std::free(memory.base);
                         ++freed_;
                       }};
  }
  void TearDown() override { EXPECT_EQ(held_, 0u) << "slabs left allocated"; }

  uint64_t limit_ = UINT64_MAX;
  uint64_t held_ = 0;
  int made_ = 0;
  int freed_ = 0;
  std::map<void*, uint64_t> sizes_;
};

TEST(SlabCarverClasses, RoundUpByAtMostAQuarterToMultiplesOf512) {
  EXPECT_EQ(SlabCarver::ClassOf(1), 512u);
  EXPECT_EQ(SlabCarver::ClassOf(512), 512u);
  EXPECT_EQ(SlabCarver::ClassOf(513), 1024u);
  EXPECT_EQ(SlabCarver::ClassOf(3000), 3072u);
  EXPECT_EQ(SlabCarver::ClassOf(kMiB), kMiB);
  EXPECT_EQ(SlabCarver::ClassOf(kMiB + 1), kMiB + kMiB / 4);
  EXPECT_EQ(SlabCarver::ClassOf(4 * kMiB - 1), 4 * kMiB);
  for (uint64_t bytes = 1; bytes < 8 * kMiB; bytes = bytes * 3 / 2 + 7) {
    uint64_t c = SlabCarver::ClassOf(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % SlabCarver::kAlign, 0u) << bytes;
    if (bytes >= 2 * kKiB) EXPECT_LE(c, bytes + bytes / 4) << bytes;
  }
}

TEST(SlabCarverClasses, SlabsHoldSixteenBlocksWithinTheLimitsOrNothingIsCarved) {
  SlabCarver carver(32 * kMiB, SlabBackend{});
  EXPECT_EQ(carver.SlabBytesOf(512), 2 * kMiB);
  EXPECT_EQ(carver.SlabBytesOf(kMiB), 16 * kMiB);
  EXPECT_EQ(carver.SlabBytesOf(4 * kMiB), 32 * kMiB);  // 8 blocks: the least carved
  EXPECT_EQ(carver.SlabBytesOf(5 * kMiB), 0u);
  EXPECT_TRUE(carver.Carves(4 * kMiB));
  EXPECT_FALSE(carver.Carves(5 * kMiB));
  EXPECT_FALSE(carver.Carves(0));
  SlabCarver off(0, SlabBackend{});
  EXPECT_FALSE(off.Carves(512));
}

TEST_F(SlabCarverTest, BlocksOfOneSlabShareItsHandleAndNeverOverlap) {
  SlabCarver carver(32 * kMiB, Backend());
  std::vector<Allocation> blocks;
  std::set<uint64_t> offsets;
  for (int i = 0; i < 16; ++i) {
    auto block = carver.Take(kMiB - 100, 0);
    ASSERT_TRUE(block.ok()) << block.status().ToString();
    EXPECT_EQ(block->bytes, kMiB - 100);
    EXPECT_EQ(block->ipc_handle, "slab-1");
    EXPECT_EQ(block->offset % kMiB, 0u);
    EXPECT_LT(block->offset, 16 * kMiB);
    EXPECT_TRUE(offsets.insert(block->offset).second) << "offset handed out twice";
    blocks.push_back(std::move(block).value());
  }
  const char* base = static_cast<const char*>(blocks[0].ptr) - blocks[0].offset;
  for (const Allocation& b : blocks) EXPECT_EQ(static_cast<const char*>(b.ptr), base + b.offset);
  EXPECT_EQ(carver.SlabCount(), 1u);
  EXPECT_EQ(carver.EmptySlabBytes(), 0u);
  EXPECT_EQ(carver.FreeBytes(), 0u)
      << "16 blocks fill a slab of 16 (the rounding inside a block is not counted)";
  auto next = carver.Take(kMiB, 0);  // the 17th: a second slab
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->ipc_handle, "slab-2");
  EXPECT_EQ(carver.SlabBytes(), 32 * kMiB);
  EXPECT_EQ(carver.FreeBytes(), 15 * kMiB) << "the second slab's 15 other blocks";
  blocks.push_back(std::move(next).value());
  ASSERT_TRUE(carver.Give(blocks[3]));
  EXPECT_EQ(carver.FreeBytes(), 16 * kMiB);
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i != 3) EXPECT_TRUE(carver.Give(blocks[i]));
  }
  // One empty slab stays for the next take; the other went at once.
  EXPECT_EQ(carver.SlabCount(), 1u);
  EXPECT_EQ(freed_, 1);
  EXPECT_EQ(carver.EmptySlabBytes(), 16 * kMiB) << "the slab kept is held ready";
  EXPECT_EQ(carver.FreeBytes(), 16 * kMiB);
  auto again = carver.Take(kMiB, 500);  // the kept slab serves the next take
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(carver.EmptySlabBytes(), 0u);
  EXPECT_EQ(made_, 2);
  ASSERT_TRUE(carver.Give(again.value()));
  carver.Trim(false, 1000, 2000);  // used within the idle time: kept
  EXPECT_EQ(carver.SlabCount(), 1u);
  carver.Trim(false, 5000, 2000);
  EXPECT_EQ(carver.SlabCount(), 0u);
  EXPECT_EQ(carver.SlabBytes(), 0u);
  EXPECT_EQ(carver.EmptySlabBytes(), 0u);
  EXPECT_EQ(carver.FreeBytes(), 0u);
}

TEST_F(SlabCarverTest, TheFullestSlabIsFilledFirstSoThatOthersEmpty) {
  SlabCarver carver(32 * kMiB, Backend());
  std::vector<Allocation> first, second;
  for (int i = 0; i < 16; ++i) first.push_back(carver.Take(kMiB, 0).value());
  for (int i = 0; i < 4; ++i) second.push_back(carver.Take(kMiB, 0).value());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(carver.Give(first[i]));
  ASSERT_TRUE(carver.Give(second[0]));  // slab 1: 8 free, slab 2: 13 free
  auto taken = carver.Take(kMiB, 0);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->ipc_handle, "slab-1");
  ASSERT_TRUE(carver.Give(taken.value()));
  for (size_t i = 8; i < first.size(); ++i) ASSERT_TRUE(carver.Give(first[i]));
  for (size_t i = 1; i < second.size(); ++i) ASSERT_TRUE(carver.Give(second[i]));
  carver.Trim(true, 0, 0);
}

TEST_F(SlabCarverTest, SizesOfOneClassShareSlabsAndOtherClassesDoNot) {
  SlabCarver carver(32 * kMiB, Backend());
  auto a = carver.Take(3000, 0).value();
  auto b = carver.Take(3072, 0).value();
  auto c = carver.Take(4096, 0).value();
  EXPECT_EQ(a.ipc_handle, b.ipc_handle);
  EXPECT_NE(a.ipc_handle, c.ipc_handle);
  EXPECT_NE(a.offset, b.offset);
  for (const auto& block : {a, b, c}) EXPECT_TRUE(carver.Give(block));
  carver.Trim(true, 0, 0);
}

TEST_F(SlabCarverTest, ABlockNotCarvedHereIsLeftToTheCaller) {
  SlabCarver carver(32 * kMiB, Backend());
  auto block = carver.Take(kMiB, 0).value();
  Allocation stranger;
  char elsewhere[64];
  stranger.ptr = elsewhere;
  EXPECT_FALSE(carver.Give(stranger));
  Allocation misaligned = block;
  misaligned.ptr = static_cast<char*>(block.ptr) + 512;
  misaligned.offset = block.offset + 512;
  EXPECT_FALSE(carver.Give(misaligned));
  EXPECT_TRUE(carver.Give(block));
  carver.Trim(true, 0, 0);
}

TEST_F(SlabCarverTest, RunningOutFreesOtherClassesEmptySlabsBeforeGivingUp) {
  limit_ = 20 * kMiB;
  SlabCarver carver(32 * kMiB, Backend());
  auto small = carver.Take(4096, 0).value();  // a 2 MiB slab
  ASSERT_TRUE(carver.Give(small));            // kept empty
  auto big = carver.Take(kMiB, 0);            // 16 MiB: fits beside it
  ASSERT_TRUE(big.ok());
  auto other = carver.Take(2 * kMiB, 0);  // 32 MiB: does not fit at all
  EXPECT_EQ(other.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_EQ(carver.SlabCount(), 1u) << "the empty 2 MiB slab was given back trying";
  ASSERT_TRUE(carver.Give(big.value()));
  carver.FreeAll();
  EXPECT_EQ(carver.SlabCount(), 0u);
}

TEST_F(SlabCarverTest, FreeAllTakesSlabsStillInUse) {
  SlabCarver carver(32 * kMiB, Backend());
  (void)carver.Take(kMiB, 0).value();
  (void)carver.Take(8192, 0).value();
  // A 16 MiB slab of 1 MiB blocks and a 2 MiB one of 8 KiB blocks (256 of them), one out of each.
  EXPECT_EQ(carver.FreeBytes(), 18 * kMiB - kMiB - 8192);
  carver.FreeAll();
  EXPECT_EQ(carver.SlabCount(), 0u);
  EXPECT_EQ(carver.EmptySlabBytes(), 0u);
  EXPECT_EQ(carver.SlabBytes(), 0u);
  EXPECT_EQ(carver.FreeBytes(), 0u);
  EXPECT_EQ(freed_, 2);
}

}  // namespace
}  // namespace mcd
