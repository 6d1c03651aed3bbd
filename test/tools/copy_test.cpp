// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Copies between nodes: mcd-create --copy-of, the bytes moved by two mcd-serve processes of
// different nodes over UCX (Debian's libucx0), on this machine's loopback (tcp; shared memory
// alone is refused). Real Redis, real servers, the real tools; the GPU case runs on GPU hosts.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "memcuda/keys.h"
#include "test_support.h"

namespace mcd {
namespace {

class Copies : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& [node, server] : servers_) {
      if (server->pid() > 0) EXPECT_EQ(server->Stop(SIGTERM), 0) << Log(node);
    }
    // What the servers a test killed left (a server removes its node's objects when it starts
    // again, which these never do): their names begin with the nodes', which hold this pid.
    for (const std::string& node : {a_, b_}) {
      for (const std::string& object : test::ShmObjects("mcd-mcd-" + node))
        shm_unlink(("/" + object).c_str());
    }
  }
  std::map<std::string, std::string> Env(const std::string& tls = "") const {
    // UCX patches mmap and munmap in every loaded library for its memory events, the sanitizer
    // runtime of an ASan build among them, where LeakSanitizer's check at exit then crashes:
    // the servers of these tests run without the patching.
    std::map<std::string, std::string> env = {{"MCD_REDIS_URL", redis_.url()},
                                              {"UCX_MEM_MMAP_HOOK_MODE", "none"},
                                              {"UCX_NET_DEVICES", "lo"}};
    if (!tls.empty()) env["UCX_TLS"] = tls;
    return env;
  }
  std::string Log(const std::string& node) const {
    return test::ReadFile(dir_.path() + "/" + node + ".log");
  }
  void Serve(const std::string& node, const std::string& tls, std::vector<std::string> extra = {},
             const std::map<std::string, std::string>& more_env = {}) {
    std::vector<std::string> argv = {test::ToolPath("mcd-serve"), "--node", node, "--heartbeat-ttl",
                                     "3"};
    if (extra.empty()) extra = {"--devices", "cpu"};
    const bool host_only = std::find(extra.begin(), extra.end(), "cpu") != extra.end();
    std::string ready_max = ready_max_.empty() && host_only ? "0" : ready_max_;
    if (!ready_max.empty()) argv.insert(argv.end(), {"--ready-max", ready_max});
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto started = [&] {  // the log is appended to by each start of the node
      std::string log = Log(node);
      size_t n = 0;
      for (size_t at = log.find("serving node"); at != std::string::npos;
           at = log.find("serving node", at + 1))
        ++n;
      return n;
    };
    size_t before = started();
    std::map<std::string, std::string> env = Env(tls);
    env.insert(more_env.begin(), more_env.end());
    servers_[node] =
        std::make_unique<test::Background>(argv, env, dir_.path() + "/" + node + ".log");
    ASSERT_TRUE(test::WaitFor([&] { return started() > before; }, 20000)) << Log(node);
  }
  // Both nodes' servers (over `tls`), b holding "src" of 1024 values; its file.
  std::string ServeBothWithSource(const std::string& tls) {
    Serve(a_, tls);
    Serve(b_, tls);
    std::string file = Pattern(1024);
    EXPECT_EQ(Tool("mcd-create", {"src", "--from", file, "--device", "cpu", "--node", b_, "-q"})
                  .exit_code,
              0);
    return file;
  }
  // Node b's server started again (over tcp, with `extra`), holding a fresh "src" made of `file`.
  void RestartWithSource(const std::string& file, const std::vector<std::string>& extra) {
    ASSERT_EQ(servers_[b_]->Stop(SIGTERM), 0);
    Serve(b_, "tcp", extra);
    ASSERT_EQ(Tool("mcd-create", {"src", "--from", file, "--device", "cpu", "--node", b_, "-q"})
                  .exit_code,
              0);
  }
  // A host tensor `name` on `node` holding what the .npy `file` holds.
  test::ProcessResult CreateFrom(const std::string& name, const std::string& file,
                                 const std::string& node) {
    return Tool("mcd-create", {name, "--from", file, "--device", "cpu", "--node", node, "-q"});
  }
  test::ProcessResult Tool(const std::string& tool, std::vector<std::string> args) {
    args.insert(args.begin(), test::ToolPath(tool));
    return test::Run(args, Env());
  }
  // A .npy file of `count` u32 values i * 2654435761 (mod 2^32): no two neighbours alike.
  std::string Pattern(size_t count) {
    std::string path = dir_.path() + "/pattern.npy";
    std::string header =
        "{'descr': '<u4', 'fortran_order': False, 'shape': (" + std::to_string(count) + ",), }";
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::ofstream out(path, std::ios::binary);
    out << "\x93NUMPY" << '\x01' << '\x00';
    uint16_t len = static_cast<uint16_t>(header.size());
    out.write(reinterpret_cast<const char*>(&len), 2);
    out << header;
    for (size_t i = 0; i < count; ++i) {
      uint32_t v = static_cast<uint32_t>(i * 2654435761u);
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
    return path;
  }
  void CopyEveryWay(const std::string& file);
  static size_t Count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  // What mcd-ls --servers says of how `node`'s server moves GPU tensors of copies.
  std::string CopiesOf(const std::string& node) {
    auto listed = Tool("mcd-ls", {"--servers", "--json"});
    for (const auto& server : nlohmann::json::parse(listed.out)) {
      if (server["node"] == node) return server["node_copies"];
    }
    return "(not listed)";
  }
  std::string HashField(const std::string& name, const std::string& field) {
    return HashFieldOf(keys_.Tensor(name), field);
  }
  std::string HashFieldOf(const std::string& key, const std::string& field) {
    auto reply = redis_.Connect()->Command({"HGET", key, field});
    return reply.ok() && !reply->is_nil() ? reply->str : "";
  }
  // The copy's bytes, read back on its node, equal the source's file.
  void ExpectSameBytes(const std::string& copy, const std::string& node,
                       const std::string& source_file) {
    std::string file = copy;
    std::replace(file.begin(), file.end(), '/', '_');  // a set member's name
    std::string out = dir_.path() + "/" + file + ".npy";
    auto got = Tool("mcd-get", {copy, "--no-ref", "-o", out, "--node", node});
    ASSERT_EQ(got.exit_code, 0) << got.err;
    EXPECT_TRUE(test::ReadFile(out) == test::ReadFile(source_file))
        << copy << " differs from its source";
  }

  test::TempDir dir_;
  test::RedisServer redis_;
  // mcd-serve --ready-max; "": 0 for a server of host memory only, so that a node's
  // shared-memory objects are its tensors' alone, else the default.
  std::string ready_max_;
  KeySpace keys_;
  std::map<std::string, std::unique_ptr<test::Background>> servers_;
  const std::string a_ = "cpa" + std::to_string(getpid()), b_ = "cpb" + std::to_string(getpid());
};

