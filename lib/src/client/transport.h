// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// How a client's commands reach the server and its replies come back: on the server's command
// socket when its heartbeat names one this process may use (one line out, one line back, no
// Redis on the way), else through the lifecycle list (LPUSH and a BLPOP on the reply key, in one
// write). A command that gets no reply in time is withdrawn where it still can be, so that a
// request reported as failed does not take effect later. Used by one Client, so by one thread at
// a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "client/server_view.h"
#include "memcuda/keys.h"
#include "memcuda/protocol.h"
#include "memcuda/redis.h"
#include "memcuda/unique_fd.h"

namespace mcd {

// What a Transport reads of the client's options, fixed once the node is known.
struct TransportOptions {
  std::string node;            // this client's node: named in each command, and in its req
  KeySpace keys;               // where replies come (KeySpace::Reply)
  int timeout_ms = 0;          // how long a command waits for its reply
  bool command_socket = true;  // whether the server's command socket may be used (ClientOptions)
};

// A request id: `prefix` and 32 hex digits of fresh random bits, drawn anew for every request.
// kInternal where the kernel has no random source.
Result<std::string> NewRequestId(const std::string& prefix);

class Transport {
 public:
  // A command ready to send, and where its reply will come.
  struct Outgoing {
    Command cmd;
    std::string body;       // the command's JSON
    std::string reply_key;  // the list the reply is pushed onto
    std::string wait;       // BLPOP timeout, seconds
    std::string queue;      // the node's queue (the shared one for a server that has none)
  };

  // `server`: the node's heartbeat, which names the command socket and the queue, read again
  // when the socket fails.
  Transport(RedisConnection& redis, TransportOptions opt, ServerView& server);
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Gives the command its unique req, this node and this process's pid.
  Result<Outgoing> Prepare(Command cmd);
  // Sends a command and waits for its reply: on the server's command socket when it has one,
  // else through the queue.
  Result<TensorRecord> Request(Command cmd);
  // The server's reply to `out`, as its BLPOP returned it.
  Result<TensorRecord> ServerReply(const Outgoing& out, Result<RedisValue> popped);

 private:
  // True when a connection to the server's command socket is open, or could be opened now;
  // kPermissionDenied when the socket is not served by the heartbeat's server of a trusted user.
  Result<bool> SocketReady();
  void CloseSocket();
  // One command on the socket. nullopt when it could not be sent (the server closed the
  // connection before): then nothing reached it.
  std::optional<Result<TensorRecord>> SocketRequest(const Outgoing& out);
  // The node's heartbeat read again after the command socket failed.
  Result<HeartbeatRecord> RefreshServer();
  // Pushes a command and waits for its reply: LPUSH and BLPOP go out in one write.
  Result<TensorRecord> QueueRequest(const Outgoing& out);
  // No reply in time. A command the server has not taken yet is taken back off the queue, so
  // that a request reported as failed does not take effect later, when a server gets to it: a
  // create nobody holds, or a release applied twice when the caller tries again. A reply that
  // came just after the wait still counts. The body holds the command's unique req, so the
  // LREM can only find this one command.
  Result<TensorRecord> Unanswered(const Outgoing& out);

  RedisConnection& redis_;
  const TransportOptions opt_;
  ServerView& server_;
  std::string req_prefix_;      // "<node>-<pid>-": a req is this and 128 fresh random bits
  UniqueFd cmd_fd_;             // connection to the server's command socket, when open
  std::string socket_buf_;      // what came on it past the last reply line
  std::string socket_refused_;  // a command socket that could not be connected to
};

}  // namespace mcd
