// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// NodeCopier (server/node_copy.h) without UCX: two copiers of two nodes on one real redis-server,
// each over a fake CopyService that hands the asker's read straight to the serving copier, so
// that Locate's checks, Fill, the grant written and redeemed in Redis, and ServeReads' answers
// are what is tested. Host memory only.
#include "server/node_copy.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <optional>

#include "server/commit_pipeline.h"
#include "server/server_options.h"
#include "test_support.h"

namespace mcd {
namespace {

// The fake transport of one server. As the serving side: reads are queued by the asker's fake
// (TakeReads) and answers kept (Refuse, SendPiece: each piece put in its place). As the asking
// side: Begin queues a read on `peer`, has the peer's copier serve it, and copies the answer
// into the sink.
class FakeCopyService : public CopyService {
 public:
  struct Answered {
    Status status;
    std::string bytes;
    size_t pieces = 0;
  };
  const std::string& address_hex() const override { return address_; }
  bool reads_gpu_memory() const override { return false; }
  std::string version() const override { return version_; }
  Waiting TakeReads() override {
    Waiting w;
    w.reads.assign(reads.begin(), reads.end());
    reads.clear();
    return w;
  }
  void Refuse(const Read& read, const Status& status) override {
    answers[read.fetch] = Answered{status, "", 0};
  }
  void SendPiece(const Read& read, uint64_t offset, const void* data, uint64_t length,
                 uint64_t total, Memory, std::function<void(Status)> sent) override {
    Answered& answer = answers[read.fetch];
    answer.bytes.resize(total);
    std::memcpy(answer.bytes.data() + offset, data, length);
    ++answer.pieces;
    sent(Status::Ok());  // the bytes are copied: UCX would be done with them
  }
  void SendAll(const Read& read, const void* data, uint64_t total, Memory memory,
               std::function<void()> release) override {
    uint64_t piece = read.piece_bytes;
    for (uint64_t offset = 0; offset == 0 || offset < total; offset += piece) {
      SendPiece(read, offset, static_cast<const char*>(data) + offset,
                std::min(piece, total - offset), total, memory, [](Status) {});
    }
    if (release) release();
  }
  // Done at once: the peer's copier serves the read before Begin returns.
  class Done : public Fetching {
   public:
    explicit Done(Status status) : status_(std::move(status)) {}
    std::optional<Status> Poll() override { return status_; }
    Status Wait() override { return status_; }
    Status Stop() override { return status_; }

   private:
    Status status_;
  };
  Result<std::unique_ptr<Fetching>> Begin(const std::string& address_hex, const std::string& name,
                                          int64_t ctime_ms, const CopyGrant& grant,
                                          const std::string& asker_node, Sink sink,
                                          uint64_t piece_bytes, int) override {
    return std::unique_ptr<Fetching>(std::make_unique<Done>(
        Serve(address_hex, name, ctime_ms, grant, asker_node, sink, piece_bytes)));
  }
  Status Serve(const std::string& address_hex, const std::string& name, int64_t ctime_ms,
               const CopyGrant& grant, const std::string& asker_node, const Sink& sink,
               uint64_t piece_bytes) {
    EXPECT_EQ(address_hex, peer->address_);
    Read read;
    read.fetch = "fetch" + std::to_string(++fetches);
    read.grant = tampered ? CopyGrant{grant.id, std::string(grant.token.size(), 'x')} : grant;
    read.asker_node = asker_node;
    read.ctime_ms = ctime_ms;
    read.name = name;
    read.piece_bytes = piece_bytes;
    peer->reads.push_back(read);
    peer_copier->ServeReads();
    auto answer = peer->answers.find(read.fetch);
    if (answer == peer->answers.end()) return Status(ErrorCode::kTimeout, "no answer");
    if (!answer->second.status.ok()) return answer->second.status;
    if (answer->second.bytes.size() != sink.bytes)
      return Status(ErrorCode::kIoError, "short answer");
    EXPECT_EQ(answer->second.pieces, (sink.bytes + piece_bytes - 1) / piece_bytes);
    std::memcpy(sink.into, answer->second.bytes.data(), sink.bytes);
    return Status::Ok();
  }

