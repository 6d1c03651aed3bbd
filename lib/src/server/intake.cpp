// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/intake.h"

#include <poll.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <thread>

#include "common/log.h"
#include "common/spin.h"
#include "memcuda/protocol.h"
#include "protocol/json_codec.h"

namespace mcd {

namespace {
// Whether `fd` has something to read, without waiting.
bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}
}  // namespace

Status Waker::Wake() {
  // The connection leaves its slot for the call, so that no thread waits under the lock through
  // another's connect (up to 2 s) or RPUSH: one waking meanwhile makes a connection of its own.
  std::unique_ptr<RedisConnection> conn;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    conn = std::move(conn_);
  }
  if (!conn || !conn->connected()) {
    RedisOptions ropt;
    ropt.command_timeout_ms = 2000;
    auto made = RedisConnection::Connect(url_, ropt);
    if (!made.ok()) return Status::Ok();  // the take's own timeout wakes it then
    conn = std::move(made).value();
  }
  Status pushed = conn->Command({"RPUSH", queue_key_, kWakeMarker}).status();
  bool connected = conn->connected();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!conn_) conn_ = std::move(conn);  // else the other call's is kept, and this one closes
  }
  return connected ? pushed : Status::Ok();
}

Intake::Intake(std::string queue_key, std::string processing_key, Waker& waker)
    : queue_key_(std::move(queue_key)), processing_key_(std::move(processing_key)), waker_(waker) {}

Status Intake::ListenOnSocket(const std::string& path, const PeerPolicy& policy) {
  // As Redis does for its clients: the soft limit on descriptors raised to the hard one, and a
  // quarter of it for command-socket connections (the rest: Redis, CUDA, shared memory, the
  // pool socket). Clients past the bound are told to use the queue.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur < files.rlim_max) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, 1 << 20);
    setrlimit(RLIMIT_NOFILE, &files);
    getrlimit(RLIMIT_NOFILE, &files);
  }
  size_t bound =
      std::clamp<size_t>(static_cast<size_t>(files.rlim_cur / 4), 4, kMaxSocketConnections);
  Status refused(ErrorCode::kUnavailable, "the server's command socket is at its limit of " +
                                              std::to_string(bound) +
                                              " connections; send through the queue");
  MCD_ASSIGN_OR_RETURN(
      socket_, CommandSocket::Listen(path, policy, bound, ErrorReplyJson("", nullptr, refused)));
  Log(LogLevel::kDebug, "command socket: at most " + std::to_string(bound) + " connections");
  return Status::Ok();
}

Result<RedisValue> Intake::WaitForCommand(RedisConnection& redis) {
  if (!socket_) {
    MCD_RETURN_IF_ERROR(SendTake(redis));
    MCD_RETURN_IF_ERROR(ReadMarkersRemoved(redis));
    return ReadTakeAnswer(redis);
  }
  // A socket client that just had its reply often sends its next command soon: look for it a
  // while before blocking, since the blocking take costs a wake and a marker to call off.
  if (last_from_socket_) {
    if (std::optional<Result<RedisValue>> found = SpinWithQueuePeeks(redis)) return *found;
  }
  MCD_RETURN_IF_ERROR(SendTake(redis));
  std::vector<pollfd> fds;
  for (;;) {
    // Redis answered (the LREM sent ahead, then the take); one read may bring both, and the
    // take's answer is then no longer on the socket to wake the poll.
    bool answered = redis.ReplyBuffered();
    if (!answered) {
      fds.clear();
      fds.push_back(pollfd{redis.fd(), POLLIN, 0});
      socket_->AddPollFds(fds);
      int n = poll(fds.data(), fds.size(), redis.timeout_ms());
      if (n < 0 && errno == EINTR) continue;
      // No answer in time: ReadCommandReply says what is wrong.
      if (n <= 0) break;
      answered = fds[0].revents != 0;
    }
    if (answered && !lrem_pending_) break;
    if (answered) {
      MCD_RETURN_IF_ERROR(ReadMarkersRemoved(redis));
      continue;
    }
    CollectSocket();
    if (!socket_in_.empty()) return CallOffTake(redis);
  }
  MCD_RETURN_IF_ERROR(ReadMarkersRemoved(redis));
  return ReadTakeAnswer(redis);
}

