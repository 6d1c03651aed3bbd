// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// GpuWorker: the single-thread GPU executor of the design, one per device.
//
// Every CUDA call for a device runs on that device's worker thread, in FIFO order, on the one
// stream the worker created on its own thread. Callers on any thread hand it a job and block until
// the job has run (SubmitAndWait). Jobs report failure through codes; an exception thrown by a job
// is caught on the worker and turned into ErrorCode::kInternal.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "memcuda/export.h"
#include "memcuda/protocol.h"
#include "memcuda/status.h"

struct CUstream_st;  // cudaStream_t without pulling CUDA headers into every client

namespace mcd {

// GPU state owned by one worker thread: its device's context, its stream, and what must be
// released with them. Only ever touched from jobs running on that worker; never stored or used
// elsewhere.
class MCD_API DeviceContext {
 public:
  explicit DeviceContext(int device) : device_(device) {}
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  ~DeviceContext();

  int device() const noexcept { return device_; }
  bool is_host() const noexcept { return device_ == kHostDevice; }

  // Binds the device to the worker thread and creates the stream, once. Returns kNoDevice when
  // the machine has no such CUDA device (or no driver), kCudaError otherwise; the failure is
  // remembered and returned again. Host contexts return kNoDevice.
  Status EnsureGpu();
  // True once EnsureGpu() has succeeded (until Reset); readable from any thread.
  bool gpu_up() const noexcept { return gpu_up_.load(std::memory_order_acquire); }
  // The worker's stream; valid only after EnsureGpu() succeeded.
  CUstream_st* stream() const noexcept { return stream_; }

  // Cleanup hooks run by Reset() before the stream is destroyed, newest first (allocators
  // register theirs: unregister interop, release caches). Worker thread only.
  void AddResetHook(std::function<void()> hook) { reset_hooks_.push_back(std::move(hook)); }

  // Releases everything in one order: drain the stream, run the hooks (interop
  // registrations, allocator caches, graphics resources), destroy the stream. Idempotent.
  void Reset() noexcept;

 private:
  int device_;
  bool gpu_tried_ = false;
  Status gpu_status_;
  CUstream_st* stream_ = nullptr;
  std::atomic<bool> gpu_up_{false};
  std::deque<std::function<void()>> reset_hooks_;
};

class MCD_API GpuWorker {
 public:
  // `device` is a CUDA ordinal or kHostDevice. The thread starts lazily on the first job.
  explicit GpuWorker(int device);
  GpuWorker(const GpuWorker&) = delete;
  GpuWorker& operator=(const GpuWorker&) = delete;
  // Stops (drains the queue, resets the context, joins).
  ~GpuWorker();

  int device() const noexcept { return device_; }

  // Starts the worker thread now rather than on the first job. Idempotent; kStopped after Stop().
  Status Start();

  // Runs `job` on the worker thread with its DeviceContext and waits for it. Callable from any
  // thread. Returns the job's Status; kStopped (at once) after Stop(); kWouldDeadlock when called
  // from a job of this same worker; kInternal when the job threw.
  Status Call(std::function<Status(DeviceContext&)> job);

  // Queues `job` and returns at once (kStopped after Stop()); nobody waits for it, so the job
  // reports its own outcome. Jobs still run in FIFO order with those of Call().
  Status Post(std::function<Status(DeviceContext&)> job);

  // Runs `fn` on the worker thread and returns its int32_t code
  // (an ErrorCode value). Same rules as Call().
  int32_t SubmitAndWait(std::function<int32_t()> fn);

  // Stops taking jobs, runs every job already queued, resets the DeviceContext on the worker
  // thread and joins it. Idempotent; safe from any thread except the worker itself.
  void Stop();

  // True when the calling thread is this worker's thread.
  bool OnWorkerThread() const noexcept;

  // True once a job has brought up this worker's CUDA device (DeviceContext::EnsureGpu).
  bool GpuUp() const noexcept { return context_.gpu_up(); }

 private:
  void Loop();
  Status StartLocked();
  std::packaged_task<Status()> Wrap(std::function<Status(DeviceContext&)> job);
  Status Enqueue(std::packaged_task<Status()> task);

  const int device_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<Status()>> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), readable without the lock (polling)
  bool stopping_ = false;
  bool started_ = false;
  std::thread thread_;
  std::thread::id thread_id_;
  DeviceContext context_;  // touched only on thread_
};

}  // namespace mcd
