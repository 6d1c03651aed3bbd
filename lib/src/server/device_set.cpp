// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/device_set.h"

#include "common/hex.h"
#include "common/log.h"
#include "gpu/cuda_check.h"
#include "memcuda/protocol.h"

namespace mcd {

Result<std::unique_ptr<DeviceSet>> DeviceSet::Open(const DeviceSetOptions& opt,
                                                   const std::string& shm_prefix) {
  std::unique_ptr<DeviceSet> set(new DeviceSet());
  set->workers_[kHostDevice] = std::make_unique<GpuWorker>(kHostDevice);
  set->allocators_[kHostDevice] =
      WithHostStock(MakeHostShmAllocator(shm_prefix, opt.shm_group),
                    ReadyLimit{opt.ready_max_bytes, opt.ready_max_fraction});
  std::vector<int> gpus = opt.devices;
  if (opt.all_devices) {
    gpus.clear();
    // No driver or no GPU simply means that only host memory is served.
    for (int d = 0; d < CudaDeviceCount(); ++d) gpus.push_back(d);
  }
  for (int d : gpus) MCD_RETURN_IF_ERROR(set->AddGpu(d, opt));
  set->allocator_text_ += std::string(set->allocator_text_.empty() ? "" : ",") + "cpu:host_shm";
  return set;
}

Status DeviceSet::AddGpu(int d, const DeviceSetOptions& opt) {
  // Declared before the worker, so that on an early return the worker stops (running the
  // allocator's reset hooks) while the allocator still exists.
  std::unique_ptr<Allocator> allocator;
  auto worker = std::make_unique<GpuWorker>(d);
  Status bound = worker->Call([](DeviceContext& ctx) { return ctx.EnsureGpu(); });
  if (!bound.ok()) {
    return Status(bound.code(),
                  "cannot serve device " + std::to_string(d) + ": " + bound.message());
  }
  if (opt.allocator == "pool") {
    PoolConfig pool;
    pool.max_bytes = opt.pool_max_bytes;
    pool.max_fraction = opt.pool_max_fraction;
    pool.release_threshold = opt.pool_release_threshold;
    allocator = MakeCudaMempoolAllocator(pool);
  } else {
    allocator = MakeCudaIpcAllocator(opt.ipc_slab_max_bytes);
  }
  allocator =
      WithReadyStock(std::move(allocator), ReadyLimit{opt.ready_max_bytes, opt.ready_max_fraction});
  Status ready = worker->Call([&](DeviceContext& ctx) { return allocator->Init(ctx); });
  if (!ready.ok()) {
    return Status(ready.code(), "cannot set up the " + std::string(IpcKindName(allocator->kind())) +
                                    " allocator of device " + std::to_string(d) + ": " +
                                    ready.message());
  }
  allocator_text_ += std::string(allocator_text_.empty() ? "" : ",") + std::to_string(d) + ":" +
                     IpcKindName(allocator->kind());
  workers_[d] = std::move(worker);
  allocators_[d] = std::move(allocator);
  devices_text_ += "," + std::to_string(d);
  return Status::Ok();
}

void DeviceSet::Stop() {
  pool_server_.reset();
  for (auto& [device, worker] : workers_) worker->Stop();
}

Result<Allocation> DeviceSet::Allocate(int device, uint64_t bytes, bool zero) {
  GpuWorker* worker = workers_.at(device).get();
  Allocator* allocator = allocators_.at(device).get();
  Allocation allocation;
  Status allocated = worker->Call([&](DeviceContext& ctx) -> Status {
    MCD_ASSIGN_OR_RETURN(allocation, allocator->Allocate(ctx, bytes, zero));
    return Status::Ok();
  });
  if (!allocated.ok()) return allocated;
  if (allocator->RefillDue()) {
    // Replaces the block this create may have taken from the stock while the commit travels.
    (void)worker->Post([allocator](DeviceContext& ctx) {
      allocator->Refill(ctx);
      return Status::Ok();
    });
  }
  return allocation;
}

void DeviceSet::CopyOnWorker(int device, void* dst, const void* src, uint64_t bytes,
                             cudaMemcpyKind kind, std::function<void(Status)> done) {
  auto worker = workers_.find(device);
  if (device == kHostDevice || worker == workers_.end()) {
    return done(
        Status(ErrorCode::kNoDevice, "device " + DeviceName(device) + " is not a GPU served here"));
  }
  auto shared_done = std::make_shared<std::function<void(Status)>>(std::move(done));
  // A job of the worker's, after those posted before it (an allocation's free among them).
  Status posted = worker->second->Post([=](DeviceContext&) -> Status {
    Status copied = [&]() -> Status {
      MCD_CUDA_RETURN(cudaMemcpy(dst, src, bytes, kind));
      return Status::Ok();
    }();
    (*shared_done)(copied);
    return copied;
  });
  if (!posted.ok()) (*shared_done)(posted);
}

Status DeviceSet::Free(int device, const Allocation& allocation,
                       std::function<void(const Status&)> then) {
  if (allocation.shared) {
    if (--allocation.shared->members > 0) {
      if (then) then(Status::Ok());
      return Status::Ok();
    }
    return Free(device, allocation.shared->whole, std::move(then));
  }
  {
    std::lock_guard<std::mutex> lock(holds_mutex_);
    auto held = held_.find({device, allocation.ptr});
    if (held != held_.end()) {
      held->second.free_deferred = true;
      held->second.allocation = allocation;
      held->second.then = std::move(then);
      Log(LogLevel::kDebug,
          "a free waits for a copy to another node that reads the memory in place");
      return Status::Ok();
    }
  }
  return FreeOnWorker(device, allocation, std::move(then));
}

Status DeviceSet::FreeOnWorker(int device, const Allocation& allocation,
                               std::function<void(const Status&)> then) {
  auto worker = workers_.find(device);
  auto allocator = allocators_.find(device);
  if (worker == workers_.end() || allocator == allocators_.end()) {
    Status missing(ErrorCode::kInternal, "no worker for device " + DeviceName(device));
    if (then) then(missing);
    return missing;
  }
  auto job = [a = allocator->second.get(), allocation, then](DeviceContext& ctx) {
    Status freed = a->Free(ctx, allocation);
    if (then) then(freed);
    return freed;
  };
  if (!then) return worker->second->Call(job);
  Status posted = worker->second->Post(job);
  if (!posted.ok()) then(posted);
  return posted;
}

std::function<void()> DeviceSet::Hold(int device, const Allocation& allocation) {
  // A set member is held by its set's allocation, the one its last free frees.
  std::pair<int, void*> key{device,
                            allocation.shared ? allocation.shared->whole.ptr : allocation.ptr};
  {
    std::lock_guard<std::mutex> lock(holds_mutex_);
    ++held_[key].holds;
  }
  return [this, key] {
    Held done;
    {
      std::lock_guard<std::mutex> lock(holds_mutex_);
      auto held = held_.find(key);
      if (held == held_.end() || --held->second.holds > 0) return;
      done = std::move(held->second);
      held_.erase(held);
    }
    if (!done.free_deferred) return;
    Log(LogLevel::kDebug, "the copy to another node is through: the free that waited for it runs");
    auto then = std::move(done.then);
    (void)FreeOnWorker(key.first, done.allocation, [then](const Status& freed) {
      if (then) {
        then(freed);
      } else if (!freed.ok()) {
        Log(LogLevel::kError, "a free deferred past a copy to another node: " + freed.ToString());
      }
    });
  };
}

Result<std::shared_ptr<char>> DeviceSet::PinnedBuffer(int device, uint64_t bytes) {
  auto worker = workers_.find(device);
  if (device == kHostDevice || worker == workers_.end()) {
    return Status(ErrorCode::kNoDevice,
                  "device " + DeviceName(device) + " is not a GPU served here");
  }
  void* pinned = nullptr;
  MCD_RETURN_IF_ERROR(worker->second->Call([&](DeviceContext&) -> Status {
    MCD_CUDA_RETURN(cudaMallocHost(&pinned, bytes == 0 ? 1 : bytes));
    return Status::Ok();
  }));
  GpuWorker* on = worker->second.get();  // the workers outlive every copy (Server::Shutdown)
  return std::shared_ptr<char>(static_cast<char*>(pinned), [on](char* p) {
    Status posted = on->Post([p](DeviceContext&) {
      cudaFreeHost(p);
      return Status::Ok();
    });
    if (!posted.ok()) cudaFreeHost(p);  // stopping: any thread may free it then
  });
}

size_t DeviceSet::FreeAll(const std::map<int, std::vector<const Entry*>>& by_device) {
  size_t freed = 0;
  for (const auto& [device, entries] : by_device) {
    auto worker = workers_.find(device);
    auto allocator = allocators_.find(device);
    if (worker == workers_.end() || allocator == allocators_.end()) continue;
    (void)worker->second->Call([&](DeviceContext& ctx) {
      for (const Entry* entry : entries) {
        // A set's allocation goes with its last member still held.
        const std::shared_ptr<SharedBlock>& shared = entry->allocation.shared;
        if (shared && --shared->members > 0) {
          ++freed;  // its part goes with the set's last member
          continue;
        }
        Status s = allocator->second->Free(ctx, shared ? shared->whole : entry->allocation);
        if (s.ok()) {
          ++freed;
        } else {
          Log(LogLevel::kError, "free of '" + entry->record.name + "': " + s.ToString());
        }
      }
      return Status::Ok();
    });
  }
  return freed;
}

Status DeviceSet::StartPoolSocket(const std::string& path, const PeerPolicy& policy) {
  // The descriptors stay owned by the allocators; the socket hands out duplicates.
  MCD_ASSIGN_OR_RETURN(pool_server_, FdServer::Start(path, policy, [this](int device) {
                         auto it = allocators_.find(device);
                         return it == allocators_.end() ? -1 : it->second->pool_fd();
                       }));
  return Status::Ok();
}

std::string DeviceSet::DeviceText(
    const std::function<std::string(const Allocator&)>& value_of) const {
  std::string text;
  for (const auto& [device, allocator] : allocators_) {
    std::string value = value_of(*allocator);
    if (value.empty()) continue;
    text += std::string(text.empty() ? "" : ",") + std::to_string(device) + ":" + value;
  }
  return text;
}

std::string DeviceSet::PrimerText(IpcKind kind) const {
  return DeviceText(
      [&](const Allocator& a) { return a.kind() == kind ? HexEncode(a.primer()) : std::string(); });
}

std::string DeviceSet::PoolFdText() const {
  return DeviceText([](const Allocator& a) {
    int fd = a.pool_fd();  // read once: a reset may clear it meanwhile
    return fd >= 0 ? std::to_string(fd) : std::string();
  });
}

uint64_t DeviceSet::SumOver(uint64_t (Allocator::*bytes)() const noexcept) const {
  uint64_t total = 0;
  for (const auto& [device, allocator] : allocators_) total += (allocator.get()->*bytes)();
  return total;
}

void DeviceSet::TrimReadyStock() {
  for (auto& [device, allocator] : allocators_) {
    if (allocator->ReadyBytes() == 0) continue;  // an idle server with no stock wakes nobody
    Allocator* a = allocator.get();
    (void)workers_.at(device)->Post([a](DeviceContext& ctx) {
      a->Trim(ctx, false);
      return Status::Ok();
    });
  }
}

uint64_t DeviceSet::PoolUsedBytes() {
  uint64_t total = 0;
  for (auto& [device, allocator] : allocators_) {
    if (allocator->pool_fd() < 0) continue;
    Allocator* a = allocator.get();
    (void)workers_.at(device)->Call([&](DeviceContext& ctx) {
      total += a->PoolUsedBytes(ctx);
      return Status::Ok();
    });
  }
  return total;
}

}  // namespace mcd
