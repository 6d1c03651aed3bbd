// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Taking commands: from the lifecycle list (a blocking BLMOVE into the node's processing list
// while idle, on the serving connection lent for the wait; LMOVEs sent ahead by the commit
// pipeline while busy) and from the command socket, whose commands are answered on their
// connection; each is handed on as a Request (request.h). Main thread of the server only, but for
// the Waker, which any thread calls.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "ipc/command_socket.h"
#include "memcuda/redis.h"
#include "server/recurring.h"
#include "server/request.h"

namespace mcd {

// What a server pushes onto its own queue to wake its blocking take: taken like a command, and
// dropped. Not JSON, so no command is ever mistaken for it.
inline constexpr std::string_view kWakeMarker = "wake";

// The one way to wake the blocking take, from any thread (the copy service's, the heartbeat's,
// the main one calling off its own take): pushes kWakeMarker onto the node's queue, at the end
// the take reads first, on a side connection of its own. A key of the server's own, so the Redis
// user needs no right over other connections (CLIENT UNBLOCK acts on every connection of that
// Redis, other tenants' included); and a marker that reaches Redis before the take is taken by it
// all the same. Taken while busy, it is dropped. Thread-safe.
class Waker {
 public:
  Waker(RedisUrl url, std::string queue_key)
      : url_(std::move(url)), queue_key_(std::move(queue_key)) {}
  // Ok when the marker is pushed, and when Redis cannot be reached (the take's own timeout, a
  // second, wakes it then); Redis's refusal of the RPUSH on a live connection (out of memory,
  // a read-only replica) otherwise.
  Status Wake();

 private:
  const RedisUrl url_;
  const std::string queue_key_;
  std::mutex mutex_;
  std::unique_ptr<RedisConnection> conn_;  // under mutex_; out of it during a call
};

class Intake {
 public:
  using Incoming = CommandSocket::Incoming;  // conn 0: from the lifecycle list

  // The node's queue and processing list; `waker` calls off the take when the socket has
  // commands.
  Intake(std::string queue_key, std::string processing_key, Waker& waker);
  static constexpr size_t kMaxSocketConnections = 1024;
  // Listens on the command socket at `path` for `policy`'s peers, at most a quarter of the
  // descriptor limit (raised to its hard limit first) or kMaxSocketConnections at once.
  Status ListenOnSocket(const std::string& path, const PeerPolicy& policy);
  // "" without a command socket.
  std::string socket_path() const { return socket_ ? socket_->path() : std::string(); }
  // Whether `taken` (from the list: the take's answer, the processing list at resume) is a wake
  // marker, not a command; one is removed from the processing list before the next blocking take.
  bool IsWakeMarker(const std::string& taken);

  // Idle: waits for the next command, on the list (a BLMOVE on `redis`, the serving connection
  // with nothing due, whose answer is returned) or on the command socket (its lines are kept for
  // Requests; the BLMOVE is then called off and what it answered, nil or a command moved
  // meanwhile, returned all the same).
  Result<RedisValue> WaitForCommand(RedisConnection& redis);
  // Reads what the command socket has, without blocking.
  void CollectSocket();
  bool has_socket_lines() const { return !socket_in_.empty(); }
  // The requests of a take's answer `taken` (an array of lines or one line; nil: none), wake
  // markers dropped, then those of the socket lines collected: each parsed and routed.
  std::vector<Request> Requests(RedisValue taken);
  // A request of a line from the lifecycle list (the take's, or the processing list's at resume).
  static Request FromList(std::string line);
  // Every socket command collected gets `why` as its error reply (Redis is out of reach).
  void RefuseSocketLines(const Status& why);

  // Sends a reply to the socket command of `route`, once: false when it was answered already or
  // its client is gone.
  bool Answer(const Route& route, const std::string& reply);
  bool Waiting(const Route& route) const { return socket_waiting_.count(route.token) != 0; }
  void CloseConnection(uint64_t conn);
  // At stop, once nothing wakes the take any more: the markers left in the queue and the
  // processing list are removed, on the serving connection `redis`.
  void RemoveMarkersAtStop(RedisConnection& redis);
  // Closes the socket; its clients see the connection close at once rather than wait out their
  // timeout.
  void CloseSocket();
  // The last batch had socket commands: the next wait looks at the socket a while first.
  void set_last_from_socket(bool from_socket) { last_from_socket_ = from_socket; }

  // Redis answered the take with an error on a live connection (out of memory under maxmemory,
  // a replica that became read-only, a queue key of the wrong type): says so, and waits before
  // the next try, 0.1 s at first, then up to a second (less when `stopping` turns true).
  void PauseAfterRefusedTake(const Status& status, const std::function<bool()>& stopping);
  // Redis answered a take (the one sent ahead of a batch, or the blocking one): the first answer
  // after refused takes says so. Commands from the socket alone are no answer of Redis.
  void TakeAccepted();

 private:
  // A route for a command of socket connection `conn`, waiting for its one reply.
  Route NewRoute(uint64_t conn);
  // Spins for ServerSpinMicros looking at the command socket and, every kQueuePeekMicros, at
  // the queue (a non-blocking LMOVE on `redis`): what it found (a command moved, or nil with
  // socket lines collected), or nullopt when nothing came and the loop is to block.
  std::optional<Result<RedisValue>> SpinWithQueuePeeks(RedisConnection& redis);
  // Wakes the serving connection's BLMOVE (through the Waker) and returns its answer.
  Result<RedisValue> CallOffTake(RedisConnection& redis);
  // Reads the blocking take's answer; an answer, not an error, is a take accepted.
  Result<RedisValue> ReadTakeAnswer(RedisConnection& redis);
  // Sends the blocking take (its answer is left to read), after an LREM of the markers taken.
  Status SendTake(RedisConnection& redis);
  // Reads the reply of the LREM that SendTake sent ahead of the take, when it sent one.
  Status ReadMarkersRemoved(RedisConnection& redis);

  // How often the spin for the socket looks at the queue.
  static constexpr int kQueuePeekMicros = 50;

  const std::string queue_key_;  // the node's queue
  const std::string processing_key_;
  Waker& waker_;
  std::unique_ptr<CommandSocket> socket_;
  size_t markers_taken_ = 0;                     // wake markers in the processing list
  bool lrem_pending_ = false;                    // SendTake's LREM not answered yet
  std::vector<Incoming> socket_in_;              // socket commands collected, not yet handled
  std::unordered_set<uint64_t> socket_waiting_;  // tokens of socket commands not yet answered
  uint64_t next_token_ = 1;
  bool last_from_socket_ = false;
  Recurring take_refused_;  // takes Redis refused in a row
};

}  // namespace mcd
