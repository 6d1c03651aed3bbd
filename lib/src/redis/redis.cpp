// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/redis.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <cassert>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/spin.h"
#include "protocol/text.h"
#include "redis/name_a_redis.h"
#include "redis/redis_text.h"

namespace mcd {

// Beside the connection that refuses a RedisUrl{} naming none (and built with it into the fuzz
// targets, which take this file without the rest of the library).
const char* const kNameARedis =
    "name one with --redis-url or MCD_REDIS_URL (redis://host:port, unix:///path/to.sock; "
    "redis:// for redis://127.0.0.1:6379), or start a private one with `mcd-serve --spawn-redis`";

namespace {

void IgnoreSigpipeOnce() {
  // A server that goes away mid-write must surface as an error, not kill the process.
  static std::once_flag once;
  std::call_once(once, [] { signal(SIGPIPE, SIG_IGN); });
}

RedisValue Copy(const redisReply* reply) {
  RedisValue value;
  switch (reply->type) {
    case REDIS_REPLY_INTEGER:
      value.type = RedisValue::Type::kInteger;
      value.integer = reply->integer;
      break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      value.type = reply->type == REDIS_REPLY_STRING   ? RedisValue::Type::kString
                   : reply->type == REDIS_REPLY_STATUS ? RedisValue::Type::kStatus
                                                       : RedisValue::Type::kError;
      value.str.assign(reply->str, reply->len);
      break;
    case REDIS_REPLY_ARRAY:
      value.type = RedisValue::Type::kArray;
      value.elements.reserve(reply->elements);
      for (size_t i = 0; i < reply->elements; ++i)
        value.elements.push_back(Copy(reply->element[i]));
      break;
    default:
      value.type = RedisValue::Type::kNil;
  }
  return value;
}

struct ReplyDeleter {
  void operator()(void* reply) const noexcept { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<void, ReplyDeleter>;

}  // namespace

RedisConnection::RedisConnection(RedisUrl url, RedisOptions options)
    : url_(std::move(url)), options_(options), timeout_ms_(options.command_timeout_ms) {}

RedisConnection::~RedisConnection() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

Result<std::unique_ptr<RedisConnection>> RedisConnection::Connect(const RedisUrl& url,
                                                                  const RedisOptions& options) {
  IgnoreSigpipeOnce();
  std::unique_ptr<RedisConnection> conn(new RedisConnection(url, options));
  if (conn->options_.spin_us < 0) conn->options_.spin_us = SpinMicros();
  MCD_RETURN_IF_ERROR(conn->Open());
  return conn;
}

bool RedisConnection::connected() const noexcept { return ctx_ != nullptr && !broken_; }

Status RedisConnection::ContextError(const char* what) {
  broken_ = true;
  int err = ctx_ != nullptr ? ctx_->err : REDIS_ERR_OTHER;
  std::string detail = ctx_ != nullptr ? ctx_->errstr : "no context";
  std::string where = std::string(what) + " on " + url_.Redacted() + ": ";
  if (err == REDIS_ERR_IO &&
      (errno == EAGAIN || errno == ETIMEDOUT || detail.find("timed out") != std::string::npos)) {
    return Status(ErrorCode::kTimeout, where + "timed out (" + detail + ")");
  }
  if (detail.find("timed out") != std::string::npos) {
    return Status(ErrorCode::kTimeout, where + detail);
  }
  if (err == REDIS_ERR_EOF)
    return Status(ErrorCode::kUnavailable, where + "server closed the connection");
  return Status(ErrorCode::kUnavailable, where + detail);
}

Status RedisConnection::Open() {
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  broken_ = false;
  queued_ = 0;
  unanswered_ = 0;
  if (!url_.named())
    return Status(ErrorCode::kUnavailable, std::string("no Redis named: ") + kNameARedis);
  if (url_.via_sentinel()) MCD_RETURN_IF_ERROR(FindMaster());
  timeval tv{options_.connect_timeout_ms / 1000, (options_.connect_timeout_ms % 1000) * 1000};
  ctx_ = url_.is_unix ? redisConnectUnixWithTimeout(url_.path.c_str(), tv)
                      : redisConnectWithTimeout(url_.host.c_str(), url_.port, tv);
  if (ctx_ == nullptr) return Status(ErrorCode::kInternal, "redisConnect: out of memory");
  if (ctx_->err != 0) {
    std::string detail = ctx_->errstr;
    Status status = ContextError("connect");
    const bool refused = detail.find("refused") != std::string::npos;
    // A master the sentinels still name, refusing: it died and they have not promoted a replica
    // yet. Tried again (within the caller's timeout) as a failover under way is.
    if (refused && url_.via_sentinel()) {
      return Status(ErrorCode::kTryAgain,
                    "the master that the sentinels of " + url_.Redacted() + " name (" + url_.host +
                        ":" + std::to_string(url_.port) + ") refuses connections: " + detail +
                        " (a failover under way? if it lasts, that address is not one this host "
                        "reaches: see the sentinels' announce-ip)");
    }
    // A Unix socket this user may not open (a folder or file of Redis's group, say): waiting
    // would not help.
    if (url_.is_unix && detail.find("Permission denied") != std::string::npos) {
      return Status(ErrorCode::kPermissionDenied,
                    "cannot connect to Redis at " + url_.Redacted() + ": " + detail +
                        " (this user may not open the socket: is it in Redis's group?)");
    }
    if (refused || detail.find("No such file") != std::string::npos) {
      return Status(ErrorCode::kUnavailable,
                    "cannot connect to Redis at " + url_.Redacted() + ": " + detail +
                        " (is Redis running? `mcd-serve --spawn-redis` starts a private one; "
                        "--redis-url or MCD_REDIS_URL name yours)");
    }
    return status;
  }
  // The connect timeout covers connect() only; commands need their own.
  MCD_RETURN_IF_ERROR(SetTimeout(timeout_ms_));
  if (!url_.password.empty()) {
    std::vector<std::string_view> argv = {"AUTH"};
    if (!url_.user.empty()) argv.push_back(url_.user);
    argv.push_back(url_.password);
    auto reply = CommandRaw(argv);
    if (!reply.ok()) return reply.status();
    if (reply->type == RedisValue::Type::kError) {
      return Status(ErrorCode::kAuthFailed,
                    "Redis AUTH failed for " + url_.Redacted() + ": " + reply->str);
    }
  }
  if (url_.db != 0) {
    std::string db = std::to_string(url_.db);
    auto reply = Command({"SELECT", db});
    if (!reply.ok()) return reply.status();
  }
  if (url_.via_sentinel()) {
    // The sentinels may still name a master that a failover is demoting.
    auto role = Command({"ROLE"});
    if (!role.ok()) return role.status();
    if (role->elements.empty() || role->elements[0].str != "master") {
      broken_ = true;
      return Status(ErrorCode::kTryAgain,
                    "Redis at " + url_.host + ":" + std::to_string(url_.port) +
                        ", which the sentinels name as master '" + url_.master +
                        "', is not a master (a failover is under way): try "
                        "again in a moment");
    }
  }
  return Status::Ok();
}

namespace {

// What SENTINEL get-master-addr-by-name answered: two strings, a host name or address and a
// port. Anything else (a sentinel is reached by anyone who can reach its port) is malformed.
Result<std::pair<std::string, int>> MasterAddress(const redisReply* reply,
                                                  const std::string& master) {
  auto malformed = [](const std::string& why) {
    return Status(ErrorCode::kUnexpectedReply, "answered " + why);
  };
  if (reply->type == REDIS_REPLY_ERROR) {
    std::string words(reply->str, reply->len);
    // Any refusal but for credentials: the sentinel answered, and names no master (yet).
    ErrorCode code = words.rfind("NOAUTH", 0) == 0 || words.rfind("WRONGPASS", 0) == 0
                         ? ErrorCode::kAuthFailed
                         : ErrorCode::kTryAgain;
    return Status(code, Printable(words, 200));
  }
  if (reply->type == REDIS_REPLY_NIL) {
    return Status(ErrorCode::kTryAgain, "does not know master '" + master + "' (yet)");
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2)
    return malformed("something other than a host and a port");
  for (size_t i = 0; i < 2; ++i) {
    const redisReply* e = reply->element[i];
    if (e == nullptr || e->type != REDIS_REPLY_STRING)
      return malformed("a host or port that is no string");
  }
  std::string host(reply->element[0]->str, reply->element[0]->len);
  std::string port_text(reply->element[1]->str, reply->element[1]->len);
  bool host_ok = !host.empty() && host.size() <= 255;
  for (char c : host)
    host_ok = host_ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
                          c == ':' || c == '_');
  if (!host_ok) return malformed("the host \"" + Printable(host) + "\"");
  int port = 0;
  if (!ParseInt(port_text, port) || port <= 0 || port > 65535)
    return malformed("the port \"" + Printable(port_text) + "\"");
  return std::make_pair(std::move(host), port);
}

// One sentinel's answer for the master of `url`: its host and port, or why not.
Result<std::pair<std::string, int>> AskSentinel(const RedisUrl& url, const std::string& host,
                                                int port, const timeval& tv) {
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, tv);
  std::unique_ptr<redisContext, void (*)(redisContext*)> owned_context(c, [](redisContext* ctx) {
    if (ctx != nullptr) redisFree(ctx);
  });
  if (c == nullptr || c->err != 0)
    return Status(ErrorCode::kUnavailable, c != nullptr ? c->errstr : "out of memory");
  redisSetTimeout(c, tv);
  // The URL's credentials, as for the master (a sentinel with requirepass, or ACL users, asks
  // for them). A sentinel that has none refuses the AUTH and still answers: ask regardless,
  // and report an AUTH failure only if the question is refused for want of one.
  std::string auth_error;
  if (!url.password.empty()) {
    std::vector<const char*> argv = {"AUTH"};
    std::vector<size_t> lens = {4};
    if (!url.user.empty()) {
      argv.push_back(url.user.c_str());
      lens.push_back(url.user.size());
    }
    argv.push_back(url.password.c_str());
    lens.push_back(url.password.size());
    ReplyPtr auth(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    const auto* reply = static_cast<const redisReply*>(auth.get());
    if (reply == nullptr) return Status(ErrorCode::kUnavailable, c->errstr);
    if (reply->type == REDIS_REPLY_ERROR)
      auth_error = Printable(std::string(reply->str, reply->len), 200);
  }
  ReplyPtr owned(
      redisCommand(c, "SENTINEL get-master-addr-by-name %b", url.master.data(), url.master.size()));
  const auto* reply = static_cast<const redisReply*>(owned.get());
  if (reply == nullptr) return Status(ErrorCode::kUnavailable, c->errstr);
  auto address = MasterAddress(reply, url.master);
  if (!address.ok() && address.status().code() == ErrorCode::kAuthFailed && !auth_error.empty())
    return Status(ErrorCode::kAuthFailed, "AUTH refused: " + auth_error);
  return address;
}

}  // namespace

Status RedisConnection::FindMaster() {
  std::string tried;
  bool answered = false;  // a sentinel that answers but names no master: a failover under way
  timeval tv{std::min(options_.connect_timeout_ms, 1000) / 1000,
             (std::min(options_.connect_timeout_ms, 1000) % 1000) * 1000};
  // Unavailable unless a sentinel answered and what it answered was wrong: then the worst.
  ErrorCode code = ErrorCode::kUnavailable;
  for (const auto& [host, port] : url_.sentinels) {
    auto address = AskSentinel(url_, host, port, tv);
    if (address.ok()) {
      url_.host = address->first;
      url_.port = address->second;
      return Status::Ok();
    }
    tried += "; " + host + ":" + std::to_string(port) + ": " + address.status().message();
    ErrorCode why = address.status().code();
    answered = answered || why == ErrorCode::kTryAgain;
    if (why == ErrorCode::kUnexpectedReply ||
        (why == ErrorCode::kAuthFailed && code != ErrorCode::kUnexpectedReply))
      code = why;
  }
  if (answered && code == ErrorCode::kUnavailable) {
    return Status(ErrorCode::kTryAgain, "no sentinel of " + url_.Redacted() +
                                            " names a master yet (a failover under way?)" + tried);
  }
  return Status(code, "no sentinel of " + url_.Redacted() + " named the master" + tried);
}

Status RedisConnection::Reconnect() { return Open(); }

Status RedisConnection::SetTimeout(int timeout_ms) {
  timeout_ms_ = timeout_ms;
  if (ctx_ == nullptr) return Status::Ok();
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  if (redisSetTimeout(ctx_, tv) != REDIS_OK) return ContextError("redisSetTimeout");
  return Status::Ok();
}

namespace {

size_t DecimalDigits(size_t n) {
  size_t digits = 1;
  for (; n >= 10; n /= 10) ++digits;
  return digits;
}

// The bytes of `args` as RESP bulk strings: "$<len>\r\n<arg>\r\n" each.
size_t BulkBytes(const std::vector<std::string_view>& args) {
  size_t bytes = 0;
  for (std::string_view arg : args) bytes += 5 + DecimalDigits(arg.size()) + arg.size();
  return bytes;
}

// Writes one RESP header ("*3\r\n", "$12\r\n") at `out`, which has room for it.
char* WriteHeader(char* out, char marker, size_t count) {
  *out++ = marker;
  out = std::to_chars(out, out + 20, count).ptr;
  *out++ = '\r';
  *out++ = '\n';
  return out;
}

// Writes `arg` as a bulk string at `out`, which has room for it.
char* WriteBulk(char* out, std::string_view arg) {
  out = WriteHeader(out, '$', arg.size());
  if (!arg.empty()) std::memcpy(out, arg.data(), arg.size());
  out += arg.size();
  *out++ = '\r';
  *out++ = '\n';
  return out;
}

}  // namespace

std::string RespCommand(size_t argc) {
  std::string resp(3 + DecimalDigits(argc), '\0');
  WriteHeader(resp.data(), '*', argc);
  return resp;
}

void RespArg(std::string& resp, std::string_view arg) {
  size_t at = resp.size();
  resp.resize(at + BulkBytes({arg}));
  WriteBulk(resp.data() + at, arg);
}

Status RedisConnection::AppendFormatted(std::string_view resp) {
  if (!connected()) return Status(ErrorCode::kUnavailable, "Redis connection is closed");
  if (redisAppendFormattedCommand(ctx_, resp.data(), resp.size()) != REDIS_OK) {
    return ContextError("redisAppendFormattedCommand");
  }
  ++queued_;
  return Status::Ok();
}

// Formatted here rather than by hiredis's redisAppendCommandArgv, whose sds formatting (an
// sdscatfmt per argument, each growing the buffer) took a third of the server's instructions per
// create + delete round (docs/design.md, "Commands formatted in one pass"): sized exactly first,
// then written in one pass into a buffer kept between commands.
Status RedisConnection::Append(const std::vector<std::string_view>& argv) {
  if (!connected()) return Status(ErrorCode::kUnavailable, "Redis connection is closed");
  resp_.resize(3 + DecimalDigits(argv.size()) + BulkBytes(argv));
  char* out = WriteHeader(resp_.data(), '*', argv.size());
  for (std::string_view arg : argv) out = WriteBulk(out, arg);
  assert(out == resp_.data() + resp_.size());
  if (redisAppendFormattedCommand(ctx_, resp_.data(), resp_.size()) != REDIS_OK) {
    return ContextError("redisAppendFormattedCommand");
  }
  ++queued_;
  return Status::Ok();
}

Status RedisConnection::FlushOutput() {
  if (!connected()) return Status(ErrorCode::kUnavailable, "Redis connection is closed");
  // A write that fails before any byte of the queued commands left (EPIPE on a connection
  // Redis closed) sent nothing: those commands cannot have run.
  size_t pending = sdslen(ctx_->obuf);
  int done = 0;
  while (!done) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) {
      if (sdslen(ctx_->obuf) != pending) unanswered_ += queued_;
      queued_ = 0;
      return ContextError("write");
    }
  }
  unanswered_ += queued_;
  queued_ = 0;
  return Status::Ok();
}

