// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// DeviceSet (server/device_set.h) on host memory only: what it serves and says in the heartbeat,
// allocations and frees on the host worker, frees deferred past the holds of a copy, and the
// host ready stock (WithHostStock, alloc/host_stock.cpp).
#include "server/device_set.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <optional>

#include "alloc/allocator.h"
#include "memcuda/unique_fd.h"
#include "server/server_options.h"
#include "test_support.h"

namespace mcd {
namespace {

class DeviceSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = "/mcd-unit-" + std::to_string(getpid()) + "-";
    opt_.all_devices = false;  // and no devices named: host memory only
    Reopen();
  }
  void Reopen() {
    set_.reset();
    auto set = DeviceSet::Open(DeviceSetOptionsOf(opt_), prefix_);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    set_ = std::move(set).value();
  }
  void TearDown() override {
    set_.reset();
    for (const std::string& name : test::ShmObjects(prefix_.substr(1)))
      shm_unlink(("/" + name).c_str());
  }
  static bool ShmExists(const std::string& name) {
    return access(("/dev/shm" + name).c_str(), F_OK) == 0;
  }
  // `zero` false: a create that writes every byte itself (a copy, a fill), which the host
  // ready stock serves.
  Allocation HostAllocation(uint64_t bytes, bool zero = true) {
    auto a = set_->Allocate(kHostDevice, bytes, zero);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? a.value() : Allocation{};
  }

  // The objects of this test's server other than those named, with their sizes and the bytes
  // of pages they have (st_blocks).
  struct Object {
    std::string name;  // as a handle names it: "/..."
    uint64_t size = 0, pages = 0;
  };
  std::vector<Object> OtherObjects(const std::vector<std::string>& handles) {
    std::vector<Object> out;
    for (const std::string& file : test::ShmObjects(prefix_.substr(1))) {
      std::string name = "/" + file;
      if (std::find(handles.begin(), handles.end(), name) != handles.end()) continue;
      struct stat st {};
      if (stat(("/dev/shm" + name).c_str(), &st) != 0) continue;
      out.push_back(
          {name, static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_blocks) * 512});
    }
    return out;
  }
  // The bytes of host allocation `a`, read through a mapping of its object.
  static std::string BytesOf(const Allocation& a) {
    auto mapped = OpenHostShm(a.ipc_handle, a.bytes, 0);
    EXPECT_TRUE(mapped.ok()) << mapped.status().ToString();
    if (!mapped.ok()) return "";
    std::string bytes(static_cast<const char*>(mapped.value()), a.bytes);
    EXPECT_TRUE(CloseHostShm(mapped.value(), a.bytes, 0).ok());
    return bytes;
  }
  static void Write(const Allocation& a, const std::string& bytes) {
    auto mapped = OpenHostShm(a.ipc_handle, a.bytes, 0);
    ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
    std::memcpy(mapped.value(), bytes.data(), bytes.size());
    ASSERT_TRUE(CloseHostShm(mapped.value(), a.bytes, 0).ok());
  }

  ServerOptions opt_;
  std::string prefix_;
  std::unique_ptr<DeviceSet> set_;
};

TEST_F(DeviceSetTest, ServesHostMemoryOnlyAndSaysSo) {
  EXPECT_TRUE(set_->Serves(kHostDevice));
  EXPECT_FALSE(set_->Serves(0));
  EXPECT_EQ(set_->gpu_count(), 0u);
  EXPECT_EQ(set_->devices_text(), "cpu");
  EXPECT_EQ(set_->allocator_text(), "cpu:host_shm");
  EXPECT_EQ(set_->PrimerText(IpcKind::kCudaIpc), "");
  EXPECT_EQ(set_->PoolFdText(), "");
  EXPECT_EQ(set_->ReadyBytes(), 0u);
  EXPECT_EQ(set_->PoolUsedBytes(), 0u);
  // GPU-only services refuse host memory.
  char byte = 0;
  std::optional<Status> copied;
  set_->CopyOnWorker(kHostDevice, &byte, &byte, 1, cudaMemcpyDeviceToHost,
                     [&](Status s) { copied = std::move(s); });
  ASSERT_TRUE(copied.has_value()) << "told at once";
  EXPECT_EQ(copied->code(), ErrorCode::kNoDevice);
  EXPECT_EQ(set_->PinnedBuffer(kHostDevice, 1).status().code(), ErrorCode::kNoDevice);
}