// The fetching server takes the bytes in pieces of 1 MiB: 13, the last one of 28 bytes.
TEST_F(Copies, AHostTensorIsCopiedToAnotherNode) {
  std::string file = Pattern(3 * 1024 * 1024 + 7);  // ~12 MiB: UCX's rendezvous protocol
  std::string small = dir_.path() + "/small.npy";
  Serve(a_, "tcp", {}, {{"MCD_COPY_PIECE", "1048576"}});
  Serve(b_, "tcp");
  EXPECT_EQ(CopiesOf(a_), "in_place");  // host tensors: no staging, whatever the UCX
  EXPECT_NE(Log(a_).find("fetched in pieces of 1 MiB"), std::string::npos) << Log(a_);
  ASSERT_EQ(
      Tool("mcd-create", {"src", "--from", file, "--device", "cpu", "--node", b_, "-q"}).exit_code,
      0);
  auto copied =
      Tool("mcd-create", {"copy", "--copy-of", "src", "--device", "cpu", "--node", a_, "--json"});
  ASSERT_EQ(copied.exit_code, 0) << copied.err << Log(a_) << Log(b_);
  EXPECT_EQ(HashField("copy", "node"), a_);
  EXPECT_EQ(HashField("copy", "refcount"), "1");
  EXPECT_EQ(HashField("copy", "dtype"), "u32");
  ExpectSameBytes("copy", a_, file);
  // And a small one, which UCX sends eagerly.
  std::ofstream(small, std::ios::binary) << test::ReadFile(Pattern(5));
  ASSERT_EQ(Tool("mcd-create", {"tiny", "--from", small, "--device", "cpu", "--node", b_, "-q"})
                .exit_code,
            0);
  ASSERT_EQ(
      Tool("mcd-create", {"tiny-copy", "--copy-of", "tiny", "--device", "cpu", "--node", a_, "-q"})
          .exit_code,
      0);
  ExpectSameBytes("tiny-copy", a_, small);
}

// A piece size the server cannot use is said at start, and the default used.
TEST_F(Copies, APieceSizeOutOfRangeIsSaidAtStartAndTheDefaultUsed) {
  for (const char* bad : {"4096", "12x", "-1", "+65536"}) {
    Serve(a_, "tcp", {}, {{"MCD_COPY_PIECE", bad}});
    EXPECT_NE(Log(a_).find(std::string("MCD_COPY_PIECE=") + bad +
                           " is not a whole number of bytes from 65536 to 268435456: ignored"),
              std::string::npos)
        << Log(a_);
    EXPECT_NE(Log(a_).find("fetched in pieces of 16 MiB"), std::string::npos) << Log(a_);
    ASSERT_EQ(servers_[a_]->Stop(SIGTERM), 0);
    std::ofstream(dir_.path() + "/" + a_ + ".log", std::ios::trunc);  // the next start's alone
  }
}

// Copies of one size in a row land in objects the fetching server made ahead with their pages
// (its host ready stock, at the default --ready-max), each holding exactly its source's bytes:
// sources of random bytes, two of them, so that no copy can pass with another's.
TEST_F(Copies, CopiesOfOneSizeInARowLandInObjectsMadeAheadAndHoldTheirSourcesBytes) {
  ready_max_ = "25%";
  Serve(a_, "tcp");
  Serve(b_, "tcp");
  constexpr size_t kBytes = (4 << 20) + 64;
  std::vector<std::string> files;
  for (int i = 0; i < 2; ++i) {
    files.push_back(dir_.path() + "/s" + std::to_string(i) + ".npy");
    std::ofstream(files.back(), std::ios::binary) << test::U8Npy(test::RandomBytes(kBytes, 40 + i));
    ASSERT_EQ(CreateFrom("s" + std::to_string(i), files.back(), b_).exit_code, 0);
  }
  auto objects = [&] {
    std::vector<std::string> out;
    for (const std::string& file : test::ShmObjects("mcd-mcd-" + a_ + "-"))
      out.push_back("/" + file);
    return out;
  };
  // The copies come one right after another (the stock keeps a size for 2 s after its last
  // create); their bytes are read back once all are made.
  for (int i = 0; i < 4; ++i) {
    std::string copy = "c" + std::to_string(i);
    std::vector<std::string> before;
    if (i > 0) {
      // One object beyond the copies made so far: made ahead for the next.
      ASSERT_TRUE(test::WaitFor([&] { return objects().size() > static_cast<size_t>(i); }, 30000))
          << Log(a_);
      before = objects();
    }
    auto copied = Tool("mcd-create", {copy, "--copy-of", "s" + std::to_string(i % 2), "--device",
                                      "cpu", "--node", a_, "-q"});
    ASSERT_EQ(copied.exit_code, 0) << copied.err << Log(a_);
    if (i > 0) {
      std::string object = HashField(copy, "ipc_handle");
      EXPECT_NE(std::find(before.begin(), before.end(), object), before.end())
          << copy << ": " << object << " was not made ahead";
    }
  }
  for (int i = 0; i < 4; ++i) ExpectSameBytes("c" + std::to_string(i), a_, files[i % 2]);
  // Once copies of the size stop, what was made ahead goes back.
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(Tool("mcd-rm", {"c" + std::to_string(i), "--node", a_, "-q"}).exit_code, 0);
  EXPECT_TRUE(test::WaitFor([&] { return objects().empty(); }, 10000)) << objects().size();
}

