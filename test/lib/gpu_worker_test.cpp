// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/gpu_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/spin.h"

namespace mcd {
namespace {

TEST(SpinUntil, ReturnsAsSoonAsReadyAndGivesUpAfterItsBudget) {
  int calls = 0;
  EXPECT_TRUE(SpinUntil([&] { return ++calls == 3; }, 1000000));
  EXPECT_EQ(calls, 3);  // polled until ready, not for the whole second

  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(SpinUntil([] { return false; }, 2000));
  auto spent = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(spent, std::chrono::microseconds(2000));
  EXPECT_LT(spent, std::chrono::seconds(1));

  calls = 0;
  EXPECT_FALSE(SpinUntil([&] { return ++calls > 5; }, 0));  // no budget: asked once
  EXPECT_EQ(calls, 1);
}

TEST(SpinUntil, TheBudgetComesFromMcdSpinUs) {
  const char* env = std::getenv("MCD_SPIN_US");
  if (env != nullptr) {
    EXPECT_EQ(SpinMicros(), std::atoi(env));
  } else {
    EXPECT_GE(SpinMicros(), 0);
  }
}

TEST(SpinUntil, TheServersSocketSpinFollowsTheProcessWidePolicy) {
  const char* env = std::getenv("MCD_SERVER_SPIN_US");
  if (env != nullptr) {
    EXPECT_EQ(ServerSpinMicros(), std::atoi(env));
  } else {
    // Off with MCD_SPIN_US=0 and on small machines, where nothing polls.
    EXPECT_EQ(ServerSpinMicros(), SpinMicros() > 0 ? kServerSpinMicros : 0);
  }
}

TEST(GpuWorker, FifoOrderWithEightSubmitters) {
  GpuWorker worker(kHostDevice);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 12500;  // 100,000 jobs
  std::vector<std::vector<int>> seen(kThreads);
  std::thread::id worker_thread;
  ASSERT_TRUE(worker
                  .Call([&](DeviceContext&) {
                    worker_thread = std::this_thread::get_id();
                    return Status::Ok();
                  })
                  .ok());
  std::atomic<int> off_thread{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        Status s = worker.Call([&, t, i](DeviceContext&) {
          if (std::this_thread::get_id() != worker_thread) off_thread++;
          seen[static_cast<size_t>(t)].push_back(i);  // worker thread only: no lock needed
          return Status::Ok();
        });
        ASSERT_TRUE(s.ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(off_thread.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[static_cast<size_t>(t)].size(), static_cast<size_t>(kPerThread));
    for (int i = 0; i < kPerThread; ++i)
      ASSERT_EQ(seen[static_cast<size_t>(t)][static_cast<size_t>(i)], i);
  }
}

TEST(GpuWorker, SubmitAndWaitReturnsTheJobsCode) {
  GpuWorker worker(kHostDevice);
  EXPECT_EQ(worker.SubmitAndWait([] { return 0; }), 0);
  EXPECT_EQ(worker.SubmitAndWait([] { return static_cast<int32_t>(ErrorCode::kNotFound); }),
            static_cast<int32_t>(ErrorCode::kNotFound));
}

TEST(GpuWorker, StopWhileOthersSubmitLosesNothing) {
  for (int round = 0; round < 20; ++round) {
    GpuWorker worker(kHostDevice);
    std::atomic<int> ran{0}, ok{0}, stopped{0}, other{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 500; ++i) {
          Status s = worker.Call([&](DeviceContext&) {
            ran++;
            return Status::Ok();
          });
          if (s.ok())
            ok++;
          else if (s.code() == ErrorCode::kStopped)
            stopped++;
          else
            other++;
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200 * round));
    worker.Stop();
    for (auto& th : threads) th.join();
    EXPECT_EQ(other.load(), 0);
    EXPECT_EQ(ok.load() + stopped.load(), 8 * 500);
    EXPECT_EQ(ran.load(), ok.load());  // every accepted job ran, no rejected one did
  }
}

TEST(GpuWorker, PostedJobsRunInOrderWithCallsAndStopRunsTheRest) {
  GpuWorker worker(kHostDevice);
  std::vector<int> order;  // touched only by jobs, on the worker thread
  std::atomic<bool> release{false};
  // The first posted job holds the worker, so Post must return before any job has run.
  ASSERT_TRUE(worker
                  .Post([&](DeviceContext&) {
                    while (!release) std::this_thread::yield();
                    order.push_back(1);
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_TRUE(worker
                  .Post([&](DeviceContext&) {
                    order.push_back(2);
                    return Status(ErrorCode::kInternal, "nobody waits for this");
                  })
                  .ok());
  release = true;
  ASSERT_TRUE(worker
                  .Call([&](DeviceContext&) {
                    order.push_back(3);
                    return Status::Ok();
                  })
                  .ok());
  for (int i = 4; i <= 100; ++i) {
    ASSERT_TRUE(worker
                    .Post([&order, i](DeviceContext&) {
                      order.push_back(i);
                      return Status::Ok();
                    })
                    .ok());
  }
  worker.Stop();  // drains what was posted
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i + 1);
  EXPECT_EQ(worker.Post([](DeviceContext&) { return Status::Ok(); }).code(), ErrorCode::kStopped);
}

TEST(GpuWorker, SubmitAfterStopFailsAtOnceAndStopIsIdempotent) {
  GpuWorker worker(kHostDevice);
  ASSERT_TRUE(worker.Start().ok());
  worker.Stop();
  worker.Stop();
  EXPECT_EQ(worker.Call([](DeviceContext&) { return Status::Ok(); }).code(), ErrorCode::kStopped);
  EXPECT_EQ(worker.Start().code(), ErrorCode::kStopped);
}

TEST(GpuWorker, ExceptionsBecomeCodes) {
  GpuWorker worker(kHostDevice);
  Status s = worker.Call([](DeviceContext&) -> Status { throw std::runtime_error("boom"); });
  EXPECT_EQ(s.code(), ErrorCode::kInternal);
  EXPECT_NE(s.message().find("boom"), std::string::npos);
  EXPECT_EQ(worker.SubmitAndWait([]() -> int32_t { throw 42; }),
            static_cast<int32_t>(ErrorCode::kInternal));
  EXPECT_TRUE(worker.Call([](DeviceContext&) { return Status::Ok(); }).ok());  // still serving
}

TEST(GpuWorker, ReentrantWaitIsRefused) {
  GpuWorker worker(kHostDevice);
  Status inner;
  ASSERT_TRUE(worker
                  .Call([&](DeviceContext&) {
                    inner = worker.Call([](DeviceContext&) { return Status::Ok(); });
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(inner.code(), ErrorCode::kWouldDeadlock);
  // A job may still wait on a *different* worker.
  GpuWorker other(kHostDevice);
  Status nested;
  ASSERT_TRUE(worker
                  .Call([&](DeviceContext&) {
                    nested = other.Call([](DeviceContext&) { return Status::Ok(); });
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_TRUE(nested.ok());
}

TEST(GpuWorker, HostWorkerRefusesGpuWork) {
  GpuWorker worker(kHostDevice);
  Status s = worker.Call([](DeviceContext& ctx) { return ctx.EnsureGpu(); });
  EXPECT_EQ(s.code(), ErrorCode::kNoDevice);
}

TEST(GpuWorker, MissingDeviceIsAClearCode) {
  GpuWorker worker(1000);
  Status s = worker.Call([](DeviceContext& ctx) { return ctx.EnsureGpu(); });
  EXPECT_EQ(s.code(), ErrorCode::kNoDevice) << s.ToString();
  EXPECT_TRUE(worker.Call([](DeviceContext&) { return Status::Ok(); }).ok());  // CPU jobs still run
}

}  // namespace
}  // namespace mcd
