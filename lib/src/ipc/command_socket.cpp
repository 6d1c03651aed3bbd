// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "ipc/command_socket.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>

#include "common/log.h"

namespace mcd {

Result<std::unique_ptr<CommandSocket>> CommandSocket::Listen(const std::string& path,
                                                             PeerPolicy policy,
                                                             size_t max_connections,
                                                             std::string refusal) {
  std::unique_ptr<CommandSocket> socket(new CommandSocket());
  socket->max_connections_ = max_connections;
  socket->refusal_ = std::move(refusal) + "\n";
  socket->reserve_fd_.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));
  MCD_ASSIGN_OR_RETURN(socket->listen_fd_, ListenUnix(path, policy, 256));
  fcntl(socket->listen_fd_.get(), F_SETFL,
        fcntl(socket->listen_fd_.get(), F_GETFL) | O_NONBLOCK);  // Accept never waits
  socket->path_ = path;
  socket->policy_ = policy;
  return socket;
}

CommandSocket::~CommandSocket() {
  if (listen_fd_) unlink(path_.c_str());
}

void CommandSocket::AddPollFds(std::vector<pollfd>& fds, std::vector<uint64_t>* ids) const {
  fds.push_back(pollfd{listen_fd_.get(), POLLIN, 0});
  [[maybe_unused]] size_t listen_at = fds.size() - 1;
  [[maybe_unused]] size_t ids_before = ids != nullptr ? ids->size() : 0;
  for (const auto& [id, conn] : conns_) {
    if (conn.cut) continue;
    // POLLRDHUP: a client that closed after sending is seen closing along with its bytes.
    fds.push_back(pollfd{conn.fd.get(), POLLIN | POLLRDHUP, 0});
    if (ids != nullptr) ids->push_back(id);
  }
  // Collect pairs each connection's pollfd with its id by position.
  assert(ids == nullptr || ids->size() - ids_before == fds.size() - listen_at - 1);
}

void CommandSocket::Accept() {
  for (;;) {
    UniqueFd fd(accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd && (errno == EMFILE || errno == ENFILE) && reserve_fd_) {
      // Out of descriptors, the pending connection would keep the listening socket readable
      // and the serving loop spinning: the reserve makes room to take it and turn it away.
      reserve_fd_.reset();
      // (accept4 takes a descriptor before it looks for a connection: EMFILE says nothing of
      // whether one waits. This second try does.)
      fd.reset(accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      bool waited = static_cast<bool>(fd);
      if (waited) Refuse(std::move(fd), "out of file descriptors");
      reserve_fd_.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (waited) continue;
      return;
    }
    if (!fd) return;  // EAGAIN: none left (or a transient failure: the client sees a refusal)
    std::string who;
    if (!PeerAllowed(fd.get(), policy_, who)) {
      Log(LogLevel::kWarn, "command socket: refused " + who + " (not the server's user or group)");
      continue;
    }
    if (conns_.size() >= max_connections_) {
      Refuse(std::move(fd), std::to_string(max_connections_) + " connections open, the limit");
      continue;
    }
    if (refused_ > 0) {
      Log(LogLevel::kInfo, "command socket: serving new connections again after refusing " +
                               std::to_string(refused_));
      refused_ = 0;
    }
    assert(conns_.count(next_id_) == 0);  // ids are never reused
    conns_[next_id_++] = Conn{std::move(fd), {}};
  }
}

void CommandSocket::Refuse(UniqueFd fd, const std::string& why) {
  (void)send(fd.get(), refusal_.data(), refusal_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (refused_++ == 0) {
    Log(LogLevel::kWarn,
        "command socket: turning new connections away (" + why + "); their clients use the queue");
  }
}

void CommandSocket::Collect(std::vector<Incoming>& out, size_t max_line) {
  // One poll says where there is something: a spinning server calls this in a loop, and a
  // failed accept4 or recv costs a system call each (accept4 even allocates a socket first).
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  AddPollFds(fds, &ids);
  if (poll(fds.data(), fds.size(), 0) <= 0) return;
  std::vector<std::pair<uint64_t, short>> ready;
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) ready.emplace_back(ids[i - 1], fds[i].revents);
  }
  if (fds[0].revents != 0) Accept();  // new connections are read from on the next call
  char buf[16384];
  for (auto [id, revents] : ready) {
    Conn& conn = conns_.at(id);
    size_t first = out.size();
    bool gone = false;
    // Read until the socket is empty. A client that sent its command and then closed has its
    // close seen here (POLLRDHUP), before its command is handed out.
    bool closing = (revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    for (;;) {
      ssize_t n = recv(conn.fd.get(), buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        gone = true;
        break;
      }
      size_t start = 0;
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        if (buf[i] != '\n') continue;
        conn.pending.append(buf + start, i - start);
        start = i + 1;
        if (!conn.pending.empty() && conn.pending.back() == '\r') conn.pending.pop_back();
        if (!conn.pending.empty()) out.push_back(Incoming{id, std::move(conn.pending), false});
        conn.pending.clear();
      }
      conn.pending.append(buf + start, static_cast<size_t>(n) - start);
      size_t keep = first;
      while (keep < out.size() && out[keep].line.size() <= max_line) ++keep;
      if (keep < out.size() || conn.pending.size() > max_line) {
        // The lines before the long one count; the long one is answered; the rest is not read.
        std::string head = keep < out.size() ? out[keep].line : conn.pending;
        head.resize(std::min<size_t>(head.size(), 200));
        out.resize(keep);
        out.push_back(Incoming{id, std::move(head), true});
        conn.pending.clear();
        conn.cut = true;
        break;
      }
      // A short read emptied the socket: asking again would only hear EAGAIN.
      if (static_cast<size_t>(n) < sizeof(buf) && !closing) break;
    }
    if (gone) {
      out.resize(first);  // the client gave up on them
      Close(id);
    }
  }
}

bool CommandSocket::Send(uint64_t conn, std::string_view line) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return false;
  std::string text(line);
  text.push_back('\n');
  size_t sent = 0;
  while (sent < text.size()) {
    ssize_t n = send(it->second.fd.get(), text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Gone, or its receive buffer full of replies it never read (EAGAIN): cut it off.
      Close(conn);
      return false;
    }
    sent += static_cast<size_t>(n);
  }
  return true;
}

void CommandSocket::Close(uint64_t conn) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  conns_.erase(it);
}

}  // namespace mcd