void RedisConnection::DropIfClosedByPeer() noexcept {
  if (!connected() || queued_ > 0 || unanswered_ > 0 || ReplyBuffered()) return;
  // Redis sends nothing unasked on a connection like this one, so a readable socket is one it
  // closed (end of file or a reset); anything else is left for the next read to report.
  pollfd pfd{ctx_->fd, POLLIN, 0};
  if (poll(&pfd, 1, 0) <= 0) return;
  char byte;
  ssize_t n = recv(ctx_->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    broken_ = true;
  }
}

int RedisConnection::fd() const noexcept { return connected() ? ctx_->fd : -1; }

bool RedisConnection::ReplyBuffered() const noexcept {
  return connected() && ctx_->reader->pos < ctx_->reader->len;
}

Result<RedisValue> RedisConnection::ReadReply() {
  if (!connected()) return Status(ErrorCode::kUnavailable, "Redis connection is closed");
  void* raw = nullptr;
  // Written here rather than inside redisGetReply, so that a failed write is told apart from a
  // lost answer (awaiting_reply).
  MCD_RETURN_IF_ERROR(FlushOutput());
  if (options_.spin_us > 0 && ctx_->reader->pos >= ctx_->reader->len) {
    // Nothing buffered: poll (without sleeping) for a while.
    pollfd pfd{ctx_->fd, POLLIN, 0};
    SpinUntil([&] { return poll(&pfd, 1, 0) != 0; }, options_.spin_us);
  }
  if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) return ContextError("read reply");
  ReplyPtr reply(raw);
  if (unanswered_ > 0) --unanswered_;
  RedisValue value = Copy(static_cast<redisReply*>(reply.get()));
  // A master demoted under this connection: the next use connects again, which through the
  // sentinels reaches the new one.
  if (value.type == RedisValue::Type::kError && value.str.rfind("READONLY", 0) == 0 &&
      url_.via_sentinel()) {
    broken_ = true;
  }
  return value;
}

