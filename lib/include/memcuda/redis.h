// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A RAII connection to Redis over hiredis 0.14, with the URL grammar of `redis-cli -u`.
// RedisUrl is public because ClientOptions carries one; RedisConnection because mcd-bench
// measures Redis itself (its round trip and CPU time) and the tests inspect the Redis layout.
//
// Thread affinity: a RedisConnection is used by one thread at a time (hiredis contexts are not
// thread-safe); distinct connections may be used concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memcuda/export.h"
#include "memcuda/status.h"

struct redisContext;

namespace mcd {

// redis://[user:password@]host[:port][/db] or unix:///path/to.sock[?db=N] (user/password as in
// redis://), or redis-sentinel://[user:password@]host[:port][,host[:port]...]/MASTER[/db], the
// form redis-py uses: every connection asks the sentinels (in order, without credentials) where
// master MASTER is, and checks that what it reached is a master. Defaults: port 6379 (26379 for
// a sentinel), db 0; `redis://` alone is redis://127.0.0.1:6379. A RedisUrl{} names no Redis:
// connecting with it fails with kUnavailable, saying how to name one.
struct MCD_API RedisUrl {
  bool is_unix = false;
  std::string host;  // empty: no Redis named
  int port = 6379;
  std::string path;  // Unix socket path
  // redis-sentinel://: the sentinels and the master's name; host and port then hold where the
  // master was found last.
  std::vector<std::pair<std::string, int>> sentinels;
  std::string master;
  bool via_sentinel() const { return !sentinels.empty(); }
  std::string user;
  std::string password;
  int db = 0;
  // Set by ResolveRedisUrl when no URL was named (flag or environment), so that the private
  // Redis of `mcd-serve --spawn-redis` was taken.
  bool found = false;
  // Whether this names a Redis (Parse always does; a RedisUrl{} does not).
  bool named() const { return is_unix || via_sentinel() || !host.empty(); }

  static Result<RedisUrl> Parse(std::string_view url);
  // The URL with the password replaced by "***": safe to print.
  std::string Redacted() const;
};

// The Redis URL when none is given: MCD_REDIS_URL, REDIS_URL, else the private socket of
// `mcd-serve --spawn-redis` when it exists; with none of them, kUnavailable at once, saying how
// to name one (no Redis is guessed: a password would go to whoever listens there; a local one
// is asked for by naming it, `redis://` for redis://127.0.0.1:6379). MCD_REDIS_PASSWORD,
// MCD_REDIS_PASSWORD_FILE and REDISCLI_AUTH fill in a missing password. Every tool and the C ABI
// resolve it this way.
MCD_API Result<RedisUrl> ResolveRedisUrl(const std::string& flag_value);

// A reply, copied out of hiredis so that callers never hold hiredis memory.
struct MCD_API RedisValue {
  enum class Type { kNil, kInteger, kString, kStatus, kArray, kError };
  Type type = Type::kNil;
  long long integer = 0;
  std::string str;  // bulk string, status or error text (binary-safe)
  std::vector<RedisValue> elements;

  bool is_nil() const noexcept { return type == Type::kNil; }
};

struct MCD_API RedisOptions {
  int connect_timeout_ms = 2000;
  // Socket read/write timeout for ordinary commands. Blocking commands pass their own.
  int command_timeout_ms = 5000;
  // Before blocking on a reply, poll the socket for up to this many microseconds. On virtual
  // machines, where waking a sleeping thread costs tens of microseconds, this trades a little
  // CPU for latency. -1: the process-wide policy (MCD_SPIN_US; by default 200 us on machines
  // with 4 or more CPUs, 0 on smaller ones).
  int spin_us = -1;
};

// A command in RESP form, for AppendFormatted: "*<argc>" then each argument as a bulk string.
// RespCommand(n) starts a command of n arguments; RespArg appends one.
MCD_API std::string RespCommand(size_t argc);
MCD_API void RespArg(std::string& resp, std::string_view arg);

// True when a Redis error text says that the script named by EVALSHA is not loaded (after a
// SCRIPT FLUSH or a restart): load it and run the call again.
inline bool IsNoScript(std::string_view error) {
  return error.find("NOSCRIPT") != std::string_view::npos;
}

class MCD_API RedisConnection {
 public:
  // Connects, authenticates (AUTH [user] password) and selects the database. Errors:
  // kUnavailable (refused, unreachable, lost), kTimeout, kAuthFailed, kRedisError.
  static Result<std::unique_ptr<RedisConnection>> Connect(const RedisUrl& url,
                                                          const RedisOptions& options = {});
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Runs one command; arguments are binary-safe. An error *reply* is returned as
  // kRedisError (the connection stays usable); a dead connection as kUnavailable or kTimeout
  // (call Reconnect() before the next command).
  Result<RedisValue> Command(const std::vector<std::string_view>& argv);
  // Like Command, but a REDIS_REPLY_ERROR is returned as a value of Type::kError.
  Result<RedisValue> CommandRaw(const std::vector<std::string_view>& argv);

