#include "server/intake.h"

#include <poll.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "common/log.h"
#include "common/spin.h"
#include "memcuda/protocol.h"
#include "protocol/json_codec.h"

namespace mcd {

Intake::Intake(RedisConnection& redis, const ServerOptions& opt)
    : redis_(redis),
      opt_(opt),
      queue_key_(opt.keys.NodeQueue(opt.node)),
      processing_key_(opt.keys.Processing(opt.node)) {}

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
  size_t bound = std::clamp<size_t>(static_cast<size_t>(files.rlim_cur / 4), 4, kMaxSocketConnections);
  Status refused(ErrorCode::kUnavailable,
                 "the server's command socket is at its limit of " + std::to_string(bound) +
                     " connections; send through the queue");
  MCD_ASSIGN_OR_RETURN(socket_, CommandSocket::Listen(path, policy, bound,
                                                      ErrorReplyJson("", nullptr, refused)));
  Log(LogLevel::kDebug, "command socket: at most " + std::to_string(bound) + " connections");
  return Status::Ok();
}

Result<RedisValue> Intake::WaitForCommand() {
  if (!socket_) {
    MCD_RETURN_IF_ERROR(SendTake());
    MCD_RETURN_IF_ERROR(ReadMarkersRemoved());
    return redis_.ReadCommandReply("BLMOVE");
  }
  // A socket client that just had its reply often sends its next command soon: look for it a
  // while before blocking, since the blocking take costs a wake and a marker to call off.
  // Commands in the queue wait meanwhile, which is why the spin is short by default.
  if (last_from_socket_ && SpinUntil([this] {
        CollectSocket();
        return !socket_in_.empty();
      }, ServerSpinMicros())) {
    return RedisValue{};
  }
  MCD_RETURN_IF_ERROR(SendTake());
  std::vector<pollfd> fds;
  for (;;) {
    // Redis answered (the LREM sent ahead, then the take); one read may bring both, and the
    // take's answer is then no longer on the socket to wake the poll.
    bool answered = redis_.ReplyBuffered();
    if (!answered) {
      fds.clear();
      fds.push_back(pollfd{redis_.fd(), POLLIN, 0});
      socket_->AddPollFds(fds);
      int n = poll(fds.data(), fds.size(), redis_.timeout_ms());
      if (n < 0 && errno == EINTR) continue;
      // No answer in time: ReadCommandReply says what is wrong.
      if (n <= 0) break;
      answered = fds[0].revents != 0;
    }
    if (answered && !lrem_pending_) break;
    if (answered) {
      MCD_RETURN_IF_ERROR(ReadMarkersRemoved());
      continue;
    }
    CollectSocket();
    if (!socket_in_.empty()) return CallOffTake();
  }
  MCD_RETURN_IF_ERROR(ReadMarkersRemoved());
  return redis_.ReadCommandReply("BLMOVE");
}

Result<RedisValue> Intake::CallOffTake() {
  // Without a connection for the marker, the BLMOVE answers by its own timeout (a second).
  if (!wake_conn_ || !wake_conn_->connected()) {
    RedisOptions ropt;
    ropt.command_timeout_ms = 2000;
    auto conn = RedisConnection::Connect(opt_.redis_url, ropt);
    if (conn.ok()) wake_conn_ = std::move(conn).value();
  }
  Status woken = wake_conn_ ? Wake(*wake_conn_) : Status::Ok();
  if (!woken.ok() && wake_conn_->connected()) {
    // Redis refuses the marker (out of memory, a read-only replica), so it would refuse these
    // commands' changes too: their clients hear why now, not after the take's timeout.
    RefuseSocketLines(Status(woken.code(), "Redis refused to wake the server's take of commands (" +
                                               woken.message() + "); nothing changed"));
  }
  MCD_RETURN_IF_ERROR(ReadMarkersRemoved());
  return redis_.ReadCommandReply("BLMOVE");
}

Status Intake::Wake(RedisConnection& conn) const {
  return conn.Command({"RPUSH", queue_key_, kWakeMarker}).status();
}

bool Intake::IsWakeMarker(const std::string& taken) {
  if (taken != kWakeMarker) return false;
  ++markers_taken_;
  return true;
}

Status Intake::SendTake() {
  // The markers taken leave the processing list in the same write as the take, and its reply is
  // read as it comes: no round trip of its own on a wake's way back to sleep.
  lrem_pending_ = markers_taken_ > 0;
  if (lrem_pending_)
    MCD_RETURN_IF_ERROR(redis_.Append({"LREM", processing_key_, "0", kWakeMarker}));
  MCD_RETURN_IF_ERROR(redis_.Append({"BLMOVE", queue_key_, processing_key_, "RIGHT", "LEFT", "1"}));
  return redis_.FlushOutput();
}

Status Intake::ReadMarkersRemoved() {
  if (!lrem_pending_) return Status::Ok();
  lrem_pending_ = false;
  auto removed = redis_.ReadCommandReply("LREM");
  if (removed.ok()) {
    markers_taken_ = 0;
  } else if (!redis_.connected()) {
    return removed.status();
  }  // refused: tried again with the next take, whose answer is still to be read
  return Status::Ok();
}

void Intake::RemoveMarkersAtStop() {
  if (!redis_.connected()) return;
  for (const std::string& list : {queue_key_, processing_key_})
    (void)redis_.Command({"LREM", list, "0", kWakeMarker});
  markers_taken_ = 0;
}

void Intake::CollectSocket() {
  if (socket_) socket_->Collect(socket_in_, kMaxCommandBytes);
}

std::vector<Intake::Incoming> Intake::TakeSocketLines() {
  std::vector<Incoming> out = std::move(socket_in_);
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
    if (status.code() == ErrorCode::kUnexpectedReply)
      why += " (is '" + queue_key_ + "' a list?)";
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