// Over UCX's shared memory alone, which cannot report a peer's failure, copies are off and a copy
// is refused before anything moves: UCX treats a peer's death mid-copy over such a connection as
// fatal to the reading server. Nothing is made, and both servers serve on.
TEST_F(Copies, OverSharedMemoryAloneACopyIsRefusedAndNothingIsMade) {
  std::string file;
  ASSERT_NO_FATAL_FAILURE(file = ServeBothWithSource("sm"));
  // Said at start, in the log and the heartbeat, rather than at each copy.
  EXPECT_NE(Log(a_).find("copies between nodes: off (UCX has no transport in UCX_TLS=sm that "
                         "reports a peer's failure"),
            std::string::npos)
      << Log(a_);
  EXPECT_EQ(CopiesOf(a_), "off");
  size_t shm_before = test::ShmObjects("mcd-mcd-" + a_ + "-").size();
  auto refused = Tool("mcd-create", {"copy", "--copy-of", "src", "--device", "cpu", "--node", a_});
  EXPECT_EQ(refused.exit_code, 69) << refused.err;
  EXPECT_NE(refused.err.find("keep tcp in UCX_TLS"), std::string::npos) << refused.err;
  EXPECT_EQ(HashField("copy", "state"), "");
  EXPECT_EQ(test::ShmObjects("mcd-mcd-" + a_ + "-").size(), shm_before);
  EXPECT_EQ(HashField("src", "refcount"), "1");
  EXPECT_EQ(Tool("mcd-create",
                 {"after", "--dtype", "u8", "--shape", "4", "--device", "cpu", "--node", a_, "-q"})
                .exit_code,
            0);
  ExpectSameBytes("src", b_, file);
}

TEST_F(Copies, ErrorsAreClearAndNothingIsLeftHalfMade) {
  std::string file;
  ASSERT_NO_FATAL_FAILURE(file = ServeBothWithSource("tcp"));
  ASSERT_EQ(
      Tool("mcd-create", {"here", "--from", file, "--device", "cpu", "--node", a_, "-q"}).exit_code,
      0);
  auto missing =
      Tool("mcd-create", {"c1", "--copy-of", "nothing", "--device", "cpu", "--node", a_});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("no tensor named 'nothing'"), std::string::npos) << missing.err;
  auto same = Tool("mcd-create", {"c2", "--copy-of", "here", "--device", "cpu", "--node", a_});
  EXPECT_EQ(same.exit_code, 64);
  EXPECT_NE(same.err.find("is on this node already"), std::string::npos) << same.err;
  EXPECT_EQ(Tool("mcd-create",
                 {"c3", "--copy-of", "src", "--dtype", "u8", "--device", "cpu", "--node", a_})
                .exit_code,
            64);
  // A server that does not copy (--no-node-copies, or no UCX there): said at once.
  ASSERT_NO_FATAL_FAILURE(RestartWithSource(file, {"--devices", "cpu", "--no-node-copies"}));
  EXPECT_EQ(CopiesOf(b_), "off");
  auto refused = Tool("mcd-create", {"c4", "--copy-of", "src", "--device", "cpu", "--node", a_});
  EXPECT_EQ(refused.exit_code, 69);
  EXPECT_NE(refused.err.find("does not copy between nodes"), std::string::npos) << refused.err;
  auto from_off = Tool("mcd-create", {"c5", "--copy-of", "here", "--device", "cpu", "--node", b_});
  EXPECT_EQ(from_off.exit_code, 69);
  EXPECT_NE(from_off.err.find("--no-node-copies"), std::string::npos) << from_off.err;
  // The other node's server dies while the copy waits for it: a clear error well before the
  // copy's own timeout, no hash, and no memory kept for it.
  ASSERT_NO_FATAL_FAILURE(RestartWithSource(file, {}));
  size_t shm_before = test::ShmObjects("mcd-mcd-" + a_ + "-").size();
  kill(servers_[b_]->pid(), SIGSTOP);
  auto t0 = std::chrono::steady_clock::now();
  test::Background copy({test::ToolPath("mcd-create"), "c6", "--copy-of", "src", "--device", "cpu",
                         "--node", a_, "--timeout-ms", "60000"},
                        Env(), dir_.path() + "/c6.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  servers_[b_]->Stop(SIGKILL);
  EXPECT_EQ(copy.Wait(60), 69) << test::ReadFile(dir_.path() + "/c6.log") << Log(a_);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_NE(test::ReadFile(dir_.path() + "/c6.log").find("copying 'src' from node '" + b_ + "'"),
            std::string::npos)
      << test::ReadFile(dir_.path() + "/c6.log");
  EXPECT_EQ(HashField("c6", "state"), "");
  EXPECT_EQ(test::ShmObjects("mcd-mcd-" + a_ + "-").size(), shm_before);
  // The server that waited serves on.
  EXPECT_EQ(Tool("mcd-create",
                 {"after", "--dtype", "u8", "--shape", "4", "--device", "cpu", "--node", a_, "-q"})
                .exit_code,
            0);
  // The killed server's shared-memory objects are removed by the next server of its node.
  ASSERT_NO_FATAL_FAILURE(Serve(b_, "tcp"));
  EXPECT_EQ(test::ShmObjects("mcd-mcd-" + b_ + "-").size(), 0u);
}

