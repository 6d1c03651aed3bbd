// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Copies between nodes over UCX (docs/scale-out.md): each server's UCX worker, whose address its
// heartbeat publishes (ucx_address), serves reads of its tensors to other servers and fetches
// other servers' tensors for creates with copy_of. UCX picks the transport (shared memory on
// one host, TCP, RDMA where present; UCX_TLS chooses).
//
// The bytes go from the source's memory to the destination's without a copy of their own for
// host tensors (their shared-memory objects are mapped for the transfer). GPU tensors go the same
// way where the UCX at hand reads and writes GPU memory (a CUDA-aware build: cuda_copy,
// cuda_ipc, GPUDirect RDMA), and piece by piece through pinned host slots on each side where it
// does not (server/node_copy.h).
//
// One thread runs every UCX call: progress, sends and receives. Other threads post jobs to it;
// a fetch is polled (Begin, Fetching), so that the serving loop goes on meanwhile. Two active
// messages (server/copy_wire.h): READ {fetch id, grant, ctime, name, node, piece size} from the
// fetching server, sent with a reply endpoint, answered with DATA {fetch id, code, message,
// total, offset}, one per piece of the tensor, each sent eagerly or by rendezvous as its size
// asks; a READ into GPU memory or staging buffers asks for rendezvous, so that UCX writes the
// bytes in place, and a piece for which the asker has no buffer free waits in the sender's
// memory until it has one.
//
// Whoever reaches the worker may send it anything: a read is served only against its grant
// (server/copy_grant.h), and an answer is taken only from the endpoint the read went to, for
// its fetch id, 128 random bits that only that read carried.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memcuda/status.h"

namespace mcd {

// Where bytes given to the service lie: UCX is told, so that it never has to guess.
enum class Memory { kHost, kGpu };

// The pieces a copy's bytes go in (DATA messages): what a staged copy holds of pinned memory
// per slot on each side, and what each side's device copy overlaps the transport by. Set by
// the fetching server (CopyPieceBytes, server/node_copy.h). A server serves pieces of
// kMinCopyPieceBytes to kMaxCopyPieceBytes, whatever a read asks: a tensor in millions of
// sends, or staging slots of a whole tensor's size, are for nobody to ask.
inline constexpr uint64_t kCopyPieceBytes = 16ull << 20;
inline constexpr uint64_t kMinCopyPieceBytes = 64ull << 10;
inline constexpr uint64_t kMaxCopyPieceBytes = 256ull << 20;
// How many pieces of `piece` bytes `total` bytes go in: one at least (an empty tensor's).
inline uint64_t CopyPieces(uint64_t total, uint64_t piece) {
  return total == 0 ? 1 : (total - 1) / piece + 1;
}

// What lets a server read another's tensor: 16 random bytes each, raw. The id names the grant's
// key in Redis, which holds the token (server/copy_grant.h).
struct CopyGrant {
  std::string id;
  std::string token;
};

class CopyService {
 public:
  // A read another server asked for, waiting for the serving loop (NodeCopier::ServeReads).
  struct Read {
    std::string fetch;  // the asker's fetch id (16 raw bytes), for the answer
    CopyGrant grant;
    std::string asker_node;  // as the read says: the grant holds it too
    int64_t ctime_ms = 0;
    std::string name;
    void* reply_ep = nullptr;  // ucp_ep_h of the asking server
    bool rendezvous = false;   // the asker receives into GPU memory or staging buffers
    uint64_t piece_bytes = 0;  // the answer's pieces, as the asker takes them (never 0)
  };

  // The service, or kUnsupported when this build has no UCX, or UCX cannot start. `wake` is
  // called (on the service's thread) when a read arrives or a fetch ends, to wake the serving
  // loop.
  static Result<std::unique_ptr<CopyService>> Start(std::function<void()> wake);
  virtual ~CopyService() = default;

