// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "client/transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "common/process.h"
#include "common/spin.h"
#include "common/trust.h"
#include "ipc/unix_socket.h"
#include "protocol/json_codec.h"

namespace mcd {

namespace {

std::string FormatSeconds(int ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(ms) / 1000.0);
  return buf;
}

// Whether a reply line carries "req":"<req>", without building that text on every reply.
bool NamesReq(std::string_view reply, std::string_view req) {
  constexpr std::string_view kKey = "\"req\":\"";
  for (size_t at = reply.find(req); at != std::string_view::npos; at = reply.find(req, at + 1)) {
    bool keyed = at >= kKey.size() && reply.substr(at - kKey.size(), kKey.size()) == kKey;
    if (keyed && at + req.size() < reply.size() && reply[at + req.size()] == '"') return true;
  }
  return false;
}

}  // namespace

Transport::Transport(RedisConnection& redis, TransportOptions opt, ServerView& server)
    : redis_(redis), opt_(std::move(opt)), server_(server) {
  // Who sent a request, for logs; the req's own 128 bits are drawn per request (NewRequestId).
  req_prefix_ = opt_.node.substr(0, 32) + "-" + std::to_string(getpid()) + "-";
  for (char& c : req_prefix_) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  }
}

Result<std::string> NewRequestId(const std::string& prefix) {
  // 128 fresh random bits in every req: a reply key nobody can write ahead of the request, not
  // even one who saw this process's earlier reqs (memcuda(7), TRUST).
  MCD_ASSIGN_OR_RETURN(std::string random, RandomHex(16));
  return prefix + random;
}

Result<Transport::Outgoing> Transport::Prepare(Command cmd) {
  MCD_ASSIGN_OR_RETURN(cmd.req, NewRequestId(req_prefix_));
  cmd.node = opt_.node;
  cmd.pid = getpid();
  cmd.sent_ms = NowMs();
  Outgoing out;
  out.body = CommandToJson(cmd);
  out.reply_key = opt_.keys.Reply(cmd.req);
  out.wait = FormatSeconds(opt_.timeout_ms);
  out.queue = server_.queue();
  out.cmd = std::move(cmd);
  return out;
}

Result<TensorRecord> Transport::Request(Command cmd) {
  MCD_ASSIGN_OR_RETURN(Outgoing out, Prepare(std::move(cmd)));
  MCD_ASSIGN_OR_RETURN(bool socket, SocketReady());
  if (socket) {
    auto sent = SocketRequest(out);
    if (sent.has_value()) return std::move(*sent);
    // Not delivered (the server went away since): the queue, where a server that took the
    // node over finds it, or a clear error.
  }
  return QueueRequest(out);
}

Result<bool> Transport::SocketReady() {
  if (cmd_fd_) return true;
  if (!opt_.command_socket || !server_.known()) return false;
  const std::string& path = server_.heartbeat().command_socket;
  if (path.empty() || path == socket_refused_) return false;
  auto fd = ConnectUnix(path, opt_.timeout_ms, "command socket");
  if (!fd.ok()) {
    socket_refused_ = path;  // not this one again: the queue serves this process
    return false;
  }
  // A command carries what it creates or frees, and its reply names the memory this process
  // then writes: only the heartbeat's own server, of a trusted user, gets it.
  MCD_RETURN_IF_ERROR(
      CheckServerPeer(fd->get(), server_.heartbeat().pid, "the command socket " + path));
  cmd_fd_ = std::move(fd).value();
  return true;
}

void Transport::CloseSocket() { cmd_fd_.reset(); }