// The serving server stopped (SIGTERM) while the bytes it sends wait for a fetching server that
// takes none (stopped: SIGSTOP): it stops within seconds rather than waiting on the sends, and
// the copy fails (69) once the fetching server runs again, which publishes nothing and serves
// on. A copy that ended before the stop came is made again, up to three times.
TEST_F(Copies, AServerStoppedWhileItsBytesAreUnreadStopsAndTheCopyFails) {
  Serve(a_, "tcp", {}, {{"MCD_COPY_PIECE", "65536"}});
  std::string file = Pattern(64 * 1024 * 1024);  // 256 MiB: 4096 pieces
  bool stopped_mid_copy = false;
  for (int attempt = 0; attempt < 3 && !stopped_mid_copy; ++attempt) {
    Serve(b_, "tcp");
    ASSERT_EQ(Tool("mcd-create", {"src", "--from", file, "--device", "cpu", "--node", b_, "-q"})
                  .exit_code,
              0);
    std::string name = "copy" + std::to_string(attempt);
    test::Background copy({test::ToolPath("mcd-create"), name, "--copy-of", "src", "--device",
                           "cpu", "--node", a_, "--timeout-ms", "60000"},
                          Env(), dir_.path() + "/" + name + ".log");
    // The node's log goes on across its servers: this attempt's read is one more.
    ASSERT_TRUE(test::WaitFor(
        [&] { return Count(Log(b_), "read name=src") > static_cast<size_t>(attempt); }, 60000))
        << Log(b_);
    kill(servers_[a_]->pid(), SIGSTOP);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(servers_[b_]->Stop(SIGTERM), 0) << Log(b_);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
    servers_.erase(b_);
    kill(servers_[a_]->pid(), SIGCONT);
    int code = copy.Wait(60);
    if (code == 0) {  // every byte had gone before the stop
      ExpectSameBytes(name, a_, file);
      continue;
    }
    stopped_mid_copy = true;
    EXPECT_EQ(code, 69) << test::ReadFile(dir_.path() + "/" + name + ".log") << Log(a_);
    EXPECT_NE(test::ReadFile(dir_.path() + "/" + name + ".log").find("went away mid-copy"),
              std::string::npos)
        << test::ReadFile(dir_.path() + "/" + name + ".log");
    EXPECT_EQ(HashField(name, "state"), "");
  }
  EXPECT_TRUE(stopped_mid_copy) << "every copy ended before its source's server was stopped";
  EXPECT_EQ(Tool("mcd-create",
                 {"after", "--dtype", "u8", "--shape", "4", "--device", "cpu", "--node", a_, "-q"})
                .exit_code,
            0);
}

// The fetching server killed while the serving one sends it a tensor's pieces: the serving server
// notices, serves on (a create, the source's removal, which frees it), and stops cleanly. A copy
// that ended before the kill came is made again, up to three times.
TEST_F(Copies, AServerWhoseReaderIsKilledMidCopyServesOn) {
  Serve(b_, "tcp");
  std::string file = Pattern(64 * 1024 * 1024);  // 256 MiB
  ASSERT_EQ(
      Tool("mcd-create", {"src", "--from", file, "--device", "cpu", "--node", b_, "-q"}).exit_code,
      0);
  size_t b_objects = test::ShmObjects("mcd-mcd-" + b_ + "-").size();
  bool killed_mid_copy = false;
  for (int attempt = 0; attempt < 3 && !killed_mid_copy; ++attempt) {
    Serve(a_, "tcp", {}, {{"MCD_COPY_PIECE", "65536"}});
    std::string name = "copy" + std::to_string(attempt);
    test::Background copy({test::ToolPath("mcd-create"), name, "--copy-of", "src", "--device",
                           "cpu", "--node", a_, "--timeout-ms", "60000"},
                          Env(), dir_.path() + "/" + name + ".log");
    ASSERT_TRUE(test::WaitFor(
        [&] { return Count(Log(b_), "read name=src") > static_cast<size_t>(attempt); }, 60000))
        << Log(b_);
    servers_[a_]->Stop(SIGKILL);
    servers_.erase(a_);
    int code = copy.Wait(60);
    killed_mid_copy = code != 0;
    if (!killed_mid_copy) continue;  // every byte had gone before the kill
    EXPECT_TRUE(test::WaitFor(
        [&] {
          return Count(Log(b_), "a server this one exchanged copies with has gone") >
                 static_cast<size_t>(attempt);
        },
        10000))
        << Log(b_);
  }
  EXPECT_TRUE(killed_mid_copy) << "every copy ended before its fetching server was killed";
  EXPECT_EQ(Tool("mcd-create",
                 {"after", "--dtype", "u8", "--shape", "4", "--device", "cpu", "--node", b_, "-q"})
                .exit_code,
            0)
      << Log(b_);
  ExpectSameBytes("src", b_, file);
  EXPECT_EQ(Tool("mcd-rm", {"src", "--node", b_, "-q"}).exit_code, 0) << Log(b_);
  EXPECT_EQ(Tool("mcd-rm", {"after", "--node", b_, "-q"}).exit_code, 0) << Log(b_);
  EXPECT_TRUE(test::WaitFor(
      [&] { return test::ShmObjects("mcd-mcd-" + b_ + "-").size() == b_objects - 1; }, 10000))
      << "the source's memory was not freed";
  EXPECT_EQ(servers_[b_]->Stop(SIGTERM), 0) << Log(b_);
  servers_.erase(b_);
}

