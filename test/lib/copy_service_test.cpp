// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The UCX copy service (server/copy_service_ucx.cpp) on its own, with the raw UCX peer of
// test/tools/ucx_peer.cpp on the other side, over TCP on loopback: what the service does with
// reads nobody takes, and with answers from a peer that learnt a real fetch id.
#include "server/copy_service.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "test_support.h"

namespace mcd {
namespace {

class CopyServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    struct stat peer;
    if (stat(test::ToolPath("ucx_peer").c_str(), &peer) != 0) {
      GTEST_SKIP() << "no ucx_peer in this build (UCX's headers or libucp missing)";
    }
    // As copy_test's servers: no mmap patching (it crashes LeakSanitizer's check at exit).
    for (const auto& [name, value] : Env()) setenv(name.c_str(), value.c_str(), 1);
    auto started = CopyService::Start(nullptr);
    if (!started.ok()) GTEST_SKIP() << "no UCX here: " << started.status().ToString();
    service_ = std::move(started).value();
  }
  static std::map<std::string, std::string> Env() {
    return {{"UCX_MEM_MMAP_HOOK_MODE", "none"}, {"UCX_NET_DEVICES", "lo"}, {"UCX_TLS", "tcp"}};
  }
  // How many lines of `out` start with `prefix`.
  static size_t Lines(const std::string& out, const std::string& prefix) {
    size_t n = 0;
    for (size_t at = 0; at < out.size(); at = out.find('\n', at) + 1) {
      if (out.compare(at, prefix.size(), prefix) == 0) ++n;
      if (out.find('\n', at) == std::string::npos) break;
    }
    return n;
  }

  // The worker address a `ucx_peer serve` prints into `log`, once it has; empty after 20 s.
  static std::string PeerAddress(const std::string& log) {
    std::string address;
    test::WaitFor(
        [&] {
          std::string out = test::ReadFile(log);
          size_t at = out.find("address ");
          size_t end = out.find('\n', at);
          if (at == std::string::npos || end == std::string::npos) return false;
          address = out.substr(at + 8, end - at - 8);
          return true;
        },
        20000);
    return address;
  }
  // Fetches tensor "t" of the peer at `address` into `into`, in place, against a grant it never
  // checks.
  Status FetchInto(const std::string& address, std::string& into,
                   uint64_t piece_bytes = kCopyPieceBytes, int timeout_ms = 30000) {
    CopyGrant grant{std::string(16, 'g'), std::string(16, 't')};
    CopyService::Sink sink;
    sink.bytes = into.size();
    sink.into = into.data();
    return service_->Fetch(address, "t", 1, grant, "asker", sink, piece_bytes, timeout_ms);
  }

  test::TempDir dir_;
  std::unique_ptr<CopyService> service_;
};

// Nobody takes the reads (a serving loop that is busy): past 1024 waiting, each read is answered
// unavailable at once, not dropped for its asker to wait out its timeout, and counted.
TEST_F(CopyServiceTest, ReadsPastTheWaitingLimitAreAnsweredUnavailableAtOnce) {
  constexpr int kReads = 1100, kLimit = 1024;
  auto peer = test::Run({test::ToolPath("ucx_peer"), "reads", service_->address_hex(), "t", "1",
                         std::to_string(kReads), std::to_string(kReads - kLimit)},
                        Env());
  ASSERT_EQ(peer.exit_code, 0) << peer.err;
  EXPECT_EQ(Lines(peer.out, "answer code=6 bytes=0"), static_cast<size_t>(kReads - kLimit))
      << "reads past the limit were not answered unavailable:\n"
      << peer.out << peer.err;
  EXPECT_EQ(Lines(peer.out, "answer "), static_cast<size_t>(kReads - kLimit)) << peer.out;
  CopyService::Waiting waiting = service_->TakeReads();
  EXPECT_EQ(waiting.reads.size(), static_cast<size_t>(kLimit));
  EXPECT_EQ(waiting.turned_away, static_cast<uint64_t>(kReads - kLimit));
  EXPECT_EQ(service_->TakeReads().turned_away, 0u) << "counted once";
}

// A read that names another worker's address than the one it came from (here a second peer's):
// the service cannot take the connection it came on over, so it answers unavailable at once, on
// that connection, and hands the read to nobody.
TEST_F(CopyServiceTest, AReadNamingAnotherWorkersAddressIsRefusedAtOnce) {
  std::string file = dir_.path() + "/other.bin";
  std::ofstream(file, std::ios::binary) << test::RandomBytes(64, 47);
  std::string log = dir_.path() + "/other.log";
  test::Background other({test::ToolPath("ucx_peer"), "serve", service_->address_hex(), file},
                         Env(), log);
  std::string foreign = PeerAddress(log);
  ASSERT_FALSE(foreign.empty()) << test::ReadFile(log);
  auto peer = test::Run(
      {test::ToolPath("ucx_peer"), "read", service_->address_hex(), "t", "1", foreign}, Env());
  ASSERT_EQ(peer.exit_code, 0) << peer.err;
  EXPECT_EQ(Lines(peer.out, "answer code=6 bytes=0"), 1u) << peer.out << peer.err;
  EXPECT_EQ(Lines(peer.out, "answer "), 1u) << peer.out;
  EXPECT_TRUE(service_->TakeReads().reads.empty()) << "the read was handed on";
}