  // The UCX worker's address, hex: the heartbeat's ucx_address.
  virtual const std::string& address_hex() const = 0;
  // Whether this UCX sends from and receives into GPU memory itself (its context lists CUDA
  // among its memory types), so that GPU tensors need no staging in host memory.
  virtual bool reads_gpu_memory() const = 0;
  // The UCX version ("1.22.0"): the heartbeat's ucx_version.
  virtual std::string version() const = 0;
  // The reads waiting for the serving loop, taken out, and how many were answered unavailable
  // at once since the last call instead, for coming while too many waited (a peer that floods
  // the worker): the serving loop logs them.
  struct Waiting {
    std::vector<Read> reads;
    uint64_t turned_away = 0;
  };
  virtual Waiting TakeReads() = 0;
  // Answers `read` with the error that stops it: no bytes.
  virtual void Refuse(const Read& read, const Status& status) = 0;
  // Sends the piece of `read`'s answer at `offset` of the tensor's `total` bytes: `length`
  // bytes at `data` (in `memory`), read.piece_bytes or the rest. Thread-safe. `sent` runs once,
  // on the service's thread, when UCX no longer reads `data`: with the send's outcome (never
  // where the service stops first).
  virtual void SendPiece(const Read& read, uint64_t offset, const void* data, uint64_t length,
                         uint64_t total, Memory memory, std::function<void(Status)> sent) = 0;
  // Sends the `total` bytes at `data` (in `memory`) for `read`, every piece, a few at a time, from
  // a thread of the service's own that maps host memory's pages ahead of their sends. `release`
  // runs once UCX no longer reads any.
  virtual void SendAll(const Read& read, const void* data, uint64_t total, Memory memory,
                       std::function<void()> release) = 0;
  // Where a fetch puts the bytes.
  struct Sink {
    uint64_t bytes = 0;
    // In place: UCX writes each piece at its offset from `into` (in `memory`).
    void* into = nullptr;
    Memory memory = Memory::kHost;
    // Staged (`into` null): each piece lands in one of `slots`, host memory of piece_bytes each,
    // and `place` moves it to its own place, calling `done` (on any thread) once the slot may
    // take another piece. A piece for which no slot is free waits in the sender's memory.
    std::vector<void*> slots;
    std::function<void(uint64_t offset, uint64_t length, const void* slot,
                       std::function<void(Status)> done)>
        place;
    // Kept until nothing writes into the sink any more (the slots' owner).
    std::shared_ptr<void> keep;
  };
  // A fetch under way (Begin). Destroying one that is not done Stops it: UCX writes into its
  // memory until then.
  class Fetching {
   public:
    virtual ~Fetching() = default;
    // The outcome, once there is one: ok (every byte is in), or the error the other server
    // answered, kUnavailable when it went away, kTimeout past the fetch's time when no byte had
    // come. nullopt while under way.
    virtual std::optional<Status> Poll() = 0;
    // Blocks until Poll has the outcome, and returns it.
    virtual Status Wait() = 0;
    // Calls the fetch off (kStopped) where no byte has come yet; else waits for the bytes, as
    // Wait. The outcome.
    virtual Status Stop() = 0;
  };
  // Starts receiving into `sink` the bytes of tensor `name`, created at `ctime_ms`, of the
  // server at `address_hex`, asking with `grant` as node `asker_node`, in pieces of
  // `piece_bytes` (a staged sink's slots' size), for at most `timeout_ms` before the first
  // piece. Returns at once: the service's `wake` is called when it ends, and Poll says how; it
  // ends once every piece is in place (placed, for a staged sink) or, on failure, once nothing
  // writes into the sink any more.
  virtual Result<std::unique_ptr<Fetching>> Begin(const std::string& address_hex,
                                                  const std::string& name, int64_t ctime_ms,
                                                  const CopyGrant& grant,
                                                  const std::string& asker_node, Sink sink,
                                                  uint64_t piece_bytes, int timeout_ms) = 0;
  // Begin, then Wait.
  Status Fetch(const std::string& address_hex, const std::string& name, int64_t ctime_ms,
               const CopyGrant& grant, const std::string& asker_node, Sink sink,
               uint64_t piece_bytes, int timeout_ms) {
    MCD_ASSIGN_OR_RETURN(auto fetching, Begin(address_hex, name, ctime_ms, grant, asker_node,
                                              std::move(sink), piece_bytes, timeout_ms));
    return fetching->Wait();
  }
};

}  // namespace mcd
