// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// records.h: a tensor hash as Redis returns it (HMGET of TensorFieldNames(), or HGETALL with the
// holders) parsed into a record, and a hash crafted by hand refused field by field, naming the
// field: anyone with Redis credentials can write a hash, and a reader maps memory by it.
#include "client/records.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memcuda/keys.h"
#include "test_support.h"

namespace mcd {
namespace {

class RecordsTest : public ::testing::Test {
 protected:
  void SetUp() override { conn_ = redis_.Connect(); }

  // A ready u8[2,8] host tensor, as a server writes its hash.
  static TensorRecord Good() {
    TensorRecord r;
    r.name = "t";
    r.dtype = DType::kU8;
    r.shape = {2, 8};
    r.device = kHostDevice;
    r.bytes = 16;
    r.ipc_kind = IpcKind::kHostShm;
    r.ipc_handle = "/mcd-test-object";
    r.offset = 4096;
    r.refcount = 3;
    r.state = "ready";
    r.ctime_ms = 1700000000123;
    r.node = "n1";
    r.owner = "instance-1";
    r.lifetime = Lifetime::kStack;
    r.creator_pid = 4242;
    r.owner_pid = 4343;
    r.owner_start = 98765;
    r.epoch = "ep-7";
    return r;
  }
  // Writes `r`'s hash with `field` set to `value` ("" with `drop`: the field left out).
  void Write(const TensorRecord& r, const std::string& field = "", const std::string& value = "",
             bool drop = false) {
    std::string key = keys_.Tensor(r.name);
    ASSERT_TRUE(conn_->Command({"DEL", key}).ok());
    std::vector<std::string> argv = {"HSET", key};
    for (auto& [name, text] : HashFields(r)) {
      if (name == field && drop) continue;
      argv.push_back(name);
      argv.push_back(name == field ? value : text);
    }
    std::vector<std::string_view> views(argv.begin(), argv.end());
    ASSERT_TRUE(conn_->Command(views).ok());
  }
  Result<TensorRecord> Hmget(const std::string& name) {
    std::string key = keys_.Tensor(name);
    std::vector<std::string_view> argv = {"HMGET", key};
    for (const std::string& field : TensorFieldNames()) argv.push_back(field);
    auto reply = conn_->Command(argv);
    EXPECT_TRUE(reply.ok());
    return RecordFromHmget(name, reply.value());
  }
  Result<TensorRecord> Hgetall(const std::string& name) {
    auto reply = conn_->Command({"HGETALL", keys_.Tensor(name)});
    EXPECT_TRUE(reply.ok());
    return RecordFromHgetall(name, reply.value());
  }

