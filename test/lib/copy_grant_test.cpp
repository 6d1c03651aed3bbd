// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// CopyGrants (server/copy_grant.h) against a real Redis, and against sockets that answer nil to
// everything or nothing at all.
#include "server/copy_grant.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "memcuda/protocol.h"
#include "server/server_options.h"
#include "test_support.h"

namespace mcd {
namespace {

// A Unix socket listening at `path`. With `answer`, a thread accepts one connection and replies
// `answer` to each chunk it reads; without, nothing is ever accepted (the kernel's backlog takes
// the connection, and what is sent to it waits for good).
class Listener {
 public:
  Listener(const std::string& path, std::string answer) {
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    if (answer.empty()) return;
    thread_ = std::thread([this, answer] {
      int peer = accept(fd_, nullptr, nullptr);
      char buf[4096];
      while (peer >= 0 && read(peer, buf, sizeof(buf)) > 0) {
        if (write(peer, answer.data(), answer.size()) < 0) break;
      }
      if (peer >= 0) close(peer);
    });
  }
  ~Listener() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    if (thread_.joinable()) thread_.join();
  }

 private:
  int fd_ = -1;
  std::thread thread_;
};

ServerOptions Options(const std::string& url, const std::string& node) {
  ServerOptions opt;
  opt.redis_url = RedisUrl::Parse(url).value();
  opt.node = node;
  return opt;
}

// What the serving server sees of the asker's read: its grant and what it asks for.
CopyService::Read ReadOf(const CopyGrant& grant, int64_t ctime_ms) {
  CopyService::Read read;
  read.grant = grant;
  read.asker_node = "asker";
  read.ctime_ms = ctime_ms;
  read.name = "t";
  return read;
}

// The key's name is no secret (SCAN): a read with the grant's id and a wrong token is refused and
// leaves the grant, which then serves the real read, once.
TEST(CopyGrants, AWrongTokenDoesNotBurnTheGrant) {
  test::RedisServer redis;
  ServerOptions asker_opt = Options(redis.url(), "asker");
  ServerOptions server_opt = Options(redis.url(), "serving");
  CopyGrants asker(CopyGrantsOptionsOf(asker_opt)), server(CopyGrantsOptionsOf(server_opt));
  auto grant = asker.Issue("serving", "t", 1234, 60000);
  ASSERT_TRUE(grant.ok()) << grant.status().ToString();
  CopyGrant forged = *grant;
  forged.token[0] ^= 1;
  auto refused = server.Redeem({ReadOf(forged, 1234)});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].code(), ErrorCode::kPermissionDenied) << refused[0].ToString();
  auto exists =
      redis.Connect()->Command({"EXISTS", asker_opt.keys.CopyGrant(HexEncode(grant->id))});
  ASSERT_TRUE(exists.ok());
  EXPECT_EQ(exists->integer, 1) << "the wrong token burnt the grant";
  // Another tensor's ctime with the right token: refused too.
  EXPECT_EQ(server.Redeem({ReadOf(*grant, 999)})[0].code(), ErrorCode::kPermissionDenied);
  auto served = server.Redeem({ReadOf(*grant, 1234), ReadOf(*grant, 1234)});
  ASSERT_EQ(served.size(), 2u);
  EXPECT_TRUE(served[0].ok()) << served[0].ToString();
  EXPECT_EQ(served[1].code(), ErrorCode::kPermissionDenied) << "a grant served twice";
}

// SET ... NX answers nil when the key is there already: no grant was written, so none is handed
// out.
TEST(CopyGrants, AGrantWhoseKeyWasThereAlreadyIsNotIssued) {
  test::TempDir dir;
  Listener nil(dir.path() + "/nil.sock", "$-1\r\n");
  ServerOptions opt = Options("unix://" + dir.path() + "/nil.sock", "asker");
  CopyGrants grants(CopyGrantsOptionsOf(opt));
  auto grant = grants.Issue("serving", "t", 1234, 60000);
  ASSERT_FALSE(grant.ok()) << "a nil reply to SET NX was taken for a grant written";
  EXPECT_EQ(grant.status().code(), ErrorCode::kUnexpectedReply) << grant.status().ToString();
  EXPECT_NE(grant.status().message().find("there already"), std::string::npos)
      << grant.status().ToString();
}

// A Redis that takes the connection and never answers costs one command timeout (5 s); the reads
// after it are refused at once, not each after a timeout of its own.
TEST(CopyGrants, AFailedRedisIsNotAskedAgainAtOnce) {
  test::TempDir dir;
  Listener mute(dir.path() + "/mute.sock", "");
  ServerOptions opt = Options("unix://" + dir.path() + "/mute.sock", "serving");
  CopyGrants server(CopyGrantsOptionsOf(opt));
  CopyGrant grant{std::string(16, 'g'), std::string(16, 't')};
  EXPECT_EQ(server.Redeem({ReadOf(grant, 1)})[0].code(), ErrorCode::kUnavailable);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(server.Redeem({ReadOf(grant, 1)})[0].code(), ErrorCode::kUnavailable);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2))
      << "each batch of reads waited for the Redis that had failed";
}

}  // namespace
}  // namespace mcd
