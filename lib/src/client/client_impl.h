// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Client::Impl: the state behind one Client and the requests that change a tensor. Its parts,
// each made once the node is known (MakeParts) and each given only what it uses:
//   redis_retry.h       trying again while Redis is away
//   server_view.h       the node's heartbeat, and what a first Get prepares from it
//   transport.h         commands to the server (command socket or lifecycle list) and replies
//   reference_script.h  get and release in one Redis script call, without the server
//   reference_book.h    which references this client holds, to pick each release's way
//   record_reads.h      tensor records read without touching them
// Its methods live by job: connect.cpp (connecting, finding the node), requests.cpp (create,
// publish, abandon, get, release), tensor_open.cpp (why an open failed, whether a read without
// a reference read the tensor's own bytes). Used by one thread at a time, as the Client.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "client/record_reads.h"
#include "client/redis_retry.h"
#include "client/reference_book.h"
#include "client/reference_script.h"
#include "client/server_view.h"
#include "client/transport.h"
#include "memcuda/client.h"

namespace mcd {

class Client::Impl {
 public:
  explicit Impl(ClientOptions options);

  // connect.cpp. Connects, trying again within the timeout while Redis is away.
  Status Connect();

  // requests.cpp. Each retried while Redis is away, as RedisRetry::Run says.
  // get: refcount+1 by the reference script, no server hop.
  Result<TensorRecord> DirectGet(const std::string& name);
  // create: the command through the server.
  Result<TensorRecord> Create(Command cmd);
  // The filled tensor `name` becomes ready (its filler's publish command, through the server).
  Result<TensorRecord> Publish(const std::string& name);
  // A tensor this client created and could not fill goes again, unpublished.
  void Abandon(const std::string& name);
  // Gives one reference back, the cheapest way that is right (ReferenceBook::PlanRelease).
  Result<TensorRecord> Release(const std::string& name);
  // DirectGet and Release of several tensors in one script call, all or nothing
  // (ReferenceScript::GetMany); `names` checked by the caller (CheckBatch).
  Result<std::vector<TensorRecord>> DirectGetMany(const std::vector<std::string>& names);
  Result<std::vector<TensorRecord>> ReleaseMany(const std::vector<std::string>& names);
  // A tensor set (tensor_sets.cpp): its members pushed, then the create_set command `cmd`
  // through the server, which answers with the record of the whole set; then its publish or
  // abandon (a set being filled); and the whole set's one reference (DirectGetSet).
  Result<TensorRecord> CreateSet(Command cmd, const std::vector<SetMember>& members);
  Result<TensorRecord> PublishSet(const std::string& set);
  void AbandonSet(const std::string& set);
  // One reference for the whole set, of its leader (ReferenceScript::GetSet): every member's
  // record, the leader's first.
  Result<std::vector<TensorRecord>> DirectGetSet(const std::string& set);

  // Reads without touching the tensor (RecordReads), retried while Redis is away.
  Result<TensorRecord> Stat(const std::string& name);
  Result<std::vector<TensorRecord>> List(const std::string& glob,
                                         std::vector<std::string>* unreadable, bool holders);
  Result<std::vector<std::string>> ListNames(const std::string& glob);

  // tensor_open.cpp. A mapping that failed because the server that exported it died is
  // kUnavailable, as for any tensor of a server that is gone, not a CUDA error.
  Status WhyNotOpened(const Status& failed) const;
  // kOk when the tensor `read` was read without a reference is still there, the same one, so
  // what was copied out of it was its own bytes; kNotFound otherwise.
  Status StillThere(const TensorRecord& read);
  // Maps every tensor of `records`, whose references this client just took (those of
  // `references`; all of them when empty); when one cannot be mapped, closes the others and gives
  // every reference back, and says which.
  Result<std::vector<TensorView>> OpenReferenced(std::vector<TensorRecord> records,
                                                 std::vector<std::string> references = {});
  // GetMany of a batch larger than `chunk`: references taken `chunk` tensors per script call,
  // each chunk opened while the next one's call is under way; all or nothing as GetMany.
  Result<std::vector<TensorView>> GetManyOverlapped(const std::vector<std::string>& names,
                                                    size_t chunk);
  // The pool sources of `records`' pool tensors, read now: a SourceOf that another thread may
  // call without touching this client's Redis connection.
  MappingRegistry::SourceOf ResolvedPoolSources(const std::vector<TensorRecord>& records);

  template <typename Op>
  auto Retrying(const char* what, bool repeatable, Op op) -> decltype(op()) {
    return retry_.Run(*redis_, what, repeatable, std::move(op));
  }

  const ClientOptions& options() const { return opt_; }
  bool node_discovered() const { return node_discovered_; }
  const std::optional<Holder>& holder() const { return holder_; }
  RedisConnection& redis() { return *redis_; }
  ServerView& server() { return *server_; }

 private:
  // connect.cpp.
  Status ConnectOnce();
  void MakeParts(const std::string& sha);
  Status DiscoverNode();
  static Result<std::optional<Holder>> ResolveHolder(int64_t pid);
  // requests.cpp: the refusal of a get whose reference would be bound to init (Ok otherwise);
  // a batched `take` of references, retried and booked as DirectGet's.
  Status RefusesInit() const;
  Result<std::vector<TensorRecord>> TakeAll(
      const std::function<Result<std::vector<TensorRecord>>()>& take, bool first_only = false);
  // requests.cpp: `cmd` through the server, retried as `what`.
  Result<TensorRecord> ServerRequest(const char* what, const Command& cmd);

  ClientOptions opt_;
  bool node_given_ = false;       // by ClientOptions::node or MCD_NODE
  bool node_discovered_ = false;  // taken from the only live server (DiscoverNode)
  std::optional<Holder> holder_;
  RedisRetry retry_;
  ReferenceBook book_;
  // The parts go before the connection they use (ConnectOnce), so are declared after it.
  std::unique_ptr<RedisConnection> redis_;
  std::unique_ptr<ServerView> server_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<ReferenceScript> script_;
  std::unique_ptr<RecordReads> reads_;
};

}  // namespace mcd