std::optional<Result<TensorRecord>> Transport::SocketRequest(const Outgoing& out) {
  std::string line = out.body + "\n";
  size_t sent = 0;
  while (sent < line.size()) {
    ssize_t n = send(cmd_fd_.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      CloseSocket();
      (void)RefreshServer();
      if (sent == 0) return std::nullopt;
      return Result<TensorRecord>(
          Status(ErrorCode::kUnavailable, "the server's command socket broke while the " +
                                              std::string(OpName(out.cmd.op)) + " of '" +
                                              out.cmd.name + "' was being sent"));
    }
    sent += static_cast<size_t>(n);
  }
  std::string what = std::string("the ") + OpName(out.cmd.op) + " of '" + out.cmd.name + "'";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opt_.timeout_ms);
  pollfd p{cmd_fd_.get(), POLLIN, 0};
  // Readable already when the spin saw the reply come: then no second poll before the recv.
  bool readable = SpinUntil([&] { return poll(&p, 1, 0) != 0; });
  char buf[4096];
  for (;;) {
    size_t newline = socket_buf_.find('\n');
    if (newline != std::string::npos) {
      std::string reply = socket_buf_.substr(0, newline);
      socket_buf_.erase(0, newline + 1);
      // Every answer to a command names its req. One that does not is the server's refusal of
      // a command it did not apply (at its limit of connections, or cut off from Redis): the
      // queue takes it instead.
      if (!NamesReq(reply, out.cmd.req)) {
        CloseSocket();
        return std::nullopt;
      }
      return RecordFromReply(reply);
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    int ready = readable ? 1 : poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
    readable = false;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      // Closing the connection withdraws the command from a server that has not read it yet.
      CloseSocket();
      auto info = RefreshServer();
      std::string fate = "; " + what +
                         " was withdrawn: a server that had not begun it drops it, "
                         "but one that had may still finish it: check before repeating it";
      if (!info.ok())
        return Result<TensorRecord>(Status(info.status().code(), info.status().message() + fate));
      return Result<TensorRecord>(
          Status(ErrorCode::kTimeout, std::string("no reply to ") + OpName(out.cmd.op) + " '" +
                                          out.cmd.name + "' within " + out.wait +
                                          " s (the server is busy or stopped)" + fate));
    }
    ssize_t n = recv(cmd_fd_.get(), buf, sizeof(buf), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      CloseSocket();
      (void)RefreshServer();
      return Result<TensorRecord>(
          Status(ErrorCode::kUnavailable,
                 "the server closed its command socket before answering " + what +
                     " (it stopped or failed), so it may or may not have taken effect: "
                     "check before repeating it"));
    }
    socket_buf_.append(buf, static_cast<size_t>(n));
  }
}

Result<HeartbeatRecord> Transport::RefreshServer() {
  socket_buf_.clear();
  return server_.Refresh();
}

Result<TensorRecord> Transport::QueueRequest(const Outgoing& out) {
  MCD_RETURN_IF_ERROR(redis_.Append({"LPUSH", out.queue, out.body}));
  MCD_RETURN_IF_ERROR(redis_.Append({"BLPOP", out.reply_key, out.wait}));
  auto pushed = redis_.ReadReply();
  auto popped = redis_.ReadReply();
  if (!pushed.ok()) return pushed.status();
  if (pushed->type == RedisValue::Type::kError) {
    return RedisErrorStatus("LPUSH " + out.queue, pushed->str);
  }
  return ServerReply(out, std::move(popped));
}

Result<TensorRecord> Transport::ServerReply(const Outgoing& out, Result<RedisValue> popped) {
  if (!popped.ok()) return popped.status();
  if (popped->type == RedisValue::Type::kError) {
    return RedisErrorStatus("BLPOP", popped->str);
  }
  if (popped->is_nil() || popped->elements.size() != 2) return Unanswered(out);
  return RecordFromReply(popped->elements[1].str);
}

Result<TensorRecord> Transport::Unanswered(const Outgoing& out) {
  MCD_RETURN_IF_ERROR(redis_.Append({"LREM", out.queue, "1", out.body}));
  MCD_RETURN_IF_ERROR(redis_.Append({"LPOP", out.reply_key}));
  auto removed = redis_.ReadReply();
  auto late = redis_.ReadReply();
  if (late.ok() && late->type == RedisValue::Type::kString) return RecordFromReply(late->str);
  if (!removed.ok()) return removed.status();
  bool withdrawn = removed->type == RedisValue::Type::kInteger && removed->integer == 1;
  std::string what = std::string("the ") + OpName(out.cmd.op) + " of '" + out.cmd.name + "'";
  std::string fate = withdrawn ? "; " + what + " was withdrawn from the queue, nothing changed"
                               : "; the server had taken " + what +
                                     ", which may still take effect: check before repeating it";
  auto info = server_.Read();
  if (!info.ok()) return Status(info.status().code(), info.status().message() + fate);
  return Status(ErrorCode::kTimeout, std::string("no reply to ") + OpName(out.cmd.op) + " '" +
                                         out.cmd.name + "' within " + out.wait +
                                         " s (the server is busy or the queue is long)" + fate);
}

}  // namespace mcd
