// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// CommandApplier (server/applier.h) over a real redis-server and host memory: commands taken from
// the list route create, get and delete a tensor (its hash, refcount and holders in Redis, the
// replies in the reply lists, the bytes in its shared memory), a command waits for the commit of
// the tensor it names, and a get of a missing tensor is answered not found. Main thread only.
#include "server/applier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "common/hex.h"
#include "common/process.h"
#include "protocol/json_codec.h"
#include "unit/server/serving_fixture.h"

namespace mcd {
namespace {

using ApplierTest = test::ServingTest;

const char* kCreate =
    R"({"op":"create","name":"t","dtype":"f32","shape":[4,256],"device":"cpu","req":"r1","pid":77})";

TEST_F(ApplierTest, ACreateThenAGetThenADeleteOfAHostTensor) {
  Apply({kCreate});
  pipeline_.Drain();
  std::map<std::string, std::string> hash = Hash("t");
  const std::string handle = hash["ipc_handle"];
  ASSERT_EQ(handle.rfind(prefix_, 0), 0u) << handle;
  ASSERT_TRUE(ShmExists(handle));
  const std::string ctime = hash["ctime"];
  EXPECT_GT(std::stoll(ctime), 0);
  hash.erase("ctime");
  const std::map<std::string, std::string> expected = {
      {"dtype", "f32"},      {"shape", "[4,256]"},     {"node", "n1"},         {"device", "-1"},
      {"bytes", "4096"},     {"ipc_kind", "host_shm"}, {"ipc_handle", handle}, {"offset", "0"},
      {"refcount", "1"},     {"state", "ready"},       {"owner", "inst1"},     {"lifetime", "heap"},
      {"creator_pid", "77"}, {"owner_pid", "0"},       {"owner_start", "0"}};
  EXPECT_EQ(hash, expected);
  // The reply, as the commit script wrote it around the record.
  const std::string record = R"({"bytes":4096,"creator_pid":77,"ctime":)" + ctime +
                             R"(,"device":-1,"dtype":"f32","ipc_handle_hex":")" +
                             HexEncode(handle) +
                             R"(","ipc_kind":"host_shm","lifetime":"heap","name":"t","node":"n1",)"
                             R"("offset":0,"owner":"inst1","shape":[4,256],"state":"ready",)";
  EXPECT_EQ(test::List(*side_, opt_.keys.Reply("r1")),
            std::vector<std::string>{R"({"ok":true,"op":"create","req":"r1","tensor":)" + record +
                                     R"("refcount":1}})"});
  EXPECT_TRUE(test::List(*side_, processing_).empty());
  ASSERT_NE(table_.find("t"), table_.end());

  // Bytes written through one mapping are read back through another.
  const std::string bytes = test::RandomBytes(4096, 41);
  void* written = OpenHostShm(handle, bytes.size(), 0).value();
  std::memcpy(written, bytes.data(), bytes.size());
  ASSERT_TRUE(CloseHostShm(written, bytes.size(), 0).ok());

  // A get for this process: a reference held by it.
  const std::string holder = HolderId(getpid(), ProcessStartTime(getpid()));
  const std::string pid = std::to_string(getpid());
  Apply({R"({"op":"get","name":"t","req":"r2","owner_pid":)" + pid + "}"});
  pipeline_.Drain();
  EXPECT_EQ(Hash("t")["refcount"], "2");
  EXPECT_TRUE(Holds(holder));
  EXPECT_EQ(Hash("t")["holder:" + holder], "1");
  EXPECT_EQ(Hash("t")["bound"], "1");
  EXPECT_EQ(test::List(*side_, opt_.keys.Reply("r2")),
            std::vector<std::string>{R"({"ok":true,"op":"get","req":"r2","tensor":)" + record +
                                     R"("refcount":2}})"});
  void* read = OpenHostShm(handle, bytes.size(), 0).value();
  EXPECT_EQ(std::memcmp(read, bytes.data(), bytes.size()), 0) << "the bytes changed";
  ASSERT_TRUE(CloseHostShm(read, bytes.size(), 0).ok());

  // The holder's reference given back, then the creator's: the hash goes, then the memory.
  Apply({R"({"op":"delete","name":"t","req":"r3","owner_pid":)" + pid + "}"});
  pipeline_.Drain();
  EXPECT_EQ(Hash("t")["refcount"], "1");
  EXPECT_EQ(Hash("t")["holder:" + holder], "0") << "the holder still holds a reference";
  EXPECT_EQ(Hash("t")["bound"], "0");
  EXPECT_TRUE(ShmExists(handle));
  Apply({R"({"op":"delete","name":"t","req":"r4"})"});
  pipeline_.Drain();
  EXPECT_TRUE(Hash("t").empty());
  std::vector<std::string> reply = test::List(*side_, opt_.keys.Reply("r4"));
  ASSERT_EQ(reply.size(), 1u);
  EXPECT_EQ(reply[0].rfind(R"({"ok":true,"op":"delete","req":"r4","tensor":)", 0), 0u) << reply[0];
  EXPECT_NE(reply[0].find(R"("refcount":0)"), std::string::npos) << reply[0];
  EXPECT_EQ(table_.find("t"), table_.end());
  EXPECT_TRUE(test::WaitFor([&] { return !ShmExists(handle); }, 30000))
      << "the memory of a deleted tensor is not freed";
  EXPECT_TRUE(test::List(*side_, processing_).empty());
}

TEST_F(ApplierTest, ACommandNamingATensorWhoseCommitIsDueWaitsForIt) {
  Apply({kCreate});  // its commit sent, its result not read
  ASSERT_TRUE(pipeline_.IsDue("t"));
  Apply({R"({"op":"get","name":"t","req":"r2"})"});
  pipeline_.Drain();
  std::vector<std::string> reply = test::List(*side_, opt_.keys.Reply("r2"));
  ASSERT_EQ(reply.size(), 1u);
  EXPECT_EQ(reply[0].rfind(R"({"ok":true,"op":"get","req":"r2",)", 0), 0u) << reply[0];
  EXPECT_EQ(Hash("t")["refcount"], "2");
  // Within one batch too: the get sees the tensor its create before it made.
  Apply({Create("u", "r5"), R"({"op":"get","name":"u","req":"r6"})"});
  pipeline_.Drain();
  reply = test::List(*side_, opt_.keys.Reply("r6"));
  ASSERT_EQ(reply.size(), 1u);
  EXPECT_EQ(reply[0].rfind(R"({"ok":true,"op":"get","req":"r6",)", 0), 0u) << reply[0];
  EXPECT_EQ(Hash("u")["refcount"], "2");
  EXPECT_TRUE(test::List(*side_, processing_).empty());
}

TEST_F(ApplierTest, AGetOfAMissingTensorIsAnsweredNotFound) {
  Apply({R"({"op":"get","name":"nope","req":"r9"})"});
  pipeline_.Drain();
  EXPECT_EQ(test::List(*side_, opt_.keys.Reply("r9")),
            std::vector<std::string>{ErrorReplyJson(
                "r9", "get", Status(ErrorCode::kNotFound, "no tensor named 'nope'"))});
  EXPECT_TRUE(test::List(*side_, processing_).empty());
  EXPECT_TRUE(Hash("nope").empty());
}

}  // namespace
}  // namespace mcd
