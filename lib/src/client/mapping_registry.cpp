// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "client/mapping_registry.h"

#include <cassert>

#include "ipc/fd_passing.h"

namespace mcd {

Result<void*> MappingRegistry::Open(const TensorRecord& r, const SourceOf& source_of) {
  std::string key = Key(r);
  std::string base_key = BaseKey(r);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // A tensor of an allocation mapped here already must lie inside it, as OpenMapping checks.
    if (auto base = bases_.find(base_key); base != bases_.end())
      MCD_RETURN_IF_ERROR(CheckWithin(r, base->second.allocation_bytes));
    if (auto known = ReuseLocked(key, base_key, r)) return *known;
  }
  void* ptr = nullptr;
  uint64_t allocation_bytes = 0;
  // Pools are imported once per process and server instance (a new instance: a new import).
  PoolImporter import_pool = [&](DeviceContext& ctx) -> Result<cudaMemPool_t> {
    if (auto known = FindPool(r.owner, r.device)) return *known;
    MCD_ASSIGN_OR_RETURN(PoolSource source, source_of(r.owner, r.device));
    return ImportPoolOf(ctx, r.owner, r.device, source);
  };
  Status opened = RunMappingJob(r.device, [&](DeviceContext& ctx) -> Status {
    MCD_ASSIGN_OR_RETURN(ptr, OpenMapping(ctx, r, import_pool, &allocation_bytes));
    return Status::Ok();
  });
  if (!opened.ok()) return opened;
  std::optional<void*> known;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    known = ReuseLocked(key, base_key, r);
    if (!known) {
      maps_[key] = Mapping{ptr, 1, r};
      if (!base_key.empty()) bases_[base_key] = Base{1, r, ptr, allocation_bytes};
    }
  }
  if (!known) return ptr;
  // Another thread opened the tensor or its allocation meanwhile: keep theirs, undo ours.
  (void)RunMappingJob(r.device, [&](DeviceContext& ctx) { return CloseMapping(ctx, r, ptr); });
  return *known;
}

void MappingRegistry::PrefetchPool(const std::string& owner, int device, PoolSource source,
                                   std::string primer) {
  std::string key = PoolKey(owner, device);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto worker = workers_.find(device);
    if (worker == workers_.end() || !worker->second->GpuUp()) return;
    if (pools_.count(key) != 0 || !prefetching_.insert(key).second) return;
  }
  Status posted = Worker(device).Post([this, owner, device, source = std::move(source), key,
                                       primer = std::move(primer)](DeviceContext& ctx) {
    Status imported = Status::Ok();
    if (!FindPool(owner, device)) {
      auto pool = ImportPoolOf(ctx, owner, device, source);
      imported = pool.status();
      if (pool.ok() && !primer.empty()) {
        // Freed at once, as PrefetchIpc's primer: the setup stays paid.
        auto ptr = OpenPoolPointer(ctx, pool.value(), primer, 0);
        if (ptr.ok()) (void)ClosePoolPointer(ctx, ptr.value(), 0);
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    prefetching_.erase(key);
    return imported;
  });
  if (!posted.ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    prefetching_.erase(key);
  }
}

void MappingRegistry::PrefetchIpc(int device, std::string handle) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto worker = workers_.find(device);
    if (worker == workers_.end() || !worker->second->GpuUp()) return;
    if (!primed_.insert(device).second) return;
  }
  // Closed at once: the setup stays paid (keeping it open measured no faster), and the
  // process holds no reference to the server's memory.
  (void)Worker(device).Post([handle = std::move(handle)](DeviceContext& ctx) {
    auto ptr = OpenCudaIpc(ctx, handle, 0);
    if (ptr.ok()) (void)CloseCudaIpc(ctx, ptr.value(), 0);
    return Status::Ok();
  });
}

Status MappingRegistry::Close(const TensorRecord& r) {
  TensorRecord opener;
  void* opener_ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = maps_.find(Key(r));
    if (it == maps_.end()) return Status::Ok();
    assert(it->second.opens > 0);  // a mapping with no open left is erased
    if (--it->second.opens > 0) return Status::Ok();
    opener = it->second.record;
    opener_ptr = it->second.ptr;
    maps_.erase(it);
    auto base = bases_.find(BaseKey(opener));
    if (base != bases_.end()) {
      assert(base->second.tensors > 0);  // one per mapping of the base, which erases it at 0
      if (--base->second.tensors > 0) return Status::Ok();
      opener = base->second.opener;
      opener_ptr = base->second.opener_ptr;
      bases_.erase(base);
    }
  }
  return RunMappingJob(r.device,
                       [&](DeviceContext& ctx) { return CloseMapping(ctx, opener, opener_ptr); });
}

std::optional<TensorRecord> MappingRegistry::FindByName(const std::string& name, const void* at) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [key, mapping] : maps_) {
    if (mapping.record.name == name && (at == nullptr || mapping.ptr == at)) return mapping.record;
  }
  return std::nullopt;
}

MappingRegistry::~MappingRegistry() {
  // Each allocation once: through its base where tensors share one, else per tensor.
  auto close = [this](const TensorRecord& record, void* ptr) {
    (void)RunMappingJob(record.device,
                        [&](DeviceContext& ctx) { return CloseMapping(ctx, record, ptr); });
  };
  for (auto& [key, base] : bases_) close(base.opener, base.opener_ptr);
  for (auto& [key, mapping] : maps_) {
    if (BaseKey(mapping.record).empty()) close(mapping.record, mapping.ptr);
  }
  for (auto& [device, worker] : workers_) worker->Stop();
}

std::optional<void*> MappingRegistry::ReuseLocked(const std::string& key,
                                                  const std::string& base_key,
                                                  const TensorRecord& r) {
  auto it = maps_.find(key);
  if (it != maps_.end()) {
    it->second.opens++;
    return it->second.ptr;
  }
  if (base_key.empty()) return std::nullopt;
  auto base = bases_.find(base_key);
  if (base == bases_.end()) return std::nullopt;
  base->second.tensors++;
  const Base& b = base->second;
  void* ptr = static_cast<char*>(b.opener_ptr) - b.opener.offset + r.offset;
  maps_[key] = Mapping{ptr, 1, r};
  return ptr;
}

Result<cudaMemPool_t> MappingRegistry::ImportPoolOf(DeviceContext& ctx, const std::string& owner,
                                                    int device, const PoolSource& source) {
  std::optional<cudaMemPool_t> imported;
  // The copy is not the pool's descriptor only if the server replaced its pool since the
  // heartbeat was read: the socket then serves the new one.
  if (source.server) {
    if (auto copied = source.server->CopyFd(source.fd); copied.ok()) {
      if (auto pool = ImportPool(ctx, std::move(copied).value()); pool.ok())
        imported = pool.value();
    }
  }
  if (!imported) {
    MCD_ASSIGN_OR_RETURN(UniqueFd fd, FetchFd(source.socket, device, 5000, source.server_pid));
    MCD_ASSIGN_OR_RETURN(imported, ImportPool(ctx, std::move(fd)));
  }
  cudaMemPool_t pool = *imported;
  std::lock_guard<std::mutex> lock(mutex_);
  pools_[PoolKey(owner, device)] = pool;
  return pool;
}

}  // namespace mcd