// A copy waits for its bytes beside the serving loop, not in it: while the other node's server
// is stopped (SIGSTOP), the fetching server makes and removes other tensors and refuses a second
// create of the name being copied; the copy ends with every byte once the other server runs again.
// A server stopped (SIGTERM) with a copy under way answers it, keeps nothing of it, and leaves no
// command behind for the next server of its node.
TEST_F(Copies, ACopyUnderWayDoesNotStopTheNode) {
  Serve(a_, "tcp");
  Serve(b_, "tcp");
  std::string file = Pattern(2 * 1024 * 1024 + 3);
  ASSERT_EQ(CreateFrom("src", file, b_).exit_code, 0);
  size_t shm_before = test::ShmObjects("mcd-mcd-" + a_ + "-").size();
  ASSERT_EQ(kill(servers_[b_]->pid(), SIGSTOP), 0);
  // Without --timeout-ms: the tool waits as long as the servers may take, not its usual 5 s.
  test::Background copy(
      {test::ToolPath("mcd-create"), "w/dst", "--copy-of", "src", "--device", "cpu", "--node", a_},
      Env(), dir_.path() + "/dst.log");
  ASSERT_TRUE(test::WaitFor(
      [&] { return test::ShmObjects("mcd-mcd-" + a_ + "-").size() > shm_before; }, 10000))
      << "the copy's memory was never allocated" << Log(a_);
  auto t0 = std::chrono::steady_clock::now();
  auto other = Tool("mcd-create", {"other", "--dtype", "u8", "--shape", "4", "--device", "cpu",
                                   "--node", a_, "--timeout-ms", "5000"});
  EXPECT_EQ(other.exit_code, 0) << other.err << Log(a_);
  EXPECT_EQ(Tool("mcd-rm", {"other", "--node", a_, "-q", "--timeout-ms", "5000"}).exit_code, 0);
  auto twice = Tool("mcd-create", {"w/dst", "--dtype", "u32", "--shape", "5", "--device", "cpu",
                                   "--node", a_, "--timeout-ms", "5000"});
  EXPECT_EQ(twice.exit_code, 1) << twice.err;
  EXPECT_NE(twice.err.find("by a copy under way"), std::string::npos) << twice.err;
  std::ofstream(dir_.path() + "/members") << "dst u8 4\nother f32 2\n";  // a set over it
  auto set = Tool("mcd-create", {"w", "--members", dir_.path() + "/members", "--device", "cpu",
                                 "--node", a_, "--timeout-ms", "5000"});
  EXPECT_EQ(set.exit_code, 1) << set.err;
  EXPECT_NE(set.err.find("by a copy under way"), std::string::npos) << set.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(HashField("w/dst", "state"), "");  // nothing published before the bytes are in
  std::this_thread::sleep_until(t0 + std::chrono::milliseconds(5500));
  ASSERT_EQ(kill(servers_[b_]->pid(), SIGCONT), 0);
  EXPECT_EQ(copy.Wait(60), 0) << test::ReadFile(dir_.path() + "/dst.log") << Log(a_);
  ExpectSameBytes("w/dst", a_, file);
  EXPECT_EQ(HashField("w/dst", "refcount"), "1");

  // Stopped with a copy under way.
  ASSERT_EQ(kill(servers_[b_]->pid(), SIGSTOP), 0);
  shm_before = test::ShmObjects("mcd-mcd-" + a_ + "-").size();
  test::Background stopped({test::ToolPath("mcd-create"), "late", "--copy-of", "src", "--device",
                            "cpu", "--node", a_, "--timeout-ms", "60000"},
                           Env(), dir_.path() + "/late.log");
  ASSERT_TRUE(test::WaitFor(
      [&] { return test::ShmObjects("mcd-mcd-" + a_ + "-").size() > shm_before; }, 10000))
      << Log(a_);
  EXPECT_EQ(servers_[a_]->Stop(SIGTERM), 0) << Log(a_);
  EXPECT_EQ(stopped.Wait(30), 69) << test::ReadFile(dir_.path() + "/late.log");
  EXPECT_NE(test::ReadFile(dir_.path() + "/late.log").find("is stopping, and no byte had come"),
            std::string::npos)
      << test::ReadFile(dir_.path() + "/late.log") << Log(a_);
  EXPECT_EQ(HashField("late", "state"), "");
  // Not let go on: a server that answers a read whose asker died meanwhile crashes inside UCX
  // (docs/scale-out.md, "Limits").
  servers_[b_]->Stop(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(Serve(a_, "tcp"));
  EXPECT_EQ(Log(a_).find("resuming"), std::string::npos) << Log(a_);
  EXPECT_EQ(HashField("late", "state"), "");
  EXPECT_EQ(redis_.Connect()->Command({"LLEN", keys_.Processing(a_)})->integer, 0);
}

// A copy's create taken from the queue stays in the processing list until its commit, so a
// resume of that list (here after a commit Redis refused for a while) meets it again while its
// bytes are awaited: it is left to the copy under way, which answers it once, with the tensor.
TEST_F(Copies, AResumeLeavesACopyUnderWayToFinish) {
  Serve(a_, "tcp");
  Serve(b_, "tcp");
  std::string file = Pattern(1024 * 1024 + 5);
  ASSERT_EQ(CreateFrom("src", file, b_).exit_code, 0);
  size_t shm_before = test::ShmObjects("mcd-mcd-" + a_ + "-").size();
  ASSERT_EQ(kill(servers_[b_]->pid(), SIGSTOP), 0);
  auto env = Env();
  env["MCD_VIA_QUEUE"] = "1";
  test::Background copy({test::ToolPath("mcd-create"), "dst", "--copy-of", "src", "--device", "cpu",
                         "--node", a_, "--timeout-ms", "60000"},
                        env, dir_.path() + "/dst.log");
  ASSERT_TRUE(test::WaitFor(
      [&] { return test::ShmObjects("mcd-mcd-" + a_ + "-").size() > shm_before; }, 10000))
      << Log(a_);
  auto conn = redis_.Connect();
  ASSERT_TRUE(conn->Command({"ACL", "SETUSER", "default", "-evalsha"}).ok());
  (void)test::Run({test::ToolPath("mcd-create"), "other", "--dtype", "u8", "--shape", "4",
                   "--device", "cpu", "--node", a_, "--timeout-ms", "300"},
                  env);
  ASSERT_TRUE(test::WaitFor(
      [&] { return Log(a_).find("name=other outcome=redis_error") != std::string::npos; }, 5000))
      << Log(a_);
  ASSERT_TRUE(conn->Command({"ACL", "SETUSER", "default", "+evalsha"}).ok());
  ASSERT_TRUE(test::WaitFor([&] { return Log(a_).find("resuming") != std::string::npos; }, 10000))
      << Log(a_);
  ASSERT_EQ(kill(servers_[b_]->pid(), SIGCONT), 0);
  EXPECT_EQ(copy.Wait(60), 0) << test::ReadFile(dir_.path() + "/dst.log") << Log(a_);
  ExpectSameBytes("dst", a_, file);
  EXPECT_EQ(HashField("dst", "refcount"), "1");
  EXPECT_EQ(HashField("other", "refcount"), "1");  // the resume applied it
  EXPECT_EQ(conn->Command({"LLEN", keys_.Processing(a_)})->integer, 0);
}

// UCX does not talk across minor versions (1.13 aborts when 1.22 connects): a copy from a server
// whose heartbeat says another UCX version is refused before anything connects to it. The other
// node is planted in Redis: its heartbeat, with b's real UCX address, and a copy of b's tensor's
// hash under its name.
TEST_F(Copies, AServerOfAnotherUcxVersionIsNotConnectedTo) {
  Serve(a_, "tcp");
  Serve(b_, "tcp");
  std::string file = Pattern(1024);
  ASSERT_EQ(
      Tool("mcd-create", {"src", "--from", file, "--device", "cpu", "--node", b_, "-q"}).exit_code,
      0);
  auto conn = redis_.Connect();
  auto heartbeat = conn->Command({"HGETALL", keys_.Server(b_)});
  auto hash = conn->Command({"HGETALL", keys_.Tensor("src")});
  ASSERT_TRUE(heartbeat.ok() && hash.ok());
  const std::string other = "cpz" + std::to_string(getpid());
  auto plant = [&](const std::string& key, const RedisValue& fields,
                   std::map<std::string, std::string> set) {
    std::vector<std::string> args = {"HSET", key};
    for (size_t i = 0; i + 1 < fields.elements.size(); i += 2) {
      const std::string& field = fields.elements[i].str;
      args.push_back(field);
      args.push_back(set.count(field) ? set[field] : fields.elements[i + 1].str);
    }
    ASSERT_TRUE(conn->Command(std::vector<std::string_view>(args.begin(), args.end())).ok());
  };
  std::string ours = HashFieldOf(keys_.Server(b_), "ucx_version");
  ASSERT_FALSE(ours.empty()) << "the heartbeat says its UCX version";
  plant(keys_.Server(other), *heartbeat,
        {{"node", other}, {"instance", "planted"}, {"ucx_version", "1.99.0"}});
  plant(keys_.Tensor("elsewhere"), *hash, {{"node", other}, {"name", "elsewhere"}});
  auto refused =
      Tool("mcd-create", {"c", "--copy-of", "elsewhere", "--device", "cpu", "--node", a_});
  EXPECT_EQ(refused.exit_code, 69) << refused.err;
  EXPECT_NE(refused.err.find("runs UCX 1.99.0 and this one UCX " + ours), std::string::npos)
      << refused.err;
  EXPECT_EQ(HashField("c", "state"), "");
  // Both serve on: a copy from b, whose version is a's, goes through.
  EXPECT_EQ(Tool("mcd-create", {"c", "--copy-of", "src", "--device", "cpu", "--node", a_, "-q"})
                .exit_code,
            0)
      << Log(a_) << Log(b_);
  ExpectSameBytes("c", a_, file);
}

// Each server waits for the other's bytes while the other waits for its own: each answers the
// other's read while it waits, so both copies finish at once rather than at their timeout.
TEST_F(Copies, TwoServersFetchingFromEachOtherAtOnceBothFinish) {
  Serve(a_, "tcp");
  Serve(b_, "tcp");
  std::string file = Pattern(16 * 1024 * 1024);  // 64 MiB: a copy over TCP takes a while
  ASSERT_EQ(
      Tool("mcd-create", {"on_a", "--from", file, "--device", "cpu", "--node", a_, "-q"}).exit_code,
      0);
  ASSERT_EQ(
      Tool("mcd-create", {"on_b", "--from", file, "--device", "cpu", "--node", b_, "-q"}).exit_code,
      0);
  auto t0 = std::chrono::steady_clock::now();
  test::Background to_a({test::ToolPath("mcd-create"), "from_b", "--copy-of", "on_b", "--device",
                         "cpu", "--node", a_, "--timeout-ms", "60000"},
                        Env(), dir_.path() + "/to_a.log");
  test::Background to_b({test::ToolPath("mcd-create"), "from_a", "--copy-of", "on_a", "--device",
                         "cpu", "--node", b_, "--timeout-ms", "60000"},
                        Env(), dir_.path() + "/to_b.log");
  EXPECT_EQ(to_a.Wait(60), 0) << test::ReadFile(dir_.path() + "/to_a.log") << Log(a_);
  EXPECT_EQ(to_b.Wait(60), 0) << test::ReadFile(dir_.path() + "/to_b.log") << Log(b_);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15))
      << "the copies waited out the fetch's limit (30 s): neither server answered the other";
  ExpectSameBytes("from_b", a_, file);
  ExpectSameBytes("from_a", b_, file);
}

