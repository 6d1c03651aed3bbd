// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// GPU tests of the worker: the stream belongs to the worker thread, work submitted from several
// threads runs on it in submission order, and an error the library reported does not linger
// there. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "gpu/cuda_check.h"
#include "memcuda/gpu_worker.h"
#include "test_support.h"

namespace mcd {
namespace {

__global__ void AppendKernel(int* log, int* count, int value) {
  int slot = atomicAdd(count, 1);
  log[slot] = value;
}

class GpuWorkerGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(GpuWorkerGpu, StreamIsCreatedAndUsedOnTheWorkerThread) {
  GpuWorker worker(0);
  std::thread::id job_thread;
  int current = -1;
  CUstream_st* stream = nullptr;
  ASSERT_TRUE(worker
                  .Call([&](DeviceContext& ctx) -> Status {
                    Status s = ctx.EnsureGpu();
                    job_thread = std::this_thread::get_id();
                    cudaGetDevice(&current);
                    stream = ctx.stream();
                    return s;
                  })
                  .ok());
  EXPECT_NE(job_thread, std::this_thread::get_id());
  EXPECT_EQ(current, 0);
  EXPECT_NE(stream, nullptr);
}

TEST_F(GpuWorkerGpu, KernelsFromManyThreadsRunInSubmissionOrder) {
  GpuWorker worker(0);
  constexpr int kThreads = 4, kPerThread = 250, kTotal = kThreads * kPerThread;
  int* log = nullptr;
  int* count = nullptr;
  ASSERT_TRUE(worker
                  .Call([&](DeviceContext& ctx) -> Status {
                    Status s = ctx.EnsureGpu();
                    if (!s.ok()) return s;
                    cudaMalloc(&log, kTotal * sizeof(int));
                    cudaMalloc(&count, sizeof(int));
                    cudaMemsetAsync(count, 0, sizeof(int), ctx.stream());
                    return Status::Ok();
                  })
                  .ok());
  std::mutex order_mutex;
  std::vector<int> submitted;  // the order in which the worker enqueued the kernels
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int value = t * kPerThread + i;
        ASSERT_TRUE(worker
                        .Call([&, value](DeviceContext& ctx) -> Status {
                          AppendKernel<<<1, 1, 0, ctx.stream()>>>(log, count, value);
                          {
                            std::lock_guard<std::mutex> lock(order_mutex);
                            submitted.push_back(value);
                          }
                          return cudaGetLastError() == cudaSuccess
                                     ? Status::Ok()
                                     : Status(ErrorCode::kCudaError, "launch");
                        })
                        .ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<int> executed(kTotal, -1);
  ASSERT_TRUE(worker
                  .Call([&](DeviceContext& ctx) -> Status {
                    cudaMemcpyAsync(executed.data(), log, kTotal * sizeof(int),
                                    cudaMemcpyDeviceToHost, ctx.stream());
                    cudaStreamSynchronize(ctx.stream());
                    cudaFree(log);
                    cudaFree(count);
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(executed, submitted);  // one stream: kernels ran one after another, in order
}

// A failed call that the library reports (an IPC open of a handle that names nothing, as a
// client's primer open of a gone server's handle is) must not linger as the worker thread's last
// error, where the next kernel launch's cudaGetLastError() would find it.
TEST_F(GpuWorkerGpu, AReportedErrorDoesNotLingerOnTheWorkerThread) {
  GpuWorker worker(0);
  ASSERT_TRUE(worker
                  .Call([&](DeviceContext& ctx) -> Status {
                    MCD_RETURN_IF_ERROR(ctx.EnsureGpu());
                    cudaIpcMemHandle_t nothing{};
                    void* ptr = nullptr;
                    cudaError_t err =
                        cudaIpcOpenMemHandle(&ptr, nothing, cudaIpcMemLazyEnablePeerAccess);
                    EXPECT_NE(err, cudaSuccess);
                    EXPECT_FALSE(CudaStatus(err, "cudaIpcOpenMemHandle").ok());
                    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
                    int* one = nullptr;
                    EXPECT_EQ(cudaMalloc(&one, sizeof(int)), cudaSuccess);
                    EXPECT_EQ(cudaMemsetAsync(one, 0, sizeof(int), ctx.stream()), cudaSuccess);
                    AppendKernel<<<1, 1, 0, ctx.stream()>>>(one, one, 0);  // count 0: writes slot 0
                    EXPECT_EQ(cudaGetLastError(), cudaSuccess)
                        << "the launch saw the earlier error";
                    EXPECT_EQ(cudaStreamSynchronize(ctx.stream()), cudaSuccess);
                    cudaFree(one);
                    return Status::Ok();
                  })
                  .ok());
}

}  // namespace
}  // namespace mcd