std::optional<Result<RedisValue>> Intake::SpinWithQueuePeeks(RedisConnection& redis) {
  // The queue is looked at too, with a non-blocking LMOVE every kQueuePeekMicros, so that the
  // commands there wait no longer than that while the loop spins for the socket (a command on
  // the queue would otherwise wait out the whole spin: the 8-client pairs' p99 doubled with a
  // spin of 1 ms that looked at the socket alone). A socket command that comes while an LMOVE is
  // out waits for its answer, so where one takes longer than kQueuePeekMicros (a Redis on
  // another host) the looks stop and the spin is the socket's alone, as long as SpinMicros().
  using Clock = std::chrono::steady_clock;
  if (ServerSpinMicros() <= 0) {  // no spin: a look at the socket, and no round trip
    CollectSocket();
    if (socket_in_.empty()) return std::nullopt;
    return Result<RedisValue>(RedisValue{});
  }
  const auto peek_every = std::chrono::microseconds(kQueuePeekMicros);
  const Clock::time_point start = Clock::now();
  Clock::time_point socket_only_until = start + std::chrono::microseconds(SpinMicros());
  bool peeking = true;
  bool peek_out = false;
  bool found = false;
  bool gave_up = false;
  Result<RedisValue> peeked = RedisValue{};
  Clock::time_point next_peek = start;
  Clock::time_point sent_at = start;
  auto read_peek = [&] {
    peek_out = false;
    peeked = redis.ReadCommandReply("LMOVE");
    found = !peeked.ok() || !peeked->is_nil();
    Clock::time_point now = Clock::now();
    next_peek = now + peek_every;
    if (now - sent_at > peek_every) peeking = false;  // a slow round trip: the socket alone
  };
  SpinUntil(
      [&] {
        CollectSocket();
        Clock::time_point now = Clock::now();
        if (!peeking && !peek_out && now >= socket_only_until) gave_up = true;
        if (peeking && !peek_out && now >= next_peek) {
          Status sent = redis.Append({"LMOVE", queue_key_, processing_key_, "RIGHT", "LEFT"});
          if (sent.ok()) sent = redis.FlushOutput();
          if (!sent.ok()) {
            peeked = sent;
            found = true;
          }
          peek_out = sent.ok();
          sent_at = now;
        }
        if (peek_out && (redis.ReplyBuffered() || Readable(redis.fd()))) read_peek();
        return found || gave_up || !socket_in_.empty();
      },
      ServerSpinMicros());
  if (peek_out) read_peek();  // its answer is the connection's next: read before anything else
  if (peeked.ok() && (found || !socket_in_.empty())) TakeAccepted();  // Redis answered a take
  if (found) return peeked;
  if (!socket_in_.empty()) return Result<RedisValue>(RedisValue{});
  return std::nullopt;
}

Result<RedisValue> Intake::CallOffTake(RedisConnection& redis) {
  Status woken = waker_.Wake();
  if (!woken.ok()) {
    // Redis refuses the marker (out of memory, a read-only replica), so it would refuse these
    // commands' changes too: their clients hear why now, not after the take's timeout.
    RefuseSocketLines(Status(woken.code(), "Redis refused to wake the server's take of commands (" +
                                               woken.message() + "); nothing changed"));
  }
  MCD_RETURN_IF_ERROR(ReadMarkersRemoved(redis));
  return ReadTakeAnswer(redis);
}

Result<RedisValue> Intake::ReadTakeAnswer(RedisConnection& redis) {
  Result<RedisValue> taken = redis.ReadCommandReply("BLMOVE");
  if (taken.ok()) TakeAccepted();
  return taken;
}

bool Intake::IsWakeMarker(const std::string& taken) {
  if (taken != kWakeMarker) return false;
  ++markers_taken_;
  return true;
}

Status Intake::SendTake(RedisConnection& redis) {
  // The markers taken leave the processing list in the same write as the take, and its reply is
  // read as it comes: no round trip of its own on a wake's way back to sleep.
  lrem_pending_ = markers_taken_ > 0;
  if (lrem_pending_) MCD_RETURN_IF_ERROR(redis.Append({"LREM", processing_key_, "0", kWakeMarker}));
  MCD_RETURN_IF_ERROR(redis.Append({"BLMOVE", queue_key_, processing_key_, "RIGHT", "LEFT", "1"}));
  return redis.FlushOutput();
}