  std::string address_ = "00", version_ = "1.22.0";
  std::deque<Read> reads;
  std::map<std::string, Answered> answers;
  FakeCopyService* peer = nullptr;
  NodeCopier* peer_copier = nullptr;
  bool tampered = false;  // the reads this side sends carry a wrong token
  int fetches = 0;
};

// One node's server parts: options, its serving connection and one for the test, a host-only device
// set and its table.
struct Node {
  Node(const test::RedisServer& redis, const std::string& name, const std::string& address) {
    opt.node = name;
    opt.all_devices = false;
    opt.redis_url = RedisUrl::Parse(redis.url()).value();
    conn = redis.Connect();
    serving =
        std::make_unique<CommitPipeline>(redis.Connect(), CommitOptionsOf(opt), name + "-instance");
    shm_prefix = "/mcd-unit-" + std::to_string(getpid()) + "-" + name + "-";
    devices = DeviceSet::Open(DeviceSetOptionsOf(opt), shm_prefix).value();
    service.address_ = address;
    copier = std::make_unique<NodeCopier>(NodeCopierOptionsOf(opt), *serving, table, *devices,
                                          &service, "");
  }
  ~Node() {
    copier.reset();
    devices.reset();
    for (const std::string& n : test::ShmObjects(shm_prefix.substr(1)))
      shm_unlink(("/" + n).c_str());
  }
  ServerOptions opt;
  std::unique_ptr<RedisConnection> conn;    // the test's own
  std::unique_ptr<CommitPipeline> serving;  // the server's serving connection
  std::string shm_prefix;
  std::unique_ptr<DeviceSet> devices;
  TensorTable table;
  FakeCopyService service;
  std::unique_ptr<NodeCopier> copier;
};

class NodeCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_.service.peer = &b_.service;
    a_.service.peer_copier = b_.copier.get();
    b_.service.peer = &a_.service;
    b_.service.peer_copier = a_.copier.get();
  }
  // A ready host tensor `name` of node b holding `bytes`, in b's table and in Redis, and b's
  // heartbeat naming its copy service.
  void Publish(const std::string& name, const std::string& bytes) {
    Allocation memory = b_.devices->Allocate(kHostDevice, bytes.size(), true).value();
    void* mapped = OpenHostShm(memory.ipc_handle, bytes.size(), 0).value();
    std::memcpy(mapped, bytes.data(), bytes.size());
    ASSERT_TRUE(CloseHostShm(mapped, bytes.size(), 0).ok());
    Entry entry;
    entry.record.name = name;
    entry.record.bytes = bytes.size();
    entry.record.device = kHostDevice;
    entry.record.ctime_ms = 1234;
    entry.allocation = memory;
    b_.table.Keep(std::move(entry));
    Hset(b_.opt.keys.Tensor(name),
         {"node", "b", "bytes", std::to_string(bytes.size()), "ctime", "1234", "state", "ready"});
    Hset(b_.opt.keys.Server("b"),
         {"instance", "bbbb", "ucx_address", "b0b0", "ucx_version", "1.22.1"});
  }
  void Hset(const std::string& key, const std::vector<std::string>& fields) {
    std::vector<std::string> command = {"HSET", key};
    command.insert(command.end(), fields.begin(), fields.end());
    ASSERT_TRUE(
        a_.conn->Command(std::vector<std::string_view>(command.begin(), command.end())).ok());
  }
  Command CopyCommand(const std::string& of, uint64_t bytes) {
    Command cmd;
    cmd.name = of + ".copy";
    cmd.copy_of = of;
    cmd.bytes = bytes;
    cmd.device = kHostDevice;
    return cmd;
  }
  // NodeCopier::StartFill, then FinishCopies: the outcome `done` was given.
  Status Fill(const Command& cmd, const NodeCopier::Source& source, const Allocation& memory) {
    std::optional<Status> outcome;
    a_.copier->StartFill(cmd, source, memory, [&](Status s) { outcome = std::move(s); });
    a_.copier->FinishCopies();
    EXPECT_FALSE(a_.copier->Copying(cmd.name).has_value());
    return outcome.value_or(Status(ErrorCode::kInternal, "the copy's done never ran"));
  }
  size_t Grants() {
    auto keys = a_.conn->Command({"KEYS", a_.opt.keys.CopyGrant("*")});
    return keys.ok() ? keys->elements.size() : 999;
  }
  std::string Contents(const Allocation& memory, uint64_t bytes) {
    void* mapped = OpenHostShm(memory.ipc_handle, bytes, 0).value();
    std::string out(static_cast<const char*>(mapped), bytes);
    (void)CloseHostShm(mapped, bytes, 0);
    return out;
  }

  test::RedisServer redis_;
  Node a_{redis_, "a", "a0a0"}, b_{redis_, "b", "b0b0"};
};

