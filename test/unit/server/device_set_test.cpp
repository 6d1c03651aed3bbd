// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// DeviceSet (server/device_set.h) on host memory only: what it serves and says in the heartbeat,
// allocations and frees on the host worker, and frees deferred past the holds of a copy.
#include "server/device_set.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <optional>

#include "server/server_options.h"
#include "test_support.h"

namespace mcd {
namespace {

class DeviceSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = "/mcd-unit-" + std::to_string(getpid()) + "-";
    opt_.all_devices = false;  // and no devices named: host memory only
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
  Allocation HostAllocation(uint64_t bytes) {
    auto a = set_->Allocate(kHostDevice, bytes, true);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? a.value() : Allocation{};
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

}  // namespace
}  // namespace mcd