// The copy service's worker takes messages from whoever reaches it: its address is in the
// heartbeat, and UCX listens on TCP. Below, the attacks of a second local user (uid 65534, through
// setpriv), who has neither the servers' Redis nor their files, on a 0600 host tensor of root's.
// They need root to become that user, and the raw UCX peer (built where libucx-dev is).
constexpr const char* kStranger[] = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                     "--clear-groups"};

std::vector<std::string> AsStranger(std::vector<std::string> argv) {
  argv.insert(argv.begin(), std::begin(kStranger), std::end(kStranger));
  return argv;
}

#define NEEDS_STRANGER()                                                                \
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as a second user (uid 65534)"; \
  struct stat peer_stat;                                                                \
  if (stat(test::ToolPath("ucx_peer").c_str(), &peer_stat) != 0) {                      \
    GTEST_SKIP() << "no ucx_peer in this build (UCX's headers or libucp missing)";      \
  }

// A READ straight to the worker, with the name and ctime of the tensor (no secret either) and a
// grant nobody wrote: refused, not a byte sent.
TEST_F(Copies, AStrangerWithTheWorkersAddressGetsNothing) {
  NEEDS_STRANGER();
  Serve(b_, "tcp");
  std::string file = dir_.path() + "/secret.npy";
  std::ofstream(file, std::ios::binary) << test::U8Npy(test::RandomBytes(4096, 40));
  ASSERT_EQ(CreateFrom("rootsecret", file, b_).exit_code, 0);
  auto read = test::Run(
      AsStranger({test::ToolPath("ucx_peer"), "read", HashFieldOf(keys_.Server(b_), "ucx_address"),
                  "rootsecret", HashField("rootsecret", "ctime")}),
      Env("tcp"));
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_NE(read.out.find("answer code=17 bytes=0"), std::string::npos)  // permission_denied
      << "the read did not reach the server, or was not refused:\n"
      << read.out << read.err << Log(b_);
  EXPECT_EQ(read.out.find("code=0 "), std::string::npos) << "the stranger got the tensor:\n"
                                                         << read.out;
  EXPECT_NE(Log(b_).find(
                "refused a read of 'rootsecret' from a UCX peer that says it is node 'stranger'"),
            std::string::npos)
      << Log(b_);
  EXPECT_EQ(Log(b_).find("read name=rootsecret"), std::string::npos) << Log(b_);
}

// A stranger's read to node b's server naming node a's worker address is refused, and leaves
// the two servers' connections in step: a's copy from b that follows has every byte.
TEST_F(Copies, AReadNamingAnotherServersAddressLeavesItsCopiesWhole) {
  std::string file;
  ASSERT_NO_FATAL_FAILURE(file = ServeBothWithSource("tcp"));
  auto read =
      test::Run({test::ToolPath("ucx_peer"), "read", HashFieldOf(keys_.Server(b_), "ucx_address"),
                 "src", HashField("src", "ctime"), HashFieldOf(keys_.Server(a_), "ucx_address")},
                Env("tcp"));
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_NE(read.out.find("answer code=6 bytes=0"), std::string::npos)  // unavailable
      << read.out << read.err << Log(b_);
  auto copied = Tool("mcd-create", {"copy", "--copy-of", "src", "--device", "cpu", "--node", a_});
  ASSERT_EQ(copied.exit_code, 0) << copied.err << Log(a_) << Log(b_);
  ExpectSameBytes("copy", a_, file);
}

// The stranger's own mcd-serve, on a Redis of its own where it planted the victim node's
// heartbeat (with its real UCX address) and the tensor's hash: its copy is refused, since no
// grant for it is in the victim's Redis.
TEST_F(Copies, AStrangersServerWithAForgedHeartbeatGetsNothing) {
  NEEDS_STRANGER();
  Serve(b_, "tcp");
  std::string file = dir_.path() + "/secret.npy";
  std::ofstream(file, std::ios::binary) << test::U8Npy(test::RandomBytes(4096, 41));
  ASSERT_EQ(CreateFrom("rootsecret", file, b_).exit_code, 0);
  test::RedisServerOptions tcp;
  tcp.tcp = true;  // the stranger cannot enter the folder of a Unix socket
  test::RedisServer theirs(tcp);
  auto ours = redis_.Connect();
  auto planted = theirs.Connect();
  for (const std::string& key : {keys_.Server(b_), keys_.Tensor("rootsecret")}) {
    auto fields = ours->Command({"HGETALL", key});
    ASSERT_TRUE(fields.ok() && !fields->elements.empty()) << key;
    std::vector<std::string_view> hset = {"HSET", key};
    for (const RedisValue& v : fields->elements) hset.push_back(v.str);
    ASSERT_TRUE(planted->Command(hset).ok()) << key;
  }
  auto env = Env("tcp");
  env["MCD_REDIS_URL"] = theirs.url();
  const std::string x = "cpx" + std::to_string(getpid());
  std::string log = dir_.path() + "/" + x + ".log";
  test::Background server(AsStranger({test::ToolPath("mcd-serve"), "--node", x, "--devices", "cpu",
                                      "--heartbeat-ttl", "3"}),
                          env, log);
  ASSERT_TRUE(test::WaitFor(
      [&] { return test::ReadFile(log).find("serving node") != std::string::npos; }, 20000))
      << test::ReadFile(log);
  auto loot = test::Run(AsStranger({test::ToolPath("mcd-create"), "loot", "--copy-of", "rootsecret",
                                    "--device", "cpu", "--node", x}),
                        env);
  EXPECT_EQ(loot.exit_code, 69) << loot.out << loot.err << test::ReadFile(log);
  EXPECT_NE(loot.err.find("no grant for that read"), std::string::npos) << loot.err;
  auto hash = planted->Command({"EXISTS", keys_.Tensor("loot")});
  ASSERT_TRUE(hash.ok());
  EXPECT_EQ(hash->integer, 0) << "the stranger's server made its copy";
  EXPECT_NE(Log(b_).find("refused a read of 'rootsecret' from a UCX peer that says it is node '" +
                         x + "'"),
            std::string::npos)
      << Log(b_);
  EXPECT_EQ(server.Stop(SIGTERM), 0) << test::ReadFile(log);
}

// A stranger floods the fetching server's worker with answers for guessed fetch ids (counters
// from 1, and random ones) while it copies: every copy holds the source's bytes, each one. (An
// answer with the real fetch id from another endpoint: copy_service_test.)
TEST_F(Copies, ForgedAnswersFillNothing) {
  NEEDS_STRANGER();
  Serve(a_, "tcp");
  Serve(b_, "tcp");
  std::string file = dir_.path() + "/src.npy";
  std::ofstream(file, std::ios::binary) << test::U8Npy(test::RandomBytes(4096, 42));
  ASSERT_EQ(CreateFrom("src", file, b_).exit_code, 0);
  std::string log = dir_.path() + "/flood.log";
  test::Background flood(AsStranger({test::ToolPath("ucx_peer"), "flood",
                                     HashFieldOf(keys_.Server(a_), "ucx_address"), "4096", "600"}),
                         Env("tcp"), log);
  ASSERT_TRUE(test::WaitFor(
      [&] { return test::ReadFile(log).find("flooding") != std::string::npos; }, 20000))
      << test::ReadFile(log);
  for (int i = 1; i <= 3; ++i) {
    std::string copy = "copy" + std::to_string(i);
    auto copied = Tool("mcd-create", {copy, "--copy-of", "src", "--device", "cpu", "--node", a_});
    ASSERT_EQ(copied.exit_code, 0) << copied.err << Log(a_);
    ExpectSameBytes(copy, a_, file);
  }
  // Each read served is logged with the node that asked.
  std::string served = "read name=src bytes=4096 for node '" + a_ + "'";
  std::string b_log = Log(b_);
  size_t logged = 0;
  for (size_t at = b_log.find(served); at != std::string::npos; at = b_log.find(served, at + 1)) {
    ++logged;
  }
  EXPECT_EQ(logged, 3u) << b_log;
  // Each grant was used up by the serving server.
  auto grants = redis_.Connect()->Command({"KEYS", keys_.CopyGrant("*")});
  ASSERT_TRUE(grants.ok());
  EXPECT_TRUE(grants->elements.empty()) << grants->elements.size() << " grants left in Redis";
  EXPECT_EQ(flood.Stop(SIGKILL), -SIGKILL) << "the flood ended by itself\n" << test::ReadFile(log);
}

// GPU to GPU, GPU to host and host to GPU, each read back on its node.
void Copies::CopyEveryWay(const std::string& file) {
  ASSERT_EQ(
      Tool("mcd-create", {"gsrc", "--from", file, "--device", "0", "--node", b_, "-q"}).exit_code,
      0);
  auto to_gpu = Tool("mcd-create", {"gcopy", "--copy-of", "gsrc", "--device", "0", "--node", a_});
  ASSERT_EQ(to_gpu.exit_code, 0) << to_gpu.err << Log(a_) << Log(b_);
  ExpectSameBytes("gcopy", a_, file);
  ASSERT_EQ(
      Tool("mcd-create", {"hcopy", "--copy-of", "gsrc", "--device", "cpu", "--node", a_, "-q"})
          .exit_code,
      0);
  ExpectSameBytes("hcopy", a_, file);
  ASSERT_EQ(
      Tool("mcd-create", {"gcopy2", "--copy-of", "hcopy", "--device", "0", "--node", b_, "-q"})
          .exit_code,
      0);
  ExpectSameBytes("gcopy2", b_, file);
  ASSERT_EQ(Tool("mcd-create",
                 {"tiny", "--dtype", "u8", "--shape", "3", "--device", "0", "--node", b_, "-q"})
                .exit_code,
            0);
  EXPECT_EQ(Tool("mcd-create", {"tiny2", "--copy-of", "tiny", "--device", "0", "--node", a_, "-q"})
                .exit_code,
            0)
      << Log(a_) << Log(b_);
}

TEST_F(Copies, AGpuTensorIsStagedThroughPinnedHostMemory) {
  if (!test::HasCudaDevice()) GTEST_SKIP() << "needs a CUDA device";
  // Pieces of 1 MiB: each side's two pinned slots taken again and again, a piece waiting in
  // the sender's memory while both of the fetcher's slots are being copied to the GPU.
  std::map<std::string, std::string> pieces = {{"MCD_COPY_PIECE", "1048576"}};
  Serve(a_, "", {"--devices", "0", "--stage-gpu-copies"}, pieces);
  Serve(b_, "", {"--devices", "0", "--stage-gpu-copies"}, pieces);
  EXPECT_EQ(CopiesOf(a_), "staged");
  CopyEveryWay(Pattern(16 * 1024 * 1024 + 3));  // 64 MiB and 12 bytes: 65 pieces
  EXPECT_NE(Log(a_).find("GPU tensors staged in pinned host memory"), std::string::npos) << Log(a_);
}

// Needs a CUDA-aware UCX (LD_LIBRARY_PATH; Debian's is not): UCX moves GPU memory in place, over
// shared memory and CUDA IPC on one host, or TCP through its own pinned buffers.
TEST_F(Copies, ACudaAwareUcxCopiesGpuTensorsInPlace) {
  if (!test::HasCudaDevice()) GTEST_SKIP() << "needs a CUDA device";
  Serve(a_, "", {"--devices", "0"});
  if (Log(a_).find("which reads and writes GPU memory itself") == std::string::npos) {
    GTEST_SKIP() << "the UCX found cannot read GPU memory: " << Log(a_);
  }
  Serve(b_, "", {"--devices", "0"});
  EXPECT_EQ(CopiesOf(b_), "in_place");
  CopyEveryWay(Pattern(16 * 1024 * 1024 + 3));
  // An rm of the source while UCX still reads it (1 GiB over TCP takes a second or two) frees it
  // only once the copy is through: the copy is whole, and the memory goes after.
  servers_[a_]->Stop(SIGTERM);
  servers_[b_]->Stop(SIGTERM);
  Serve(a_, "tcp,cuda_copy", {"--devices", "0"});
  Serve(b_, "tcp,cuda_copy", {"--devices", "0", "-v"});
  std::string big = Pattern(256 * 1024 * 1024);  // 1 GiB
  ASSERT_EQ(
      Tool("mcd-create", {"bsrc", "--from", big, "--device", "0", "--node", b_, "-q"}).exit_code,
      0);
  test::Background copy({test::ToolPath("mcd-create"), "bcopy", "--copy-of", "bsrc", "--device",
                         "0", "--node", a_, "-q"},
                        Env(), dir_.path() + "/bcopy.log");
  ASSERT_TRUE(
      test::WaitFor([&] { return Log(b_).find("read name=bsrc") != std::string::npos; }, 60000))
      << Log(b_);  // b has handed the memory to UCX
  EXPECT_EQ(Tool("mcd-rm", {"bsrc", "--node", b_, "-q"}).exit_code, 0);
  ASSERT_EQ(copy.Wait(120), 0) << test::ReadFile(dir_.path() + "/bcopy.log") << Log(a_) << Log(b_);
  ExpectSameBytes("bcopy", a_, big);
  EXPECT_EQ(HashField("bsrc", "state"), "");
  EXPECT_NE(Log(b_).find("waits for a copy to another node"), std::string::npos)
      << "the rm came after the copy: nothing was held\n"
      << Log(b_);
  EXPECT_TRUE(test::WaitFor(
      [&] { return Log(b_).find("the free that waited for it runs") != std::string::npos; }, 10000))
      << Log(b_);
  // The source's server killed while UCX reads its memory: the copy fails well before its
  // timeout, nothing is published, and the fetching server serves on.
  ASSERT_EQ(
      Tool("mcd-create", {"ksrc", "--from", big, "--device", "0", "--node", b_, "-q"}).exit_code,
      0);
  auto t0 = std::chrono::steady_clock::now();
  test::Background killed({test::ToolPath("mcd-create"), "kcopy", "--copy-of", "ksrc", "--device",
                           "0", "--node", a_, "--timeout-ms", "60000"},
                          Env(), dir_.path() + "/kcopy.log");
  ASSERT_TRUE(
      test::WaitFor([&] { return Log(b_).find("read name=ksrc") != std::string::npos; }, 60000))
      << Log(b_);
  servers_[b_]->Stop(SIGKILL);
  servers_.erase(b_);
  EXPECT_EQ(killed.Wait(60), 69) << test::ReadFile(dir_.path() + "/kcopy.log") << Log(a_);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(HashField("kcopy", "state"), "");
  EXPECT_EQ(Tool("mcd-create",
                 {"after", "--dtype", "u8", "--shape", "4", "--device", "0", "--node", a_, "-q"})
                .exit_code,
            0);
}

}  // namespace
}  // namespace mcd