TEST_F(DeviceSetTest, AllocatesAnObjectOfTheNodeAndFreesIt) {
  Allocation a = HostAllocation(4096);
  EXPECT_EQ(a.ipc_kind, IpcKind::kHostShm);
  EXPECT_EQ(a.bytes, 4096u);
  ASSERT_EQ(a.ipc_handle.rfind(prefix_, 0), 0u) << a.ipc_handle;
  EXPECT_TRUE(ShmExists(a.ipc_handle));
  ASSERT_TRUE(set_->Free(kHostDevice, a).ok());
  EXPECT_FALSE(ShmExists(a.ipc_handle));
  // A posted free tells its outcome on the worker.
  Allocation b = HostAllocation(64);
  std::atomic<int> told{0};
  ASSERT_TRUE(set_->Free(kHostDevice, b, [&](const Status& s) { told = s.ok() ? 1 : 2; }).ok());
  ASSERT_TRUE(test::WaitFor([&] { return told != 0; }, 30000));
  EXPECT_EQ(told, 1);
  EXPECT_FALSE(ShmExists(b.ipc_handle));
}

TEST_F(DeviceSetTest, AFreeUnderHoldsRunsWhenTheLastHoldGoes) {
  // Holds are keyed by address; a host allocation has none, so the test gives each one.
  char addresses[3];
  Allocation held = HostAllocation(64), other = HostAllocation(64), flush = HostAllocation(64);
  held.ptr = &addresses[0];
  other.ptr = &addresses[1];
  flush.ptr = &addresses[2];
  auto first = set_->Hold(kHostDevice, held);
  auto second = set_->Hold(kHostDevice, held);
  std::atomic<int> told{0};
  ASSERT_TRUE(set_->Free(kHostDevice, held, [&](const Status& s) { told = s.ok() ? 1 : 2; }).ok());
  ASSERT_TRUE(set_->Free(kHostDevice, other).ok());  // another address: freed at once
  EXPECT_FALSE(ShmExists(other.ipc_handle));
  EXPECT_TRUE(ShmExists(held.ipc_handle));
  first();
  // A free waited for on the worker runs after anything the hold's end could have posted.
  ASSERT_TRUE(set_->Free(kHostDevice, flush).ok());
  EXPECT_TRUE(ShmExists(held.ipc_handle));
  EXPECT_EQ(told, 0);
  second();
  ASSERT_TRUE(test::WaitFor([&] { return told != 0; }, 30000));
  EXPECT_EQ(told, 1);
  EXPECT_FALSE(ShmExists(held.ipc_handle));
}

TEST_F(DeviceSetTest, FreeAllFreesEveryEntryOfTheDevicesItServes) {
  Entry a, b, gpu;
  a.allocation = HostAllocation(16);
  b.allocation = HostAllocation(16);
  gpu.record.device = 0;  // not served here: skipped
  std::map<int, std::vector<const Entry*>> by_device = {{kHostDevice, {&a, &b}}, {0, {&gpu}}};
  EXPECT_EQ(set_->FreeAll(by_device), 2u);
  EXPECT_FALSE(ShmExists(a.allocation.ipc_handle));
  EXPECT_FALSE(ShmExists(b.allocation.ipc_handle));
}

TEST_F(DeviceSetTest, AHostSizeCreatedIsStockedWithItsPagesAndTheNextCreateTakesIt) {
  constexpr uint64_t kBytes = 4 << 20;
  Allocation first = HostAllocation(kBytes, false);
  ASSERT_TRUE(test::WaitFor([&] { return set_->ReadyBytes() == kBytes; }, 30000))
      << set_->ReadyBytes();
  std::vector<Object> stocked = OtherObjects({first.ipc_handle});
  ASSERT_EQ(stocked.size(), 1u);
  EXPECT_EQ(stocked[0].size, kBytes);
  EXPECT_GE(stocked[0].pages, kBytes) << "the stocked object's pages are made ahead";
  Allocation second = HostAllocation(kBytes, false);
  EXPECT_EQ(second.ipc_handle, stocked[0].name) << "the create took the stocked object";
  EXPECT_EQ(second.bytes, kBytes);
  EXPECT_EQ(BytesOf(second), std::string(kBytes, '\0'));
  // Two alive at once now: the stock makes one more for a third.
  ASSERT_TRUE(test::WaitFor([&] { return set_->ReadyBytes() == kBytes; }, 30000));
  EXPECT_EQ(OtherObjects({first.ipc_handle, second.ipc_handle}).size(), 1u);
  ASSERT_TRUE(set_->Free(kHostDevice, first).ok());
  ASSERT_TRUE(set_->Free(kHostDevice, second).ok());
  EXPECT_FALSE(ShmExists(second.ipc_handle));
  // A server that stops gives back what it held ready.
  set_.reset();
  EXPECT_TRUE(test::ShmObjects(prefix_.substr(1)).empty());
}

