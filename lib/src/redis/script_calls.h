// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The calls of the Lua scripts (lua_scripts.h), each defined once as a pair: a struct of named
// arguments made into the command's argv (EVALSHA or EVAL, keys, arguments, in the order the
// script reads them), and the script's reply read into a typed result. The fields carry the names
// that the scripts' headers give their KEYS and ARGV. Thread-safe (no state).
//
// WARNING: a *Call that returns std::vector<std::string_view> (ForwardCall, ForgetHolderCall,
// ReferenceCall, RedeemGrantCall) returns views into its Args struct and the strings that struct
// names: valid only while all of them live. Use the argv within the full expression that makes
// it (`redis.Command(ForwardCall(args))`), never keep it past the arguments. The calls whose argv
// waits in a pipeline (CommitCall, DeleteIfCall) return owned strings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memcuda/keys.h"
#include "memcuda/redis.h"
#include "memcuda/status.h"

namespace mcd {

// ---- commit.lua ----------------------------------------------------------------------------

// The commit's precondition on the tensor hash. kMine: a ready hash of this instance; kCreating:
// one of this instance that its creator is still filling.
enum class Pre { kNone, kAbsent, kMine, kCreating };

// What the commit does to the tensor hash.
// kHsetMany, kDelMany: every member of a tensor set (CommitArgs::members) at once.
enum class CommitAction { kNone, kHset, kDel, kIncr, kUnhold, kHsetMany, kDelMany };

// One member hash of a kHsetMany or kDelMany commit: its key, name and (kHsetMany) the
// field/value pairs written.
struct CommitMember {
  std::string key;
  std::string name;
  std::vector<std::string> fields;
};

// The lifecycle event a commit appends to the event stream when it changes the tensor
// (events.lua): `kind` "" for none, "create", "ref" (the script names it "get", "release" or
// "delete" by the change) or "reclaim"; `pid` the process it is about, `reason` why (memcuda(7)).
// delete_if.lua takes one too.
struct CommitEvent {
  const char* kind = "";
  int64_t pid = 0;
  const char* reason = "";
};

struct CommitArgs {
  // KEYS, in order; <prefix>:- (Keys::Unused) where one does not apply.
  std::string_view tensor;        // the tensor hash
  std::string_view processing;    // the node's processing list
  std::string_view reply_list;    // the req's reply list
  std::string_view first_result;  // the req's first-result key
  std::string_view holders;       // the node's set of holders
  std::string_view held;          // the holder's set of tensors
  std::string_view events;        // the event stream
  // ARGV, in order.
  std::string_view raw;    // the command, taken off the processing list ("" for none)
  std::string_view reply;  // the reply written (an incr: the part before the new refcount)
  int64_t reply_ttl_s = 0;
  int64_t first_result_ttl_s = 0;
  bool has_req = false;  // the reply and first result are written
  Pre pre = Pre::kNone;
  std::string_view owner;  // the instance that `pre` names
  CommitAction action = CommitAction::kNone;
  uint64_t event_cap = 0;  // the event stream's
  CommitEvent event;       // its kind; its pid and reason follow `node`
  std::string_view name;   // the tensor's
  std::string_view node;
  // By action. kHset: field/value pairs. kIncr: holder ("" for a reference bound to nobody),
  // delta, then the reply's tails while the tensor is referenced and once it is freed, and
  // own_only (a delete that gives back only the holder's own reference). kUnhold: holder (one
  // that died).
  const std::vector<std::string>* fields = nullptr;
  std::string_view holder;
  int delta = 0;
  std::string_view held_tail;
  std::string_view freed_tail;
  bool own_only = false;
  // kHsetMany, kDelMany: the members (`tensor` is then the set's list of member keys).
  const std::vector<CommitMember>* members = nullptr;
  // KEYS after `events`: the set's record (KeySpace::SetRecord) of kHsetMany and kDelMany; and of
  // a commit that may delete one member's hash (del, incr, unhold), its set's list and record,
  // which lose the member with its hash ("" for a tensor of no set).
  std::string_view set_list;
  std::string_view set_record;
};

struct CommitResult {
  // kNotHeld: a delete by a holder that holds none, of a tensor whose references are all other
  // processes'.
  enum Kind { kOk, kDup, kConflict, kNotHeld } kind = kOk;
  long long refcount = 0;  // after an "incr" or "unhold"; a "del" under kMine: the count it had
};

// EVALSHA `sha` (at kCommitShaIndex, replaced when the script is loaded again). Owned strings:
// the argv waits in the commit pipeline for its batch.
inline constexpr size_t kCommitShaIndex = 1;
std::vector<std::string> CommitCall(std::string_view sha, const CommitArgs& args);
// A reply read raw (an error reply as a value, whose text says whether the script was lost).
Result<CommitResult> ParseCommitReply(Result<RedisValue> reply);

// ---- delete_if.lua -------------------------------------------------------------------------

struct DeleteIfArgs {
  std::string_view key;     // KEYS[1], a hash
  std::string_view events;  // KEYS[2]
  std::string_view field;   // deleted only while it holds `value`
  std::string_view value;
  uint64_t event_cap = 0;
  CommitEvent event;      // kind, then name and node, then pid and reason
  std::string_view name;  // "" for a server event
  std::string_view node;
  // A member of a tensor set: the set's name, list and record (KEYS[3], KEYS[4]), which lose
  // the member with its hash; "" for none.
  std::string_view set, set_list, set_record;
};
std::vector<std::string> DeleteIfCall(const DeleteIfArgs& args);  // EVAL
// True when the key was deleted.
Result<bool> ParseDeleteIfReply(Result<RedisValue> reply);

// Where a server's lifecycle events go: the stream's key, about how many it keeps (0: none are
// written), and the node they name. Made by Of alone.
struct EventTarget {
  std::string key;
  uint64_t cap = 0;
  std::string node;
  static EventTarget Of(const KeySpace& keys, uint64_t event_history, const std::string& node) {
    return EventTarget{keys.Events(), event_history, node};
  }
};
// The EVAL of delete_if.lua (DeleteIfCall), for the keys a server removes outside a command:
// deletes `key` while its `field` holds `value`, appending `event` about tensor `name` ("" for a
// server event) to `events`; a member of tensor set `set` (named so in its hash) leaves the set's
// list and record (`keys`'s) with it.
std::vector<std::string> DeleteIfCommand(const EventTarget& events, const std::string& key,
                                         const std::string& field, const std::string& value,
                                         const CommitEvent& event, const std::string& name,
                                         const KeySpace* keys = nullptr,
                                         const std::string& set = "");

// ---- forward.lua ---------------------------------------------------------------------------

struct ForwardArgs {
  std::string_view processing;  // KEYS[1] the taker's processing list
  std::string_view queue;       // KEYS[2] the other node's queue
  std::string_view heartbeat;   // KEYS[3] its heartbeat
  std::string_view raw;         // ARGV[1] the command
};
std::vector<std::string_view> ForwardCall(const ForwardArgs& args);  // EVAL
// True when forwarded, false when the node has no live server.
Result<bool> ParseForwardReply(Result<RedisValue> reply);

// ---- forget_holder.lua ---------------------------------------------------------------------

struct ForgetHolderArgs {
  std::string_view holders;   // KEYS[1] the node's set of holders
  std::string_view held;      // KEYS[2] the holder's set of tensors
  std::string_view holder;    // ARGV[1] "PID:START"
  std::string_view instance;  // ARGV[2] the server's
};
std::vector<std::string_view> ForgetHolderCall(const ForgetHolderArgs& args);  // EVAL
// How many tensors of the instance still name the holder (0: it is forgotten).
Result<int64_t> ParseForgetHolderReply(Result<RedisValue> reply);

// ---- reference.lua -------------------------------------------------------------------------

// Which reference a release gives back (holders.lua, mcd_releasable): the holder's own (one the
// client took), one bound to nobody (one it created, or took for no holder), or, not known (a
// tool releasing for its parent), the holder's own first, else one bound to nobody.
inline constexpr const char* kReleaseOwn = "own";
inline constexpr const char* kReleaseUnbound = "unbound";
inline constexpr const char* kReleaseAny = "any";

struct ReferenceArgs {
  // KEYS
  std::string_view tensor;
  std::string_view heartbeat;  // of the client's node
  std::string_view holders;
  std::string_view held;  // <prefix>:- for a reference bound to nobody
  std::string_view events;
  std::string_view queue;       // release only: the command queue
  std::string_view reply_list;  // release only: its delete command's reply list
  // ARGV
  bool release = false;  // delta "-1", else "1" (a get)
  std::string_view node;
  std::string_view holder;  // "PID:START", "" for none
  std::string_view pid;     // the one the event names
  std::string_view name;
  std::string_view delete_command;                   // release only
  std::string_view marker_ttl_s;                     // release only
  std::string_view epoch;                            // release only; kAnyEpoch when not known
  std::string_view mode = kReleaseAny;               // release only: which reference goes
  const std::vector<std::string>* fields = nullptr;  // hash fields returned
};
inline constexpr const char* kAnyEpoch = "*";
// EVALSHA `sha`, at kReferenceShaIndex.
inline constexpr size_t kReferenceShaIndex = 1;
std::vector<std::string_view> ReferenceCall(std::string_view sha, const ReferenceArgs& args);

struct ReferenceReply {
  enum Kind { kOk, kMissing, kNotReady, kWrongNode, kGone, kNotHeld, kForgotten, kQueued } kind;
  RedisValue values;    // kOk, kForgotten: the fields asked for, as HMGET gives them
  std::string detail;   // kNotReady: the state; kWrongNode: the node; kMissing: the heartbeat's
                        // instance ("" without one)
  std::string settled;  // kMissing: the heartbeat's settled
};
// A reply that is no answer of the script is kUnexpectedReply.
Result<ReferenceReply> ParseReferenceReply(RedisValue reply);

// ---- reference_many.lua --------------------------------------------------------------------

struct ReferenceManyItem {
  std::string tensor;          // KEYS: its hash
  std::string reply_list;      // KEYS: release: its delete command's reply list; get: unused key
  std::string name;            // ARGV
  std::string delete_command;  // ARGV, release only
  std::string epoch = kAnyEpoch;
  std::string mode = kReleaseAny;  // release only (ReferenceArgs::mode)
};
struct ReferenceManyArgs {
  std::string_view heartbeat, holders, held, events, queue;  // KEYS, as ReferenceArgs's
  bool release = false;
  std::string_view node, holder, pid, marker_ttl_s;
  const std::vector<std::string>* fields = nullptr;
  const std::vector<ReferenceManyItem>* items = nullptr;
  // A get of a whole tensor set (no items): the set's list of member keys, its record
  // (KeySpace::SetRecord) and its name.
  std::string_view set_list;
  std::string_view set_record;
  std::string_view set_name;
};
// EVALSHA `sha` at kReferenceShaIndex, like ReferenceCall; owned strings (it may be long).
std::vector<std::string> ReferenceManyCall(std::string_view sha, const ReferenceManyArgs& args);

// Either every tensor's answer, in order, or the refusal of the first one that stopped the call
// (`failed`, from 0) with nothing changed. A set's: the answer of its leader alone (the
// reference taken), its name, and every member's name and value in the set's record
// (SetRecordValue), in no order.
struct ReferenceManyReply {
  static constexpr size_t kNoMember = SIZE_MAX;  // `failed` of a set with no member left
  std::vector<ReferenceReply> answers;
  std::string leader;                                        // a set's: the member referenced
  std::vector<std::pair<std::string, std::string>> members;  // a set's record (GetSet's read)
  std::optional<size_t> failed;
  std::string failed_name;  // that tensor's name
  ReferenceReply refusal{ReferenceReply::kOk, {}, {}, {}};
};
Result<ReferenceManyReply> ParseReferenceManyReply(RedisValue reply);

// ---- set_members.lua -----------------------------------------------------------------------

// EVAL of the script (rare: a create_set's), its argv owned.
std::vector<std::string> SetMembersCall(const std::string& members_key, size_t max_members,
                                        size_t max_bytes);
// The members, or kTooLarge saying which limit they pass.
Result<std::vector<std::string>> ParseSetMembersReply(Result<RedisValue> reply);

// ---- redeem_grant.lua ----------------------------------------------------------------------

struct RedeemGrantArgs {
  std::string_view grant;     // KEYS[1] the grant's key
  std::string_view expected;  // ARGV[1] the value the read says it holds
};
std::vector<std::string_view> RedeemGrantCall(const RedeemGrantArgs& args);  // EVAL
// True when the grant held `expected` and is taken out.
Result<bool> ParseRedeemGrantReply(Result<RedisValue> reply);

// ---- heartbeat.lua -------------------------------------------------------------------------

struct HeartbeatArgs {
  std::string_view heartbeat;  // KEYS[1] the node's heartbeat hash
  std::string_view events;     // KEYS[2] the event stream
  std::string_view instance;   // ARGV[1] the writer's
  std::string_view replace;    // ARGV[2] an instance it may replace (its process is gone; "": none)
  int ttl_s = 0;
  uint64_t event_cap = 0;
  bool held_before = false;  // the writer held the node before (a reclaim, when it finds it lost)
  // The field/value pairs written (HeartbeatFields).
  const std::vector<std::pair<std::string, std::string>>* fields = nullptr;
};
std::vector<std::string> HeartbeatCall(const HeartbeatArgs& args);  // EVAL

// Another instance that holds the node (not a reference holder), as its heartbeat names it.
struct HeartbeatHolder {
  std::string instance;
  int64_t pid = 0;         // 0 when the hash's pid is not a number
  uint64_t pid_start = 0;  // 0: not given (or not a number)
  bool expires = true;     // false: its hash has no TTL, which every server's write sets
  std::string pid_space;   // where `pid` names it (PidSpace()); "" when not said
  int64_t pttl_ms = -1;    // when its hash expires
};
// Empty when the heartbeat was written; else the instance that holds the node, and nothing was
// written. An error reply (OOM under maxmemory, say) is kRedisError.
Result<std::optional<HeartbeatHolder>> ParseHeartbeatReply(Result<RedisValue> reply);

}  // namespace mcd
