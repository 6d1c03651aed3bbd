// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The bare floor: what CUDA alone costs to hand an existing allocation to another process, with
// no Redis, no server and no memcuda in between. The bench process allocates and exports the
// memory itself (cudaMalloc + cudaIpcGetMemHandle, or an IPC-capable pool +
// cudaMemPoolExportPointer); a child of its own opens each export. memcuda's "existing" share and
// first get are judged against these rows, measured in the same run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"

namespace mcd::bench {

// Allocations of one kind on one device, exported the way the allocator of that kind exports
// them. Lives in the bench process; its pool's descriptor is inherited by the children it starts
// (pool_fd), which is how a bare importer gets the pool without a server to ask.
class BareExporter {
 public:
  static Result<std::unique_ptr<BareExporter>> Make(const std::string& kind, int device);
  ~BareExporter();
  BareExporter(const BareExporter&) = delete;
  BareExporter& operator=(const BareExporter&) = delete;

  // A new allocation of `bytes`, filled; returns its export as hex text.
  Result<std::string> Allocate(uint64_t bytes);
  // Frees every allocation (after the importers closed theirs).
  void FreeAll();
  int pool_fd() const { return pool_fd_; }  // -1 for cuda_ipc

 private:
  BareExporter(bool pool, int device) : pool_(pool), device_(device) {}
  bool pool_;
  int device_;
  cudaMemPool_t pool_handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int pool_fd_ = -1;
  std::vector<void*> allocations_;
};

// "share_bare": an existing allocation's export sent to a warm child over a pipe, opened there,
// one byte read, acknowledged: the same hops and the same cadence as the "share_existing" row
// (allocations made `batch` at a time before their opens, given back a batch at a time), without
// memcuda.
Result<Row> BareShare(const Options& opt, const std::string& kind, int device, uint64_t bytes,
                      int batch);
// "open_first_bare": the first open of an export in a fresh process whose CUDA context is up
// (with the pool's import, for cuda_mempool), a new allocation for each process as get_first
// makes a new tensor for each: what memcuda's "get_first" is judged against.
Result<Row> BareFirstOpen(const Options& opt, const std::string& kind, int device, uint64_t bytes);

// The child of both rows: warms its context, says "ready", then for each line "open HEX" opens
// the export, reads one byte and answers "ok OPEN_US"; "close" closes every open and answers
// "closed". Ends at end of input.
int ChildBareImporter(const std::string& kind, int device, int pool_fd);

}  // namespace mcd::bench