  // Pipelining: queue commands, then read their replies in order (raw, as CommandRaw).
  Status Append(const std::vector<std::string_view>& argv);
  // Queues a command already in RESP form (see RespCommand): for commands sent many times.
  Status AppendFormatted(std::string_view resp);
  Result<RedisValue> ReadReply();
  // Reads the reply of `command` (sent with Append) as Command returns it: an error reply as a
  // Status.
  Result<RedisValue> ReadCommandReply(std::string_view command);
  // Sends what was queued now (ReadReply also does), without reading anything.
  Status FlushOutput();
  // For waiting on a reply together with other descriptors: the socket to poll (-1 when
  // closed), and whether bytes of a reply were already read into the buffer, which poll cannot
  // see.
  int fd() const noexcept;
  bool ReplyBuffered() const noexcept;

  // Walks every key matching `pattern` with SCAN (never KEYS), `count` per step, handing each
  // page of keys to `on_page`; stops at the first error from either. A key may come twice.
  Status Scan(std::string_view pattern, int count,
              const std::function<Status(const std::vector<RedisValue>& keys)>& on_page);

  // Changes the socket timeout for the following commands (e.g. around a blocking command).
  Status SetTimeout(int timeout_ms);
  int timeout_ms() const noexcept { return timeout_ms_; }

  // Reconnects with the same URL, re-authenticates, re-selects the db, restores the timeout.
  Status Reconnect();
  bool connected() const noexcept;
  // Whether a request left for Redis and its reply was not read: after the connection broke,
  // true when a command may have run, false when none of what was queued ever left (the write
  // failed before any byte went, or nothing was sent), which is then safe to send again on a
  // fresh connection even when it is not repeatable.
  bool awaiting_reply() const noexcept { return unanswered_ > 0; }
  // Between requests (no reply awaited): a connection that Redis closed (a restart, CLIENT
  // KILL, its idle timeout) is marked lost now, so that the next request goes on a fresh one
  // rather than onto a dead socket, where its fate would be unknown. One poll(2), no wait.
  void DropIfClosedByPeer() noexcept;

  const RedisUrl& url() const noexcept { return url_; }

 private:
  RedisConnection(RedisUrl url, RedisOptions options);
  Status Open();
  // redis-sentinel://: asks the sentinels where the master is, into url_.host and url_.port.
  Status FindMaster();
  Status ContextError(const char* what);

  RedisUrl url_;
  RedisOptions options_;
  int timeout_ms_;
  redisContext* ctx_ = nullptr;
  bool broken_ = false;
  // Commands appended and not yet written, and those written (wholly or in part) whose reply
  // is not read yet: what awaiting_reply() tells after a failure.
  size_t queued_ = 0;
  std::string resp_;  // Append's command in RESP form, the buffer kept from one to the next
  size_t unanswered_ = 0;
};

// Convenience accessors that turn wrong reply types into kUnexpectedReply.
// What Redis's error reply `reply` says, by its first word: the one reading of Redis's refusals,
// which RedisErrorStatus and the server's handling of a refused commit share.
enum class RedisRefusal {
  kPasses,        // a state that passes: LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, READONLY
  kNoPermission,  // NOPERM (also inside a script's error): the user's ACL, which may be changed
  kNoScript,      // NOSCRIPT: Redis lost its scripts (a restart, SCRIPT FLUSH) until loaded again
  kWrongType,     // WRONGTYPE
  kAuth,          // NOAUTH, WRONGPASS
  kOther,
};
MCD_API RedisRefusal ClassifyRedisError(std::string_view reply);

// The status of Redis's error reply `reply` to `command`: kTryAgain for the states that pass
// (LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, READONLY), with what to do;
// kPermissionDenied for NOPERM; kUnexpectedReply for WRONGTYPE; kAuthFailed for NOAUTH and
// WRONGPASS; kRedisError for the rest.
MCD_API Status RedisErrorStatus(std::string_view command, std::string_view reply);

// The field/value pairs of an HGETALL reply as a map (empty for a missing hash).
MCD_API std::map<std::string, std::string> FieldMap(const RedisValue& hgetall);

MCD_API Result<long long> AsInteger(const RedisValue& value, std::string_view what);
MCD_API Result<std::string> AsString(const RedisValue& value, std::string_view what);
// The value of `field` in an INFO reply ("field:value" lines), or "" when it is not there.
MCD_API std::string InfoField(const std::string& info, const std::string& field);

}  // namespace mcd
