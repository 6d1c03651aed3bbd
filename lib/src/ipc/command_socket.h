// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The server's command socket: the same JSON commands as the lifecycle list, sent by processes
// of the server's machine straight to the server, one per line, each answered with the reply
// line that the list's reply key would have held. A tensor created this way is the same as one
// created through the list (same hash, same handle); only the command and its reply skip Redis.
// Main thread of the server only: nothing here blocks or starts a thread. Private to libmemcuda.
#pragma once

#include <poll.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ipc/unix_socket.h"
#include "memcuda/status.h"

namespace mcd {

class CommandSocket {
 public:
  // A command line as it arrived, and the connection its reply goes to.
  struct Incoming {
    uint64_t conn = 0;
    std::string line;
    bool overlong = false;  // the line ran past the limit: `line` holds its start only
  };

  // At most `max_connections` are served at once; one more is sent `refusal` (a reply line
  // with no req, which a client takes as "use the queue") and closed. So are connections that
  // come when the process is out of descriptors, so that they are not left pending.
  static Result<std::unique_ptr<CommandSocket>> Listen(const std::string& path, PeerPolicy policy,
                                                       size_t max_connections, std::string refusal);
  ~CommandSocket();  // closes every connection and removes the socket
  CommandSocket(const CommandSocket&) = delete;
  CommandSocket& operator=(const CommandSocket&) = delete;
  const std::string& path() const { return path_; }

  // The descriptors to poll for input: the listening socket, then every connection still read
  // from (whose ids go to `ids` when given, in the same order).
  void AddPollFds(std::vector<pollfd>& fds, std::vector<uint64_t>* ids = nullptr) const;
  // Accepts the connections waiting and reads what every connection sent, without blocking:
  // whole lines, in the order they came. A connection found closed takes its lines not yet
  // handed out with it: its client gave up on them (timed out or died), so they are dropped,
  // never applied. A line longer than `max_line` bytes comes out as `overlong`, and nothing
  // more is read from its connection: answer it, then Close it.
  void Collect(std::vector<Incoming>& out, size_t max_line);
  // Sends one reply line (a newline is added) to `conn`; false when that connection is gone. A
  // client that does not read its replies is cut off rather than waited for.
  bool Send(uint64_t conn, std::string_view line);
  void Close(uint64_t conn);
  size_t connections() const { return conns_.size(); }

 private:
  CommandSocket() = default;
  void Accept();
  // Sends the refusal to `fd` and logs it, once per burst.
  void Refuse(UniqueFd fd, const std::string& why);

  struct Conn {
    UniqueFd fd;
    std::string pending;  // bytes of a line not complete yet
    bool cut = false;     // sent an overlong line: read no more
  };
  std::string path_;
  PeerPolicy policy_;
  UniqueFd listen_fd_;
  UniqueFd reserve_fd_;  // given up for a moment to accept and refuse when out of descriptors
  size_t max_connections_ = 0;
  std::string refusal_;
  uint64_t refused_ = 0;  // connections refused since the last one served
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Conn> conns_;
};

}  // namespace mcd