// An asker connected without failure reporting (no server of this build is): UCX gives its
// connection up when the service tries to take it over, so the read goes unanswered, and the
// service takes the next asker's read as before.
TEST_F(CopyServiceTest, AReadOnAConnectionWithoutFailureReportingIsLeftAndTheServiceServesOn) {
  auto unreported_env = Env();
  unreported_env["UCX_PEER_UNREPORTED"] = "1";
  auto unreported =
      test::Run({test::ToolPath("ucx_peer"), "reads", service_->address_hex(), "t", "1", "1", "0"},
                unreported_env);
  ASSERT_EQ(unreported.exit_code, 0) << unreported.err;
  auto reported = test::Run(
      {test::ToolPath("ucx_peer"), "reads", service_->address_hex(), "t", "1", "1", "0"}, Env());
  ASSERT_EQ(reported.exit_code, 0) << reported.err;
  size_t taken = 0;
  EXPECT_TRUE(test::WaitFor(
      [&] {
        taken += service_->TakeReads().reads.size();
        return taken >= 1;
      },
      10000));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  taken += service_->TakeReads().reads.size();
  EXPECT_EQ(taken, 1u) << "the read without failure reporting was taken";
}

// A peer that learnt the real fetch id (here it is the asked server itself, answering from a
// second worker of its own, with and without a reply endpoint) cannot fill the fetch: only the
// answer from the endpoint the read went to counts. Its forged answers go a second before it.
TEST_F(CopyServiceTest, AnAnswerWithTheRealFetchIdFromAnotherEndpointFillsNothing) {
  std::string genuine = test::RandomBytes(4096, 44);
  std::string file = dir_.path() + "/genuine.bin";
  std::ofstream(file, std::ios::binary) << genuine;
  std::string log = dir_.path() + "/peer.log";
  test::Background peer({test::ToolPath("ucx_peer"), "serve", service_->address_hex(), file}, Env(),
                        log);
  std::string address = PeerAddress(log);
  ASSERT_FALSE(address.empty()) << test::ReadFile(log);
  std::string into(genuine.size(), '\0');
  Status got = FetchInto(address, into);
  ASSERT_TRUE(got.ok()) << got.ToString() << test::ReadFile(log);
  EXPECT_TRUE(into == genuine) << "the fetch took a forged answer ("
                               << (into == std::string(into.size(), '\xa5') ? "0xa5 bytes"
                                                                            : "other bytes")
                               << ")";
  EXPECT_EQ(peer.Wait(30), 0) << test::ReadFile(log);
  EXPECT_NE(test::ReadFile(log).find("answered"), std::string::npos) << test::ReadFile(log);
}

// The asked server itself answering with a piece that does not fit the fetch (out of its place,
// of a tensor of another size, a byte short): the fetch fails, naming what came, and not a byte
// is written.
TEST_F(CopyServiceTest, APieceThatDoesNotFitFailsTheFetchAndWritesNothing) {
  std::string genuine = test::RandomBytes(4096, 45);
  std::string file = dir_.path() + "/genuine.bin";
  std::ofstream(file, std::ios::binary) << genuine;
  for (const std::string how : {"offset", "total", "short"}) {
    SCOPED_TRACE(how);
    std::string log = dir_.path() + "/amiss-" + how + ".log";
    test::Background peer({test::ToolPath("ucx_peer"), "serve", service_->address_hex(), file, how},
                          Env(), log);
    std::string address = PeerAddress(log);
    ASSERT_FALSE(address.empty()) << test::ReadFile(log);
    std::string into(genuine.size(), '\0');
    Status got = FetchInto(address, into);
    EXPECT_EQ(got.code(), ErrorCode::kUnexpectedReply) << got.ToString();
    EXPECT_NE(got.message().find("not a piece of"), std::string::npos) << got.ToString();
    EXPECT_TRUE(into == std::string(into.size(), '\0')) << "bytes were written";
    EXPECT_EQ(peer.Wait(30), 0) << test::ReadFile(log);
  }
}

// The asked server sends the first of three pieces and then nothing, its connection open (a
// server stopped, or stuck): the fetch fails once no piece has come for its limit, naming what
// is missing, rather than waiting as long as the connection lasts.
TEST_F(CopyServiceTest, AFetchWhosePiecesStopComingFailsAfterItsLimit) {
  constexpr uint64_t kPiece = 64 * 1024;
  std::string genuine = test::RandomBytes(3 * kPiece, 46);
  std::string file = dir_.path() + "/genuine.bin";
  std::ofstream(file, std::ios::binary) << genuine;
  std::string log = dir_.path() + "/stall.log";
  test::Background peer(
      {test::ToolPath("ucx_peer"), "serve", service_->address_hex(), file, "stall"}, Env(), log);
  std::string address = PeerAddress(log);
  ASSERT_FALSE(address.empty()) << test::ReadFile(log);
  std::string into(genuine.size(), '\0');
  auto t0 = std::chrono::steady_clock::now();
  Status got = FetchInto(address, into, kPiece, 2000);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(got.code(), ErrorCode::kTimeout) << got.ToString();
  EXPECT_NE(got.message().find("2 of its pieces still to come"), std::string::npos)
      << got.ToString();
  EXPECT_GE(took, std::chrono::milliseconds(2000));
  EXPECT_LT(took, std::chrono::milliseconds(8000)) << "waited for the stalled peer's connection";
  EXPECT_TRUE(into.compare(0, kPiece, genuine, 0, kPiece) == 0) << "the first piece came amiss";
  EXPECT_EQ(peer.Wait(30), 0) << test::ReadFile(log);
  EXPECT_NE(test::ReadFile(log).find("stalled"), std::string::npos) << test::ReadFile(log);
}

}  // namespace
}  // namespace mcd
