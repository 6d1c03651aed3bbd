// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The public contract (man memcuda(7)): dtypes, tensor names, the JSON commands on the
// lifecycle list, the tensor hash, and the replies. Pure functions; no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memcuda/export.h"
#include "memcuda/status.h"

namespace mcd {

inline constexpr int kHostDevice = -1;  // the "cpu" device: host memory, stored as -1

enum class DType : uint8_t {
  kF16,
  kBF16,
  kF32,
  kF64,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
  kBool
};

MCD_API const char* DTypeName(DType dtype) noexcept;  // "f32"
MCD_API size_t DTypeSize(DType dtype) noexcept;       // bytes per element
// Accepts the short names (f32) and common aliases (float32, float, half, bfloat16, int64, ...).
MCD_API std::optional<DType> ParseDType(std::string_view name) noexcept;
MCD_API const std::vector<DType>& AllDTypes() noexcept;
MCD_API std::string DTypeNames();  // "f16 bf16 f32 ... bool", for messages and help

// Limits that bound every command before anything is allocated.
inline constexpr size_t kMaxNameLength = 200;
inline constexpr size_t kMaxDims = 8;
inline constexpr size_t kMaxCommandBytes = 4096;
inline constexpr int kMaxJsonDepth = 4;

// Names: 1..200 bytes of [A-Za-z0-9._:/@+=,-], not ending in '/' (NAME/ stands for tensor set
// NAME in the tools). No spaces, control characters, Redis glob (* ? [ ] \) or hash-tag ({ })
// characters, so a name is safe in keys, globs and shells.
MCD_API Status ValidateName(std::string_view name);
// ValidateName, and not starting with '-', which the tools would take for an option: the name of
// a tensor or set being made (one of an older version that does is still got and removed).
MCD_API Status ValidateNewName(std::string_view name);
// Product of dims times the element size; rejects zero, negative, >kMaxDims and 64-bit overflow.
MCD_API Result<uint64_t> ShapeBytes(const std::vector<int64_t>& shape, DType dtype);
MCD_API std::string ShapeToJson(const std::vector<int64_t>& shape);  // "[2,3]"
MCD_API Result<std::vector<int64_t>> ShapeFromJson(std::string_view json);
// "2,3,4" or "2x3x4" or "[2,3,4]" -> dims.
MCD_API Result<std::vector<int64_t>> ParseShapeList(std::string_view text);

// publish: the creator of a tensor made with `fill` (state "creating") says every byte is in;
// the tensor becomes "ready". abandon: it gives up instead; the tensor goes (memcuda(7)).
// create_set: a tensor set, its members laid out in one allocation (memcuda(7), TENSOR SETS).
enum class Op { kCreate, kGet, kDelete, kPublish, kAbandon, kCreateSet };
MCD_API const char* OpName(Op op) noexcept;

enum class Lifetime { kHeap, kStack };
MCD_API const char* LifetimeName(Lifetime lifetime) noexcept;

// How a tensor's memory is shared, as its hash names it (ipc_kind): a POSIX shared-memory object
// (host_shm), a cudaIpcMemHandle (cuda_ipc), or a pointer exported from an IPC-capable pool
// (cuda_mempool). kUnknown: a kind this build does not know (a newer server's), shown as "?"
// and refused when opened. The names are mapped in one place (IpcKindName, ParseIpcKind).
enum class IpcKind { kUnknown, kHostShm, kCudaIpc, kCudaMempool };
// The size of a cuda_ipc or cuda_mempool handle (cudaIpcMemHandle_t, cudaMemPoolPtrExportData).
inline constexpr size_t kCudaHandleBytes = 64;
MCD_API const char* IpcKindName(IpcKind kind) noexcept;
MCD_API IpcKind ParseIpcKind(std::string_view name) noexcept;

// One command from the lifecycle list, validated.
struct MCD_API Command {
  Op op = Op::kCreate;
  std::string name;
  std::string req;                  // optional request id; replies go to <prefix>:reply:<req>
  std::optional<std::string> node;  // when present, must be the server's node
  int64_t pid = 0;                  // the requesting process (informational)
  // When the client sent it, ms since the epoch by its clock (optional): the server's
  // queue-wait histogram. libmemcuda sets it.
  int64_t sent_ms = 0;
  // create only:
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int device = 0;      // CUDA ordinal, or -1 ("cpu") for host memory
  uint64_t bytes = 0;  // derived from shape and dtype
  Lifetime lifetime = Lifetime::kHeap;
  bool zero_init = true;  // "init":"zero" (default) or "none"
  // "copy_of": the bytes come from this tensor of another node (docs/scale-out.md), moved by
  // the two servers; dtype and shape must be its own.
  std::string copy_of;
  // "fill": true: the requesting process (`pid`, which must run on this host) writes the bytes
  // itself and then sends publish. Until then the tensor is "creating": gets answer not_ready,
  // no event names it, and it goes (hash and memory) if that process dies first.
  bool fill = false;
  // With fill: the filler's PidSpace() (boot id and PID namespace), which must be the server's
  // for `pid` to name the same process there. "" when not said (redis-cli): `pid` is trusted.
  std::string pid_space;
  // create of a stack tensor: the process it is bound to (0 = pid). get and delete: the
  // process the reference is bound to (its holder; 0 = bound to nobody).
  int64_t owner_pid = 0;
  uint64_t owner_start = 0;  // its start time (clock ticks since boot), 0 = look it up
  // delete: "own_only": true gives back only a reference the owner holds, never one bound to
  // nobody (a creator's): the release of a reference its client took, which another client of
  // the same process may have given back already.
  bool own_only = false;
  // create_set: the id of the list of its members (KeySpace::Members), pushed before the
  // command. publish, abandon: "set": true, of every member of tensor set `name` at once.
  std::string members;
  bool set = false;
};

// One member of a create_set, as its client pushes it onto the members list:
// {"name":"SET/x","dtype":"f16","shape":[2,3]}.
struct MCD_API SetMember {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};
// How long a server waits for the first byte of a copy of `bytes` from another node: 30 s, or
// 10 s a GB (100 MB/s, a slow TCP link's pace) for larger tensors, at most an hour. A tool that
// makes a copy waits about twice as long by default: the wait, then the bytes.
inline int CopyFetchLimitMs(uint64_t bytes) {
  constexpr uint64_t kMinMs = 30000, kSlowBytesPerMs = 100000, kMaxMs = 3600000;
  uint64_t ms = bytes / kSlowBytesPerMs;
  return static_cast<int>(ms < kMinMs ? kMinMs : ms > kMaxMs ? kMaxMs : ms);
}

// The most members one tensor set has.
inline constexpr size_t kMaxSetMembers = 65536;
// Where members start in a set's allocation: each at a multiple of this.
inline constexpr uint64_t kSetMemberAlign = 256;
// Parses and validates one member of set `set`: its name must be "<set>/..." and valid, its
// dtype and shape those of a create (kInvalidArgument, kTooLarge as ParseCommand says).
MCD_API Result<SetMember> ParseSetMember(std::string_view raw, std::string_view set);
MCD_API std::string SetMemberToJson(const SetMember& member);
// Where each member of a set lies in its allocation, in the order given: one after another, each
// at the next multiple of kSetMemberAlign; `total` is the allocation's size. kTooLarge when it
// would pass 2^63 - 1 bytes.
struct MCD_API SetLayout {
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
};
MCD_API Result<SetLayout> LayOutSet(const std::vector<SetMember>& members);

// Parses and validates one raw command: size and nesting are bounded before parsing, duplicate
// keys, unknown ops, missing or mistyped fields, bad names, dtypes and shapes are
// kInvalidArgument; sizes that overflow are kTooLarge. On failure `req_out` still receives the
// request id when one could be read, so the error can be answered.
MCD_API Result<Command> ParseCommand(std::string_view raw, std::string* req_out = nullptr);
// The JSON text of a command, as clients push it.
MCD_API std::string CommandToJson(const Command& command);

// A process that holds references to a tensor: its pid and start time (clock ticks since boot),
// named "PID:START" in Redis (man memcuda(7)).
struct MCD_API Holder {
  int64_t pid = 0;
  uint64_t start = 0;
  int64_t refs = 0;
};
MCD_API std::string HolderId(int64_t pid, uint64_t start);
// init's pid: never a holder nor a stack tensor's owner, since it never exits while a server
// runs (a process whose parent exited reads it as its parent). Commands naming it are refused.
inline constexpr int64_t kInitPid = 1;
// pid and start of "PID:START"; nullopt when `id` is not one.
MCD_API std::optional<Holder> ParseHolderId(std::string_view id);

// The tensor hash, as stored and as shown to users.
struct MCD_API TensorRecord {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int device = 0;
  uint64_t bytes = 0;
  IpcKind ipc_kind = IpcKind::kUnknown;
  std::string ipc_handle;  // raw bytes (64 for CUDA kinds, the shm name for host_shm)
  uint64_t offset = 0;
  int64_t refcount = 0;
  std::string state;  // creating | ready | deleting
  int64_t ctime_ms = 0;
  std::string node;
  std::string owner;  // server instance id
  Lifetime lifetime = Lifetime::kHeap;
  int64_t creator_pid = 0;
  int64_t owner_pid = 0;
  uint64_t owner_start = 0;
  // "" until the server puts the hash back after Redis lost it (a restart without persistence,
  // a failover to a replica that missed it); then a new random id each time. References taken
  // before are not counted in the hash any more: a release naming an older epoch gives back
  // nothing (ReferenceScript::Release).
  std::string epoch;
  // The tensor set this tensor is a member of (its members share one allocation: memcuda(7),
  // TENSOR SETS), "" for a tensor of its own.
  std::string set;
  // The processes that hold references, with how many each (the hash's holder:PID:START
  // fields that are not 0); the rest of refcount is bound to nobody. Read by RecordFromHash
  // only.
  std::vector<Holder> holders;
};

// Hash field names in the order HashFields() writes them; HMGET-able.
MCD_API const std::vector<std::string>& TensorFieldNames();
// Field/value pairs for HSET (ipc_handle as raw bytes).
MCD_API std::vector<std::pair<std::string, std::string>> HashFields(const TensorRecord& record);
// Builds a record from the values of TensorFieldNames(), in that order, as HMGET returns them
// (nullopt: field absent); kUnexpectedReply when required fields are missing or malformed.
MCD_API Result<TensorRecord> RecordFromFields(
    const std::string& name, const std::vector<std::optional<std::string>>& values);
// The one check of a record read from outside (a hash, a reply), which anyone with Redis
// credentials may have written, before anything maps or indexes memory by it: shape times dtype
// is bytes; offset + bytes neither overflows nor passes 2^63 - 1; the device is cpu (-1) or a
// GPU ordinal 0-1023, cpu for host_shm and a GPU for the CUDA kinds; a handle, where there is
// one, is 64 bytes for the CUDA kinds and a shared-memory object name ("/" and up to 254
// printable characters but '/') for host_shm; a ready tensor of a known kind has one. Ok, or
// kUnexpectedReply naming the field. RecordFromFields, RecordFromHash and RecordFromJson call it.
MCD_API Status ValidateRecord(const TensorRecord& record);
// The same from field/value pairs (HGETALL).
MCD_API Result<TensorRecord> RecordFromHash(const std::string& name,
                                            const std::map<std::string, std::string>& fields);

// A member's value in its tensor set's record (KeySpace::SetRecord): the fields of the member's
// own, "DTYPE SHAPE BYTES OFFSET" as its hash has them (commit.lua writes it at the set's
// create), so that a get of the whole set reads one key.
MCD_API std::string SetRecordValue(const TensorRecord& record);
// The record of member `name` of the set whose member `leader` is: the leader's with the fields
// of `value` (SetRecordValue) in it, validated as any record read (kUnexpectedReply).
MCD_API Result<TensorRecord> MemberFromSetRecord(const TensorRecord& leader,
                                                 const std::string& name, const std::string& value);

// The JSON object of a record (stable keys, sorted; ipc_handle as "ipc_handle_hex"), and back.
MCD_API std::string RecordToJson(const TensorRecord& record);
MCD_API Result<TensorRecord> RecordFromJson(std::string_view json);
// RecordToJson with one more member after the record's: `key`, whose value `json` is JSON
// already (mcd-get's "values").
MCD_API std::string RecordToJson(const TensorRecord& record, std::string_view key,
                                 std::string_view json);
// RecordToJson without "refcount" and without the closing brace: replies are assembled around
// a refcount that only Redis knows at the moment of the change.
MCD_API std::string RecordJsonHead(const TensorRecord& record);

MCD_API std::string DeviceName(int device);  // "0", "cpu"
// "0", "cuda:0", "cpu", "-1" -> ordinal or kHostDevice.
MCD_API Result<int> ParseDevice(std::string_view text);

// Bytes as two lowercase hex digits each, and back (either case; kInvalidArgument for an odd
// length or another character).
MCD_API std::string HexEncode(std::string_view bytes);
MCD_API Result<std::string> HexDecode(std::string_view hex);

}  // namespace mcd