  test::RedisServer redis_;
  std::unique_ptr<RedisConnection> conn_;
  KeySpace keys_;
};

void ExpectSame(const TensorRecord& got, const TensorRecord& want) {
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.dtype, want.dtype);
  EXPECT_EQ(got.shape, want.shape);
  EXPECT_EQ(got.device, want.device);
  EXPECT_EQ(got.bytes, want.bytes);
  EXPECT_EQ(got.ipc_kind, want.ipc_kind);
  EXPECT_EQ(got.ipc_handle, want.ipc_handle);
  EXPECT_EQ(got.offset, want.offset);
  EXPECT_EQ(got.refcount, want.refcount);
  EXPECT_EQ(got.state, want.state);
  EXPECT_EQ(got.ctime_ms, want.ctime_ms);
  EXPECT_EQ(got.node, want.node);
  EXPECT_EQ(got.owner, want.owner);
  EXPECT_EQ(got.lifetime, want.lifetime);
  EXPECT_EQ(got.creator_pid, want.creator_pid);
  EXPECT_EQ(got.owner_pid, want.owner_pid);
  EXPECT_EQ(got.owner_start, want.owner_start);
  EXPECT_EQ(got.epoch, want.epoch);
}

TEST_F(RecordsTest, AHashIsReadBackFieldForField) {
  Write(Good());
  auto hmget = Hmget("t");
  ASSERT_TRUE(hmget.ok()) << hmget.status().ToString();
  ExpectSame(hmget.value(), Good());
  auto hgetall = Hgetall("t");
  ASSERT_TRUE(hgetall.ok()) << hgetall.status().ToString();
  ExpectSame(hgetall.value(), Good());
}

TEST_F(RecordsTest, HgetallReadsTheHoldersThatStillHoldReferences) {
  Write(Good());
  ASSERT_TRUE(
      conn_->Command({"HSET", keys_.Tensor("t"), "holder:11:22", "2", "holder:33:44", "0"}).ok());
  auto record = Hgetall("t");
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ASSERT_EQ(record->holders.size(), 1u) << "a holder at 0 gave its references back";
  EXPECT_EQ(record->holders[0].pid, 11);
  EXPECT_EQ(record->holders[0].start, 22u);
  EXPECT_EQ(record->holders[0].refs, 2);
  ASSERT_TRUE(conn_->Command({"HSET", keys_.Tensor("t"), "holder:11:22", "two"}).ok());
  auto bad = Hgetall("t");
  EXPECT_EQ(bad.status().code(), ErrorCode::kUnexpectedReply);
  EXPECT_NE(bad.status().message().find("holder:11:22"), std::string::npos)
      << bad.status().message();
}

TEST_F(RecordsTest, NoHashIsNotFound) {
  EXPECT_EQ(Hmget("absent").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(Hgetall("absent").status().code(), ErrorCode::kNotFound);
}

TEST_F(RecordsTest, AReplyOfTheWrongShapeIsUnexpected) {
  RedisValue reply;
  reply.type = RedisValue::Type::kArray;
  reply.elements.resize(TensorFieldNames().size() - 1);
  EXPECT_EQ(RecordFromHmget("t", reply).status().code(), ErrorCode::kUnexpectedReply);
}

// Each field a reader relies on, crafted: refused, the error naming that field.
TEST_F(RecordsTest, ACraftedHashIsRefusedFieldByField) {
  struct Case {
    std::string field, value;
    bool drop = false;
    std::string named = "";  // the field the error names, when not `field`
  };
  const std::vector<Case> cases = {
      {"dtype", "f99"},
      {"dtype", "", true},
      {"shape", "[2,"},
      {"shape", "[4,8]", false, "bytes"},
      {"shape", "", true},
      {"bytes", "17"},
      {"bytes", "-16"},
      {"bytes", "", true},
      {"device", "0"},
      {"device", "gpu"},
      {"device", "", true},
      {"refcount", "one"},
      {"refcount", "", true},
      {"state", "", true},
      {"ctime", "noon"},
      {"offset", "-1"},
      {"offset", "9223372036854775800"},
      {"creator_pid", "x"},
      {"owner_pid", "1.5"},
      {"owner_start", "-1"},
      {"lifetime", "forever"},
      {"ipc_handle", "no-slash"},
      {"ipc_handle", "/a/b"},
      {"ipc_handle", ""},
      {"ipc_kind", "cuda_ipc", false, "device"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field + (c.drop ? " left out" : " = '" + c.value + "'"));
    Write(Good(), c.field, c.value, c.drop);
    auto hmget = Hmget("t");
    ASSERT_FALSE(hmget.ok());
    EXPECT_EQ(hmget.status().code(), ErrorCode::kUnexpectedReply);
    // A cuda_ipc kind on the cpu device is the device's fault, as ValidateRecord says.
    std::string named = c.named.empty() ? c.field : c.named;
    EXPECT_NE(hmget.status().message().find("\"" + named + "\""), std::string::npos)
        << hmget.status().message();
    EXPECT_EQ(Hgetall("t").status().code(), ErrorCode::kUnexpectedReply);
  }
}

TEST(DeleteCommand, GivesBackTheHoldersReferenceOrOneBoundToNobody) {
  Holder holder;
  holder.pid = 1234;
  holder.start = 5678;
  Command held = DeleteCommand("t", holder);
  EXPECT_EQ(held.op, Op::kDelete);
  EXPECT_EQ(held.name, "t");
  EXPECT_EQ(held.owner_pid, 1234);
  EXPECT_EQ(held.owner_start, 5678u);
  EXPECT_FALSE(held.own_only);
  EXPECT_TRUE(DeleteCommand("t", holder, /*own_only=*/true).own_only);
  Command nobodys = DeleteCommand("t", std::nullopt, /*own_only=*/true);
  EXPECT_EQ(nobodys.op, Op::kDelete);
  EXPECT_EQ(nobodys.owner_pid, 0);
  EXPECT_EQ(nobodys.owner_start, 0u);
  EXPECT_FALSE(nobodys.own_only);  // a reference bound to nobody is no holder's own
}

}  // namespace
}  // namespace mcd
