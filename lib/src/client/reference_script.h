// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The reference script: a get (refcount+1 on a ready tensor of a live server) and a release
// that leaves references are one atomic script call in Redis, with no hop through the server,
// since no memory changes hands; a release that finds the last reference queues the server's
// delete command instead, from inside the script. Used by one Client, so by one thread at a time.
#pragma once

#include <optional>
#include <string>

#include "client/reference_book.h"
#include "client/server_view.h"
#include "client/transport.h"
#include "memcuda/client.h"
#include "memcuda/redis.h"
#include "redis/script_calls.h"

namespace mcd {

class ReferenceScript {
 public:
  // References of tensors of `node` (its keys under `keys`) are taken and given back for
  // `holder` (none: bound to nobody). `server` says what a tensor the script did not find means
  // (ServerView::Missing).
  ReferenceScript(RedisConnection& redis, std::string node, KeySpace keys, Transport& transport,
                  std::optional<Holder> holder, ServerView& server);
  // The script's SHA, when the caller loaded it already (Client::Connect, in the heartbeat's
  // round trip).
  void set_sha(std::string sha) { sha_ = std::move(sha); }
  Status Load();
  // Takes a reference: one EVALSHA.
  Result<TensorRecord> Get(const std::string& name);
  // Gives one back: one taken when the hash's epoch (TensorRecord::epoch) was `epoch`, or
  // kAnyEpoch when that is not known. One taken in an older epoch is not counted by the hash
  // that the server put back after Redis lost it, so nothing is given back for it: the record
  // is returned as it is. The BLPOP for the server's reply goes out behind the script in one
  // write; when the script answered itself, it also pushed a marker, so the BLPOP returns at
  // once. One round trip in every case. After a NOSCRIPT, loads the script and tries once more.
  // `whose`: which reference this client has to give back (ReferenceBook::Whose): one it took
  // gives back its holder's own alone, its creator's one bound to nobody alone.
  static constexpr const char* kAnyEpoch = ::mcd::kAnyEpoch;
  using Whose = ReferenceBook::Whose;
  Result<TensorRecord> Release(const std::string& name, const std::string& epoch, Whose whose,
                               bool retried = false);
  // Get and Release for several tensors (distinct names) in one script call, all or nothing
  // (reference_many.lua): either every reference is taken (given back), or none is and the error
  // is the first refusal's, naming its tensor. One round trip; a release of some tensor's last
  // reference also waits for the server's reply to its delete command, sent in the same write.
  // `epochs` go with `names` (kAnyEpoch where not known).
  Result<std::vector<TensorRecord>> GetMany(const std::vector<std::string>& names);
  // One reference for the whole of tensor set `set`, taken of its leader (its first member still
  // there), and the records of every member still there (its list, KeySpace::Set), read by the
  // same script call: the leader's first, with the count the reference made. kNotFound when none
  // is left.
  Result<std::vector<TensorRecord>> GetSet(const std::string& set);
  Result<std::vector<TensorRecord>> ReleaseMany(const std::vector<std::string>& names,
                                                const std::vector<std::string>& epochs,
                                                const std::vector<Whose>& whose,
                                                bool retried = false);

 private:
  // The records of set `set`'s members from a set's get's answer, the leader's first.
  Result<std::vector<TensorRecord>> SetRecords(const std::string& set, ReferenceManyReply& answer);
  // The arguments shared by a get and a release of `name`, whose key and heartbeat key they
  // point to.
  ReferenceArgs Args(const std::string& name, const std::string& key,
                     const std::string& server) const;
  // The batched call's arguments for `names` (a release: with each one's epoch, whose and delete
  // command, whose Outgoing is added to `out`).
  Result<std::vector<ReferenceManyItem>> ManyItems(const std::vector<std::string>& names,
                                                   const std::vector<std::string>* epochs,
                                                   const std::vector<Whose>* whose,
                                                   std::vector<Transport::Outgoing>* out);
  // A release of `whose`: the script's mode (ReferenceArgs::mode), and the delete command that
  // gives back the same reference when it is the last.
  const char* Mode(Whose whose) const;
  Command ReleaseCommand(const std::string& name, Whose whose) const;
  // `queue`: the command queue a release's delete commands go to (empty for a get).
  ReferenceManyArgs ManyArgs(const std::vector<ReferenceManyItem>& items,
                             const std::string& queue) const;
  // Runs a get's `argv` (reference_many.lua), loading the script first where Redis does not
  // have it, and reads its answer; for a set's, with its record (`set_record`, its key) read by
  // an HGETALL in the same transaction into `record` (CallMany).
  Status LoadMany();
  Result<ReferenceManyReply> RunMany(std::vector<std::string>& argv,
                                     const std::string& set_record = std::string(),
                                     RedisValue* record = nullptr);
  // The script's reply to `argv`, an error reply as a value; with `set_record`, the script and
  // the record's HGETALL in one MULTI/EXEC, the HGETALL's reply into `record`.
  Result<RedisValue> CallMany(const std::vector<std::string>& argv, const std::string& set_record,
                              RedisValue* record);
  // The records of the references a get's `answer` took of `names`, or its refusal's error.
  Result<std::vector<TensorRecord>> Taken(const std::vector<std::string>& names,
                                          ReferenceManyReply& answer);
  // What the script answered, for `name`; `release`: to a release, of `whose`.
  Result<TensorRecord> Answer(const std::string& name, ReferenceReply& reply, bool release = false,
                              Whose whose = Whose::kUnknown);

  static constexpr const char* kNotLoaded = "0";
  RedisConnection& redis_;
  const std::string node_;
  const KeySpace keys_;
  Transport& transport_;
  ServerView& server_;
  const std::optional<Holder> holder_;
  const std::string holder_id_;    // "PID:START", "" for none
  const std::string holders_key_;  // the node's set of holders
  const std::string held_key_;     // the holder's set of tensors, <prefix>:- for none
  const std::string events_key_;
  const std::string server_key_;  // the node's heartbeat
  const std::string unused_key_;
  const std::string pid_;  // who the events name: the holder, else this process
  std::string sha_ = kNotLoaded;
  std::string many_sha_ = kNotLoaded;
};

}  // namespace mcd