TEST_F(NodeCopyTest, ATensorOfAnotherNodeIsCopiedIntoTheNewMemoryAgainstAGrantUsedOnce) {
  const std::string bytes = test::RandomBytes(5000, 7);
  Publish("w", bytes);
  Command cmd = CopyCommand("w", bytes.size());
  auto source = a_.copier->Locate(cmd);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(source->node, "b");
  EXPECT_EQ(source->ctime_ms, 1234);
  EXPECT_EQ(source->ucx_address, "b0b0");
  Allocation memory = a_.devices->Allocate(kHostDevice, bytes.size(), true).value();
  Status filled = Fill(cmd, source.value(), memory);
  ASSERT_TRUE(filled.ok()) << filled.ToString();
  EXPECT_EQ(Contents(memory, bytes.size()), bytes);
  EXPECT_EQ(Grants(), 0u);  // redeemed by the serving side: a grant serves once
  ASSERT_EQ(b_.service.answers.size(), 1u);
  EXPECT_TRUE(b_.service.answers.begin()->second.status.ok());
}

TEST_F(NodeCopyTest, AReadWithAWrongTokenIsRefusedAndTheGrantIsWithdrawn) {
  const std::string bytes = test::RandomBytes(64, 8);
  Publish("w", bytes);
  Command cmd = CopyCommand("w", bytes.size());
  a_.service.tampered = true;
  Allocation memory = a_.devices->Allocate(kHostDevice, bytes.size(), true).value();
  Status filled = Fill(cmd, a_.copier->Locate(cmd).value(), memory);
  EXPECT_EQ(filled.code(), ErrorCode::kPermissionDenied) << filled.ToString();
  EXPECT_NE(filled.message().find("copying 'w' from node 'b'"), std::string::npos)
      << filled.ToString();
  EXPECT_EQ(Contents(memory, bytes.size()), std::string(bytes.size(), '\0'));
  EXPECT_EQ(Grants(), 0u);  // the asker withdrew the grant its failed fetch left
}

TEST_F(NodeCopyTest, AReadOfATensorGoneOrRemadeIsNotFound) {
  const std::string bytes = test::RandomBytes(64, 9);
  Publish("w", bytes);
  Command cmd = CopyCommand("w", bytes.size());
  auto source = a_.copier->Locate(cmd);
  ASSERT_TRUE(source.ok());
  b_.table.find("w")->second.record.ctime_ms = 999;  // remade since: another tensor
  Allocation memory = a_.devices->Allocate(kHostDevice, bytes.size(), true).value();
  EXPECT_EQ(Fill(cmd, source.value(), memory).code(), ErrorCode::kNotFound);
}

TEST_F(NodeCopyTest, LocateRefusesWhatCannotBeCopied) {
  Publish("w", "abcd");
  auto code = [&](const std::string& of, uint64_t bytes) {
    return a_.copier->Locate(CopyCommand(of, bytes)).status().code();
  };
  EXPECT_EQ(code("none", 4), ErrorCode::kNotFound);
  EXPECT_EQ(code("w", 5), ErrorCode::kInvalidArgument);  // another size
  Hset(a_.opt.keys.Tensor("here"), {"node", "a", "bytes", "4", "ctime", "1", "state", "ready"});
  EXPECT_EQ(code("here", 4), ErrorCode::kInvalidArgument);  // this node's own
  Hset(a_.opt.keys.Tensor("w"), {"state", "creating"});
  EXPECT_EQ(code("w", 4), ErrorCode::kNotReady);
  Hset(a_.opt.keys.Tensor("w"), {"state", "ready"});
  Hset(b_.opt.keys.Server("b"), {"ucx_version", "1.13.1"});
  EXPECT_EQ(code("w", 4), ErrorCode::kUnsupported);  // UCX versions that cannot talk
  Hset(b_.opt.keys.Server("b"), {"ucx_version", "1.22.0", "ucx_address", ""});
  EXPECT_EQ(code("w", 4), ErrorCode::kUnsupported);  // a server that does not copy
  ASSERT_TRUE(a_.conn->Command({"DEL", b_.opt.keys.Server("b")}).ok());
  EXPECT_EQ(code("w", 4), ErrorCode::kUnavailable);  // no live server there
  // Copies off here: the reason given.
  Hset(b_.opt.keys.Server("b"), {"instance", "bbbb", "ucx_address", "b0b0"});
  NodeCopier off(NodeCopierOptionsOf(a_.opt), *a_.serving, a_.table, *a_.devices, nullptr,
                 "copies are off here");
  auto refused = off.Locate(CopyCommand("w", 4));
  EXPECT_EQ(refused.status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(refused.status().message(), "copies are off here");
}

}  // namespace
}  // namespace mcd