TEST_F(DeviceSetTest, AFreedHostTensorsObjectIsNeverHandedOutAgain) {
  constexpr uint64_t kBytes = 1 << 20;
  Allocation used = HostAllocation(kBytes, false);
  ASSERT_NO_FATAL_FAILURE(Write(used, test::RandomBytes(kBytes, 11)));
  ASSERT_TRUE(set_->Free(kHostDevice, used).ok());
  EXPECT_FALSE(ShmExists(used.ipc_handle)) << "unlinked at its free, not stocked";
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(test::WaitFor([&] { return set_->ReadyBytes() == kBytes; }, 30000));
    Allocation next = HostAllocation(kBytes, false);
    EXPECT_NE(next.ipc_handle, used.ipc_handle);
    EXPECT_EQ(BytesOf(next), std::string(kBytes, '\0')) << "create " << i;
    ASSERT_NO_FATAL_FAILURE(Write(next, test::RandomBytes(kBytes, 12 + i)));
    ASSERT_TRUE(set_->Free(kHostDevice, next).ok());
  }
}

TEST_F(DeviceSetTest, TheHostStockGoesBackOnceItsSizeIsNoLongerCreated) {
  constexpr uint64_t kBytes = 2 << 20;
  Allocation a = HostAllocation(kBytes, false);
  ASSERT_TRUE(test::WaitFor([&] { return set_->ReadyBytes() == kBytes; }, 30000));
  ASSERT_TRUE(set_->Free(kHostDevice, a).ok());
  set_->TrimReadyStock();  // still in demand: kept
  usleep(200 * 1000);
  EXPECT_EQ(set_->ReadyBytes(), kBytes);
  usleep((kReadyIdleMs + 100) * 1000);
  set_->TrimReadyStock();
  ASSERT_TRUE(test::WaitFor([&] { return test::ShmObjects(prefix_.substr(1)).empty(); }, 30000));
  EXPECT_EQ(set_->ReadyBytes(), 0u);
}

TEST_F(DeviceSetTest, TheHostStockKeepsToItsLimit) {
  opt_.ready_max_bytes = 4 << 20;  // in all; sizes up to 2 MiB
  ASSERT_NO_FATAL_FAILURE(Reopen());
  // Too large a size: none made for it (the 1 MiB after it is, and the stock makes its blocks
  // one after another, so that its block says the stock has looked at the sizes before).
  Allocation large = HostAllocation(3 << 20, false), marker = HostAllocation(1 << 20, false);
  ASSERT_TRUE(test::WaitFor([&] { return set_->ReadyBytes() == (1u << 20); }, 30000));
  std::vector<Object> stocked = OtherObjects({large.ipc_handle, marker.ipc_handle});
  ASSERT_EQ(stocked.size(), 1u);
  EXPECT_EQ(stocked[0].size, 1u << 20);
  // 1 MiB held: a 2 MiB block fits beside it, then nothing more (a 1.5 MiB one would pass 4 MiB).
  Allocation two = HostAllocation(2 << 20, false);
  ASSERT_TRUE(test::WaitFor([&] { return set_->ReadyBytes() == (3u << 20); }, 30000));
  Allocation half = HostAllocation(3 << 19, false);
  Allocation marker2 = HostAllocation(1 << 20, false);  // takes the 1 MiB block; one more is due
  ASSERT_TRUE(test::WaitFor([&] { return set_->ReadyBytes() == (3u << 20); }, 30000));
  usleep(300 * 1000);
  EXPECT_EQ(set_->ReadyBytes(), 3u << 20);
  for (const Object& object : OtherObjects({large.ipc_handle, marker.ipc_handle, two.ipc_handle,
                                            half.ipc_handle, marker2.ipc_handle})) {
    EXPECT_NE(object.size, 3u << 19) << "a block past the limit";
  }
  for (const Allocation& a : {large, marker, two, half, marker2})
    EXPECT_TRUE(set_->Free(kHostDevice, a).ok());
}

TEST_F(DeviceSetTest, NoHostStockForPlainCreatesNorWithReadyMaxZero) {
  // A plain create (zeroed, its pages made as they are touched) is not stocked for: a create of
  // another size that is, made after it, finds its block made, and none of the plain size.
  Allocation plain = HostAllocation(1 << 20, true);
  Allocation filled = HostAllocation(2 << 20, false);
  ASSERT_TRUE(test::WaitFor([&] { return set_->ReadyBytes() == (2u << 20); }, 30000));
  std::vector<Object> stocked = OtherObjects({plain.ipc_handle, filled.ipc_handle});
  ASSERT_EQ(stocked.size(), 1u);
  EXPECT_EQ(stocked[0].size, 2u << 20);
  EXPECT_TRUE(set_->Free(kHostDevice, plain).ok());
  EXPECT_TRUE(set_->Free(kHostDevice, filled).ok());
  // --ready-max 0: no stock at all.
  opt_.ready_max_bytes = 0;
  opt_.ready_max_fraction = 0;
  ASSERT_NO_FATAL_FAILURE(Reopen());
  Allocation alone = HostAllocation(1 << 20, false);
  usleep(300 * 1000);
  EXPECT_EQ(set_->ReadyBytes(), 0u);
  EXPECT_TRUE(OtherObjects({alone.ipc_handle}).empty());
  EXPECT_TRUE(set_->Free(kHostDevice, alone).ok());
}

}  // namespace
}  // namespace mcd
