// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// For unit tests of the server's modules: a client of the command socket at `path` that sends
// one line and reads one reply line, and a wait for the intake to collect what was sent.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "server/intake.h"

namespace mcd::test {

class SocketClient {
 public:
  explicit SocketClient(const std::string& path) : fd_(socket(AF_UNIX, SOCK_STREAM, 0)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~SocketClient() { close(fd_); }
  void Send(const std::string& line) {
    std::string out = line + "\n";
    EXPECT_EQ(write(fd_, out.data(), out.size()), static_cast<ssize_t>(out.size()));
  }
  // The next reply line (without its newline), waiting up to 20 s; "" when none came.
  std::string ReadLine() {
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    char c;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      if (read(fd_, &c, 1) != 1 || c == '\n') break;
      line += c;
    }
    return line;
  }

 private:
  int fd_;
};

// Collects the intake's socket until a line came (20 s at most).
inline void CollectSocketLine(Intake& intake) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!intake.has_socket_lines() && std::chrono::steady_clock::now() < deadline) {
    poll(nullptr, 0, 5);
    intake.CollectSocket();
  }
}

}  // namespace mcd::test
