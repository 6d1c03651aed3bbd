// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Copies between nodes, the server's part (docs/scale-out.md): a create with copy_of gets the
// bytes of the other node's tensor from that node's server, through the CopyService, into its new
// memory before its commit, so that nothing is published half made, while the serving loop goes
// on with other commands; and the reads other servers
// ask of this one are served from the tensor table by the serving loop (ServeReads), each against
// the grant its asker wrote into this server's Redis (server/copy_grant.h). GPU memory
// is read and written in place by UCX where it can (a CUDA-aware UCX), else staged through a
// pinned host slots piece by piece on the device's worker. Main thread of the server.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "memcuda/protocol.h"
#include "memcuda/redis.h"
#include "server/commit_pipeline.h"
#include "server/copy_grant.h"
#include "server/copy_service.h"
#include "server/device_set.h"
#include "server/tensor_table.h"

namespace mcd {

// The pieces this server asks its copies' bytes in: kCopyPieceBytes, or MCD_COPY_PIECE (a whole
// number of bytes from kMinCopyPieceBytes to kMaxCopyPieceBytes); kInvalidArgument, saying what
// it takes, for any other value, which the server warns of at start and replaces with
// kCopyPieceBytes (CopyPieceBytes).
Result<uint64_t> CopyPieceFromEnvironment();
uint64_t CopyPieceBytes();

// Pinned host buffers for staging GPU tensors' pieces, kept for the next copy rather than
// allocated for each (cudaMallocHost of 16 MiB takes milliseconds): up to kKeptSlots free per
// device, whatever their sizes, all freed with the pool. Main thread; a slot goes back to the
// pool from any thread.
class PinnedSlots {
 public:
  static constexpr size_t kKeptSlots = 4;
  explicit PinnedSlots(DeviceSet& devices) : devices_(devices) {}
  // A slot of `bytes` on `device`'s side, back to the pool when the last copy of it goes.
  Result<std::shared_ptr<char>> Take(int device, uint64_t bytes);

 private:
  struct Free {
    std::mutex mutex;
    std::map<int, std::vector<std::pair<uint64_t, std::shared_ptr<char>>>> slots;  // by device
  };
  DeviceSet& devices_;
  std::shared_ptr<Free> free_ = std::make_shared<Free>();
};

class StagedAnswer;

// What the copier needs of the server's options.
struct NodeCopierOptions {
  CopyGrantsOptions grants;  // the node served, its keys, and the Redis its grants go to
  bool stage_gpu_copies = false;
};

class NodeCopier {
 public:
  // `service` null: copies are off, for the reason `off`.
  NodeCopier(NodeCopierOptions opt, CommitPipeline& serving, TensorTable& table, DeviceSet& devices,
             CopyService* service, std::string off)
      : keys_(opt.grants.keys),
        node_(opt.grants.node),
        stage_gpu_copies_(opt.stage_gpu_copies),
        serving_(serving),
        table_(table),
        devices_(devices),
        service_(service),
        off_(std::move(off)),
        grants_(std::move(opt.grants)),
        slots_(devices) {}

  // The tensor a create copies, as found before anything is allocated.
  struct Source {
    std::string node;
    int64_t ctime_ms = 0;
    std::string ucx_address;  // its server's
  };
  // Checks that cmd.copy_of is a ready tensor of another node with cmd's bytes, whose server
  // copies. Reads Redis on the serving connection.
  Result<Source> Locate(const Command& cmd);
  // Starts filling `allocation` (cmd.bytes on cmd.device) with the source's bytes, and returns:
  // the serving loop goes on meanwhile. `done` runs once, with the outcome, after which nothing
  // writes to `allocation` any more: in a later FinishCopies (or StopCopies), or before this
  // returns when the copy cannot start.
  void StartFill(const Command& cmd, const Source& source, const Allocation& allocation,
                 std::function<void(Status)> done);
  // Runs `done` of each copy that ended since the last call (its bytes in, or failed: its other
  // server answered an error or went away, or no answer came in time). How many ended.
  size_t FinishCopies();
  // At stop: calls off every copy whose bytes have not begun to come, waits for the others, and
  // runs each one's `done`.
  void StopCopies();
  // Before the copy service stops: the staged answers under way send nothing more, and their
  // device copies under way end.
  void StopServing();
  // The req of the copy into tensor `name` under way; nullopt when there is none.
  std::optional<std::string> Copying(const std::string& name) const;
  // Answers the reads other servers asked for since the last call: with the bytes where the read's
  // grant holds, else with the error.
  void ServeReads();
  // GPU tensors go in place, UCX reading and writing GPU memory, rather than staged in host
  // memory: the UCX can, and --stage-gpu-copies did not turn it off.
  bool gpu_direct() const {
    return service_ != nullptr && service_->reads_gpu_memory() && !stage_gpu_copies_;
  }

 private:
  // Sends the bytes of `entry` for `read`, piece by piece: host memory from a mapping, GPU
  // memory in place or staged (StagedAnswer in node_copy.cpp: each piece copied into a pinned
  // slot on the device's worker while the one before it is sent).
  Status Serve(const CopyService::Read& read, const Entry& entry);
  // The staging slots of a copy of GPU memory on `device`: kStagingSlots of `piece` bytes.
  Result<std::vector<std::shared_ptr<char>>> StagingSlots(int device, uint64_t piece);
  static constexpr size_t kStagingSlots = 2;
  // A copy under way.
  struct Copy {
    std::string name;  // the tensor made
    std::string req;   // the create's
    std::string what;  // "copying 'x' from node 'y'", for its errors
    int device = kHostDevice;
    Allocation allocation;
    uint64_t bytes = 0;
    void* mapped = nullptr;  // host: the new object's pages, mapped for UCX
    CopyGrant grant;
    std::unique_ptr<CopyService::Fetching> fetching;
    std::function<void(Status)> done;
  };
  // What is left of `copy` once its fetch ended with `fetched`: the mapping closed, the grant
  // withdrawn on failure. The copy's outcome.
  Status Ended(Copy& copy, Status fetched);
  // Says `line` at warn, for `count` reads refused: up to 10 lines a second, then how many more
  // reads there were (a peer that floods the worker does not flood the log).
  void LogRefusals(uint64_t count, const std::function<std::string()>& line);

  const KeySpace keys_;
  const std::string node_;  // the node served
  const bool stage_gpu_copies_;
  CommitPipeline& serving_;
  TensorTable& table_;
  DeviceSet& devices_;
  CopyService* service_;
  const std::string off_;
  CopyGrants grants_;
  std::chrono::steady_clock::time_point refusals_since_{};
  int refusal_lines_ = 0;
  uint64_t unlogged_refusals_ = 0;
  std::vector<Copy> copies_;                         // under way
  std::vector<std::weak_ptr<StagedAnswer>> staged_;  // answers that may be under way
  PinnedSlots slots_;
};

}  // namespace mcd
