// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/gpu_worker.h"

#include <cuda_runtime_api.h>

#include <cassert>
#include <exception>

#include "common/spin.h"
#include "gpu/cuda_check.h"

namespace mcd {

DeviceContext::~DeviceContext() { Reset(); }

Status DeviceContext::EnsureGpu() {
  if (is_host()) return Status(ErrorCode::kNoDevice, "device 'cpu' has no CUDA context");
  if (gpu_tried_) return gpu_status_;
  gpu_tried_ = true;
  gpu_status_ = [this]() -> Status {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) {
      cudaGetLastError();
      return Status(ErrorCode::kNoDevice,
                    std::string("no usable NVIDIA GPU on this machine (cudaGetDeviceCount: ") +
                        cudaGetErrorName(err) + ")");
    }
    MCD_CUDA_RETURN(err);
    if (device_ < 0 || device_ >= count) {
      return Status(ErrorCode::kNoDevice, "CUDA device " + std::to_string(device_) +
                                              " does not exist (this machine has " +
                                              std::to_string(count) + ")");
    }
    // The binding and the stream belong to this (the worker) thread for their whole life.
    MCD_CUDA_RETURN(cudaSetDevice(device_));
    cudaStream_t stream = nullptr;
    MCD_CUDA_RETURN(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    stream_ = stream;
    gpu_up_.store(true, std::memory_order_release);
    return Status::Ok();
  }();
  return gpu_status_;
}

void DeviceContext::Reset() noexcept {
  // Teardown order: no outstanding work, then interop registrations and allocator caches (hooks,
  // newest first), then the stream itself.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  while (!reset_hooks_.empty()) {
    auto hook = std::move(reset_hooks_.back());
    reset_hooks_.pop_back();
    try {
      hook();
    } catch (...) {  // a hook must not stop the rest of the teardown
    }
  }
  if (stream_ != nullptr) {
    cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
  gpu_up_.store(false, std::memory_order_release);
  gpu_tried_ = false;
  gpu_status_ = Status::Ok();
}

namespace {
// The worker whose job is running on this thread, to refuse re-entrant waits.
thread_local const GpuWorker* tls_current_worker = nullptr;
}  // namespace

GpuWorker::GpuWorker(int device) : device_(device), context_(device) {}

GpuWorker::~GpuWorker() { Stop(); }

bool GpuWorker::OnWorkerThread() const noexcept { return tls_current_worker == this; }

Status GpuWorker::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  return StartLocked();
}

Status GpuWorker::StartLocked() {
  if (stopping_) return Status(ErrorCode::kStopped, "GPU worker is stopped");
  if (started_) return Status::Ok();
  try {
    thread_ = std::thread([this] { Loop(); });
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, std::string("cannot start GPU worker thread: ") + e.what());
  }
  thread_id_ = thread_.get_id();
  started_ = true;
  return Status::Ok();
}

std::packaged_task<Status()> GpuWorker::Wrap(std::function<Status(DeviceContext&)> job) {
  return std::packaged_task<Status()>([this, job = std::move(job)]() -> Status {
    try {
      return job(context_);
    } catch (const std::exception& e) {
      return Status(ErrorCode::kInternal, std::string("GPU worker job threw: ") + e.what());
    } catch (...) {
      return Status(ErrorCode::kInternal, "GPU worker job threw a non-standard exception");
    }
  });
}

Status GpuWorker::Enqueue(std::packaged_task<Status()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    MCD_RETURN_IF_ERROR(StartLocked());
    assert(task.valid() && started_ && !stopping_);
    queue_.push_back(std::move(task));
    queued_.store(queue_.size(), std::memory_order_release);
  }
  wake_.notify_one();
  return Status::Ok();
}

Status GpuWorker::Call(std::function<Status(DeviceContext&)> job) {
  if (OnWorkerThread()) {
    return Status(ErrorCode::kWouldDeadlock,
                  "a GPU worker job waited on its own worker; run the work inline instead");
  }
  std::packaged_task<Status()> task = Wrap(std::move(job));
  std::future<Status> done = task.get_future();
  MCD_RETURN_IF_ERROR(Enqueue(std::move(task)));
  // Most jobs take tens of microseconds: poll for the result before sleeping on it.
  SpinUntil([&] { return done.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
  return done.get();
}

Status GpuWorker::Post(std::function<Status(DeviceContext&)> job) {
  return Enqueue(Wrap(std::move(job)));
}

int32_t GpuWorker::SubmitAndWait(std::function<int32_t()> fn) {
  Status status = Call([fn = std::move(fn)](DeviceContext&) -> Status {
    int32_t code = fn();
    if (code == 0) return Status::Ok();
    return Status(static_cast<ErrorCode>(code), "job returned an error code");
  });
  return static_cast<int32_t>(status.code());
}

void GpuWorker::Loop() {
  assert(tls_current_worker == nullptr);  // one worker per thread
  tls_current_worker = this;
  for (;;) {
    std::packaged_task<Status()> task;
    // Jobs come in bursts (a batch of commands): poll a while for the next before sleeping.
    SpinUntil([this] { return queued_.load(std::memory_order_acquire) != 0; });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(queue_.size(), std::memory_order_release);
    }
    assert(task.valid());
    task();
  }
  context_.Reset();
  tls_current_worker = nullptr;
}

void GpuWorker::Stop() {
  std::thread to_join;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queued_.store(queue_.size() + 1, std::memory_order_release);  // ends a spinning wait
    if (thread_.joinable() && !OnWorkerThread()) to_join = std::move(thread_);
  }
  wake_.notify_all();
  if (to_join.joinable()) to_join.join();
}

}  // namespace mcd