Result<RedisValue> RedisConnection::CommandRaw(const std::vector<std::string_view>& argv) {
  MCD_RETURN_IF_ERROR(Append(argv));
  return ReadReply();
}

Result<RedisValue> RedisConnection::Command(const std::vector<std::string_view>& argv) {
  MCD_RETURN_IF_ERROR(Append(argv));
  return ReadCommandReply(argv.empty() ? "" : argv[0]);
}

Result<RedisValue> RedisConnection::ReadCommandReply(std::string_view command) {
  MCD_ASSIGN_OR_RETURN(RedisValue value, ReadReply());
  if (value.type == RedisValue::Type::kError) return RedisErrorStatus(command, value.str);
  return value;
}

RedisRefusal ClassifyRedisError(std::string_view reply) {
  // Redis's error replies start with a word in capitals, then a space.
  auto starts = [&](std::string_view word) {
    return reply.substr(0, word.size()) == word &&
           (reply.size() == word.size() || reply[word.size()] == ' ');
  };
  if (starts("WRONGTYPE")) return RedisRefusal::kWrongType;
  if (starts("NOAUTH") || starts("WRONGPASS")) return RedisRefusal::kAuth;
  // Also inside a script's error ("ERR ... NOPERM ..."), as Redis words it for a key a
  // script touches.
  if (reply.find("NOPERM") != std::string_view::npos) return RedisRefusal::kNoPermission;
  for (std::string_view passing :
       {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY"}) {
    if (starts(passing)) return RedisRefusal::kPasses;
  }
  if (starts("NOSCRIPT")) return RedisRefusal::kNoScript;
  return RedisRefusal::kOther;
}

Status RedisErrorStatus(std::string_view command, std::string_view reply) {
  std::string text = "Redis " + std::string(command) + ": " + std::string(reply);
  switch (ClassifyRedisError(reply)) {
    case RedisRefusal::kWrongType:
      return Status(ErrorCode::kUnexpectedReply, text);
    case RedisRefusal::kAuth:
      return Status(ErrorCode::kAuthFailed, text);
    case RedisRefusal::kNoPermission:
      return Status(ErrorCode::kPermissionDenied,
                    text +
                        " (this Redis user's ACL does not cover these keys or commands: check "
                        "its key patterns against --prefix and --queue)");
    case RedisRefusal::kPasses:
      return Status(ErrorCode::kTryAgain,
                    text +
                        " (Redis is loading its data, busy or failing over; nothing changed: "
                        "try again in a moment)");
    case RedisRefusal::kNoScript:
    case RedisRefusal::kOther:
      break;
  }
  return Status(ErrorCode::kRedisError, text);
}

Status RedisConnection::Scan(std::string_view pattern, int count,
                             const std::function<Status(const std::vector<RedisValue>&)>& on_page) {
  std::string cursor = "0";
  std::string count_text = std::to_string(count);
  do {
    MCD_ASSIGN_OR_RETURN(RedisValue page,
                         Command({"SCAN", cursor, "MATCH", pattern, "COUNT", count_text}));
    if (page.elements.size() != 2) return Status(ErrorCode::kUnexpectedReply, "SCAN reply");
    cursor = page.elements[0].str;
    MCD_RETURN_IF_ERROR(on_page(page.elements[1].elements));
  } while (cursor != "0");
  return Status::Ok();
}

std::map<std::string, std::string> FieldMap(const RedisValue& hgetall) {
  std::map<std::string, std::string> fields;
  for (size_t i = 0; i + 1 < hgetall.elements.size(); i += 2)
    fields[hgetall.elements[i].str] = hgetall.elements[i + 1].str;
  return fields;
}

Result<long long> AsInteger(const RedisValue& value, std::string_view what) {
  if (value.type == RedisValue::Type::kInteger) return value.integer;
  if (value.type == RedisValue::Type::kString || value.type == RedisValue::Type::kStatus) {
    long long out = 0;
    auto [ptr, ec] = std::from_chars(value.str.data(), value.str.data() + value.str.size(), out);
    if (ec == std::errc() && ptr == value.str.data() + value.str.size()) return out;
  }
  return Status(ErrorCode::kUnexpectedReply,
                "expected an integer for " + std::string(what) + " from Redis");
}

Result<std::string> AsString(const RedisValue& value, std::string_view what) {
  if (value.type == RedisValue::Type::kString || value.type == RedisValue::Type::kStatus) {
    return value.str;
  }
  return Status(ErrorCode::kUnexpectedReply,
                "expected a string for " + std::string(what) + " from Redis");
}

std::string InfoField(const std::string& info, const std::string& field) {
  size_t start = 0;
  while (start < info.size()) {
    size_t end = info.find('\n', start);
    if (end == std::string::npos) end = info.size();
    std::string_view line(info.data() + start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':') {
      return std::string(line.substr(field.size() + 1));
    }
    start = end + 1;
  }
  return "";
}

}  // namespace mcd