Status Intake::ReadMarkersRemoved(RedisConnection& redis) {
  if (!lrem_pending_) return Status::Ok();
  lrem_pending_ = false;
  auto removed = redis.ReadCommandReply("LREM");
  if (removed.ok()) {
    markers_taken_ = 0;
  } else if (!redis.connected()) {
    return removed.status();
  }  // refused: tried again with the next take, whose answer is still to be read
  return Status::Ok();
}

void Intake::RemoveMarkersAtStop(RedisConnection& redis) {
  if (!redis.connected()) return;
  for (const std::string& list : {queue_key_, processing_key_})
    (void)redis.Command({"LREM", list, "0", kWakeMarker});
  markers_taken_ = 0;
}

void Intake::CollectSocket() {
  if (socket_) socket_->Collect(socket_in_, kMaxCommandBytes);
}

Request Intake::FromList(std::string line) {
  Request request;
  request.raw = std::move(line);
  request.parsed = ParseCommand(request.raw, &request.req);
  return request;
}

std::vector<Request> Intake::Requests(RedisValue taken) {
  std::vector<Request> out;
  size_t listed = taken.type == RedisValue::Type::kArray ? taken.elements.size()
                  : taken.is_nil()                       ? 0
                                                         : 1;
  out.reserve(listed + socket_in_.size());
  auto from_list = [&](RedisValue& line) {
    if (!IsWakeMarker(line.str)) out.push_back(FromList(std::move(line.str)));
  };
  if (taken.type == RedisValue::Type::kArray) {
    for (RedisValue& line : taken.elements) from_list(line);
  } else if (!taken.is_nil()) {  // nil: BLMOVE timeout
    from_list(taken);
  }
  for (Incoming& in : socket_in_) {
    Request request;
    request.route = NewRoute(in.conn);
    request.raw = std::move(in.line);
    request.overlong = in.overlong;
    if (!in.overlong) request.parsed = ParseCommand(request.raw, &request.req);
    out.push_back(std::move(request));
  }
  socket_in_.clear();
  return out;
}

void Intake::RefuseSocketLines(const Status& why) {
  for (const Incoming& in : socket_in_) Answer(NewRoute(in.conn), ErrorReplyJson("", nullptr, why));
  socket_in_.clear();
}

Route Intake::NewRoute(uint64_t conn) {
  Route route{conn, next_token_++};
  socket_waiting_.insert(route.token);
  return route;
}

bool Intake::Answer(const Route& route, const std::string& reply) {
  if (socket_waiting_.erase(route.token) == 0 || !socket_) return false;
  return socket_->Send(route.conn, reply);
}

void Intake::CloseConnection(uint64_t conn) {
  if (socket_) socket_->Close(conn);
}

void Intake::CloseSocket() {
  socket_.reset();
  socket_in_.clear();
}

void Intake::PauseAfterRefusedTake(const Status& status, const std::function<bool()>& stopping) {
  if (take_refused_.Again()) {
    std::string why = status.message();
    while (!why.empty() && (why.back() == '.' || why.back() == ' ')) why.pop_back();
    if (status.code() == ErrorCode::kUnexpectedReply) why += " (is '" + queue_key_ + "' a list?)";
    int tries = take_refused_.count();
    Log(LogLevel::kError,
        "Redis refuses to hand out commands: " + why +
            (tries == 1 ? "; trying again"
                        : "; still so after " + std::to_string(tries) + " tries"));
  }
  // 0.1 s, then twice as long each time, up to a second.
  int pause_ms = 100 << std::min(take_refused_.count() - 1, 4);
  for (int waited = 0; waited < std::min(pause_ms, 1000) && !stopping(); waited += 100) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Intake::TakeAccepted() {
  if (take_refused_.count() == 0) return;
  Log(LogLevel::kInfo, "Redis hands out commands again (refused " +
                           std::to_string(take_refused_.count()) + " time(s) over " +
                           std::to_string(take_refused_.Seconds()) + " s)");
  take_refused_.Over();
}

}  // namespace mcd
