// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Connecting a Client (Client::Impl, client_impl.h): the Redis connection, the node and its
// server's heartbeat, the holder of this client's references, and the parts made once the node
// is known. The client's thread.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "client/client_impl.h"
#include "common/process.h"
#include "redis/lua_scripts.h"

namespace mcd {

bool CommandsViaQueue() {
  const char* via_queue = std::getenv("MCD_VIA_QUEUE");
  return via_queue != nullptr && *via_queue != '\0' && std::strcmp(via_queue, "0") != 0;
}

Client::Impl::Impl(ClientOptions options)
    : opt_(std::move(options)), retry_(opt_.timeout_ms, opt_.redis_url.Redacted()) {
  if (CommandsViaQueue()) opt_.command_socket = false;
}

// Tries again within the timeout while Redis drops the connection it accepted or says it is
// loading or failing over: a tool started while Redis loads waits for it. A Redis that is not
// there (connection refused, no socket file) is unavailable at once: waiting would only turn a
// wrong address into a "try again" after the whole timeout. But a master that the sentinels
// still name and that refuses is a failover under way (RedisConnection says try_again): waited
// through, and "try again" if it lasts the timeout.
Status Client::Impl::Connect() {
  if (opt_.node.empty()) {
    const char* env = std::getenv("MCD_NODE");
    node_given_ = env != nullptr && env[0] != '\0';
    opt_.node = node_given_ ? env : HostName();
  } else {
    node_given_ = true;
  }
  MCD_ASSIGN_OR_RETURN(holder_, ResolveHolder(opt_.holder_pid));
  Backoff backoff(opt_.timeout_ms);
  for (;;) {
    Status connected = ConnectOnce();
    bool away = connected.code() == ErrorCode::kTryAgain ||
                (connected.code() == ErrorCode::kUnavailable && redis_ && !redis_->connected());
    // A Redis back from a restart or a load has no live heartbeat until the server writes it
    // again, a moment after Redis answers: "no server" then is waited through too.
    bool heartbeat_due = connected.code() == ErrorCode::kUnavailable && retry_.AwayLately();
    if (connected.ok() || (!away && !heartbeat_due)) return connected;
    if (away) retry_.MarkAway();
    if (!backoff.Wait()) {
      if (heartbeat_due) return connected;
      if (connected.code() == ErrorCode::kTryAgain) return connected;
      return Status(ErrorCode::kTryAgain,
                    "Redis did not answer within " + std::to_string(opt_.timeout_ms) +
                        " ms (not running, or restarting): try again once it is up (" +
                        connected.message() + ")");
    }
  }
}

Status Client::Impl::ConnectOnce() {
  // One socket timeout for everything, with room for a request's BLPOP (which waits
  // timeout_ms itself): no timeout switching on every request.
  RedisOptions ropt;
  ropt.command_timeout_ms = opt_.timeout_ms + 2000;
  reads_.reset();  // the parts go before the connection they use
  script_.reset();
  transport_.reset();
  redis_.reset();
  MCD_ASSIGN_OR_RETURN(redis_, RedisConnection::Connect(opt_.redis_url, ropt));
  server_ = std::make_unique<ServerView>(*redis_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
  if (!opt_.require_server) {
    MakeParts("");
    return Status::Ok();
  }
  // The heartbeat check and the reference script's loading share one round trip, so that a
  // fresh process's first Get is a single EVALSHA.
  MCD_RETURN_IF_ERROR(redis_->Append({"HGETALL", opt_.keys.Server(opt_.node)}));
  MCD_RETURN_IF_ERROR(redis_->Append({"SCRIPT", "LOAD", kRefScript}));
  auto heartbeat = redis_->ReadReply();
  auto sha = redis_->ReadReply();
  if (!heartbeat.ok()) return heartbeat.status();
  // No heartbeat for a node nobody named: look for the only live server before failing (the
  // failure, if it comes, lists the live ones).
  bool none = heartbeat->type == RedisValue::Type::kArray && heartbeat->elements.empty();
  if (none && !node_given_) MCD_RETURN_IF_ERROR(DiscoverNode());
  auto info = node_discovered_ ? server_->Read() : server_->Parse(heartbeat.value());
  if (!info.ok()) return info.status();
  server_->Adopt(std::move(info).value());
  MakeParts(sha.ok() && sha->type == RedisValue::Type::kString ? sha->str : "");
  return server_->Alive();  // a dead server's heartbeat: "no server" at once, not a timeout
}

// The parts that build keys from the node, made once it is known (DiscoverNode may change it):
// a reference filed under a node no server watches would never be given back. `sha`: the
// reference script's, "" when it is not loaded yet.
void Client::Impl::MakeParts(const std::string& sha) {
  TransportOptions topt{opt_.node, opt_.keys, opt_.timeout_ms, opt_.command_socket};
  transport_ = std::make_unique<Transport>(*redis_, std::move(topt), *server_);
  script_ = std::make_unique<ReferenceScript>(*redis_, opt_.node, opt_.keys, *transport_, holder_,
                                              *server_);
  if (!sha.empty()) script_->set_sha(sha);
  reads_ = std::make_unique<RecordReads>(*redis_, opt_.keys, *server_);
}

// No node was given and the host name has no server: the only live server on the Redis is the
// one meant. With none or several, the caller's error lists them.
Status Client::Impl::DiscoverNode() {
  MCD_ASSIGN_OR_RETURN(auto live, ServerView::Live(*redis_, opt_.keys));
  if (live.size() == 1 && !live[0].node.empty()) {
    opt_.node = live[0].node;
    node_discovered_ = true;
  }
  return Status::Ok();
}

// The holder that ClientOptions::holder_pid names, with its start time.
Result<std::optional<Holder>> Client::Impl::ResolveHolder(int64_t pid) {
  if (pid == kNoHolder) return std::optional<Holder>();
  if (pid < 0) return Status(ErrorCode::kInvalidArgument, "holder pid must be positive");
  Holder holder;
  holder.pid = pid == 0 ? static_cast<int64_t>(getpid()) : pid;
  holder.start = ProcessStartTime(holder.pid);
  if (holder.start == 0) {
    return Status(ErrorCode::kInvalidArgument,
                  "holder process " + std::to_string(holder.pid) + " is not running");
  }
  return std::optional<Holder>(holder);
}

}  // namespace mcd
