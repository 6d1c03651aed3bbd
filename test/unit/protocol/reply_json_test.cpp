// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The one assembler of a tensor's success reply (protocol/json_codec.h): the exact text of each
// op's reply, that its parts assemble into the same text as commit.lua would, and that a client
// reads the record back from it; and a record printed with one more member (mcd-get --json).
#include <gtest/gtest.h>

#include "memcuda/protocol.h"
#include "protocol/json_codec.h"

namespace mcd {
namespace {

TensorRecord Sample() {
  TensorRecord r;
  r.name = "t";
  r.dtype = DType::kF32;
  r.shape = {2, 3};
  r.device = kHostDevice;
  r.bytes = 24;
  r.refcount = 1;
  r.state = "ready";
  r.ctime_ms = 1700000000000;
  r.node = "n";
  r.owner = "inst";
  r.ipc_kind = IpcKind::kHostShm;
  r.ipc_handle = "/mcd-t";
  return r;
}

TEST(TensorReply, EachOpSaysItsCountAndWhetherItFreed) {
  std::string head = RecordJsonHead(Sample());
  std::string record = head + R"(,"refcount":)";
  EXPECT_EQ(TensorReplyJson("r1", Op::kCreate, head, 1),
            R"({"ok":true,"op":"create","req":"r1","tensor":)" + record + "1}}");
  EXPECT_EQ(TensorReplyJson("", Op::kPublish, head, 1),
            R"({"ok":true,"op":"publish","tensor":)" + record + "1}}");
  EXPECT_EQ(TensorReplyJson("r2", Op::kGet, head, 3),
            R"({"ok":true,"op":"get","req":"r2","tensor":)" + record + "3}}");
  EXPECT_EQ(TensorReplyJson("r3", Op::kDelete, head, 2),
            R"({"ok":true,"op":"delete","req":"r3","tensor":)" + record + R"(2},"freed":false})");
  EXPECT_EQ(TensorReplyJson("r3", Op::kDelete, head, -1),
            R"({"ok":true,"op":"delete","req":"r3","tensor":)" + record + R"(0},"freed":true})");
  EXPECT_EQ(TensorReplyJson("r4", Op::kAbandon, head, 0),
            R"({"ok":true,"op":"abandon","req":"r4","tensor":)" + record + R"(0},"freed":true})");
}

TEST(TensorReply, PartsAssembleAsTheCommitScriptDoes) {
  TensorReplyParts parts = TensorReplyHead("r5", Op::kDelete, RecordJsonHead(Sample()));
  // commit.lua: head .. n .. held_tail while referenced, head .. '0' .. freed_tail once freed.
  EXPECT_EQ(TensorReplyJson(parts.head, 4, parts.held_tail, parts.freed_tail),
            parts.head + "4" + parts.held_tail);
  EXPECT_EQ(TensorReplyJson(parts.head, 0, parts.held_tail, parts.freed_tail),
            parts.head + "0" + parts.freed_tail);
  for (long long count : {0LL, 4LL}) {
    auto read =
        RecordFromReply(TensorReplyJson(parts.head, count, parts.held_tail, parts.freed_tail));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    TensorRecord want = Sample();
    want.refcount = count;
    EXPECT_EQ(RecordToJson(read.value()), RecordToJson(want));
  }
}

TEST(TensorReply, ARecordTakesOneMoreMemberThroughTheCodec) {
  TensorRecord r = Sample();
  std::string plain = RecordToJson(r);
  EXPECT_EQ(RecordToJson(r, "values", "[1,2.5]"),
            plain.substr(0, plain.size() - 1) + R"(,"values":[1,2.5]})");
}

}  // namespace
}  // namespace mcd
