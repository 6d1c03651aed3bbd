// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Client's waits (waits.cpp) over a real redis-server and a real mcd-serve on host memory, as the
// tools' --wait runs them: a wait that ends when the tensor appears (with its bytes), a wait for a
// release that ends when the tensor is freed, each timing out with kTimeout and a message that
// says what was waited for, and no wait where the server keeps no events.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "../../tools/lifecycle_fixture.h"

namespace mcd {
namespace {

using Clock = std::chrono::steady_clock;

class Waits : public Lifecycle {
 protected:
  // A u8[4096] host tensor filled with `data` by another client.
  void CreateFilled(const std::string& name, const std::string& data) {
    auto maker = ConnectClient();
    ASSERT_NE(maker, nullptr);
    CreateSpec spec = HostSpec(name);
    spec.shape = {static_cast<int64_t>(data.size())};
    spec.contents = data.data();
    spec.contents_bytes = data.size();
    auto created = maker->Create(spec);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
  }
  static long long MsSince(Clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  }
};

TEST_F(Waits, AGetWaitEndsWhenTheTensorAppearsWithItsBytes) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(client->Stat("later").status().code(), ErrorCode::kNotFound);
  const std::string data = test::RandomBytes(4096, 41);
  std::thread maker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CreateFilled("later", data);
  });
  auto start = Clock::now();
  auto view = client->GetWhenReady("later", 60000, /*take_reference=*/true);
  long long waited = MsSince(start);
  maker.join();
  ASSERT_TRUE(view.ok()) << view.status().ToString() << ServeLog();
  EXPECT_GE(waited, 250) << "the wait ended before the tensor was made";
  EXPECT_EQ(view->record.refcount, 2) << "the creator's and this wait's";
  std::string got(data.size(), '\0');
  ASSERT_TRUE(client->CopyToHost(view.value(), got.data(), got.size()).ok());
  EXPECT_TRUE(got == data) << "the wait got other bytes than were written";
  ASSERT_TRUE(client->Release("later").ok());
}

TEST_F(Waits, AnOpenWaitTakesNoReference) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  const std::string data = test::RandomBytes(512, 42);
  std::thread maker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CreateFilled("opened", data);
  });
  auto view = client->GetWhenReady("opened", 60000, /*take_reference=*/false);
  maker.join();
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_FALSE(view->referenced);
  std::string got(data.size(), '\0');
  ASSERT_TRUE(client->CopyToHost(view.value(), got.data(), got.size()).ok());
  EXPECT_TRUE(got == data) << "the open got other bytes than were written";
  ASSERT_TRUE(client->Close("opened").ok());
  EXPECT_EQ(client->Stat("opened")->refcount, 1);
}

TEST_F(Waits, AGetWaitForATensorThatNeverComesTimesOut) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  auto start = Clock::now();
  auto view = client->GetWhenReady("never", 700, /*take_reference=*/true);
  long long waited = MsSince(start);
  ASSERT_FALSE(view.ok());
  EXPECT_EQ(view.status().code(), ErrorCode::kTimeout);
  EXPECT_NE(view.status().message().find("tensor 'never' was not ready within 0.7 s"),
            std::string::npos)
      << view.status().message();
  EXPECT_GE(waited, 650) << "gave up before its time";
  EXPECT_LT(waited, 30000) << "waited far past its time";
}

TEST_F(Waits, AFreeWaitEndsWhenTheLastReferenceGoes) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  auto created = client->Create(HostSpec("freed"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto holder = ConnectClient();
  ASSERT_NE(holder, nullptr);
  ASSERT_TRUE(holder->Get("freed").ok());
  ASSERT_TRUE(client->Release("freed").ok());  // the holder's reference is left
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(holder->Release("freed").ok());
  });
  auto start = Clock::now();
  Status freed = client->WaitFreed("freed", created->ctime_ms, 60000);
  long long waited = MsSince(start);
  release.join();
  ASSERT_TRUE(freed.ok()) << freed.ToString();
  EXPECT_GE(waited, 250) << "the wait ended while a reference was held";
  EXPECT_EQ(client->Stat("freed").status().code(), ErrorCode::kNotFound);
}

TEST_F(Waits, AFreeWaitOnAHeldTensorTimesOutSayingHowManyReferencesAreLeft) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  auto created = client->Create(HostSpec("held"));
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(client->Get("held").ok());
  Status freed = client->WaitFreed("held", created->ctime_ms, 500);
  EXPECT_EQ(freed.code(), ErrorCode::kTimeout);
  EXPECT_NE(freed.message().find("tensor 'held' still had 2 reference(s) after 0.5 s"),
            std::string::npos)
      << freed.message();
  ASSERT_TRUE(client->Release("held").ok());
  ASSERT_TRUE(client->Release("held").ok());
}

// Another tensor made under the name meanwhile: the one waited for is gone.
TEST_F(Waits, AFreeWaitForATensorWhoseNameWasTakenAgainEndsAtOnce) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  auto created = client->Create(HostSpec("renamed"));
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(client->WaitFreed("renamed", created->ctime_ms - 1, 60000).ok());
  ASSERT_TRUE(client->Release("renamed").ok());
}

class WaitsWithoutEvents : public Lifecycle {
 protected:
  void SetUp() override {
    node_ = "w" + std::to_string(getpid());
    StartServer({"--event-history", "0"});
  }
};

TEST_F(WaitsWithoutEvents, AWaitIsRefusedWhereTheServerKeepsNoEvents) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  auto view = client->GetWhenReady("any", 3000, true);
  EXPECT_EQ(view.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(view.status().message().find("--event-history"), std::string::npos)
      << view.status().message();
  EXPECT_EQ(client->WaitFreed("any", 1, 3000).code(), ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace mcd
