// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// RecordReads over a real redis-server, the hashes written by hand as a server writes them: a
// record read back field for field, a missing one told from a Redis that lost it, names sorted
// and filtered by glob, and a listing (pipelined in windows) that returns every record in order,
// names what it cannot read, and reads the holders when asked.
#include "client/record_reads.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "memcuda/keys.h"
#include "test_support.h"

namespace mcd {
namespace {

class RecordReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    conn_ = redis_.Connect();
    opt_.redis_url = redis_.parsed_url();
    opt_.node = "n1";
    Heartbeat("");
  }
  // The node's heartbeat, read as a client reads it at connect; `settled`: its settled field.
  void Heartbeat(const std::string& settled) {
    ASSERT_TRUE(conn_
                    ->Command({"HSET", keys_.Server("n1"), "node", "n1", "instance", "i1", "pid",
                               "1", "settled", settled})
                    .ok());
    view_ = std::make_unique<ServerView>(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
    auto info = view_->Read();
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    view_->Adopt(std::move(info).value());
    reads_ = std::make_unique<RecordReads>(*conn_, keys_, *view_);
  }
  // A ready u8[bytes] host tensor `name`.
  static TensorRecord Record(const std::string& name, uint64_t bytes) {
    TensorRecord r;
    r.name = name;
    r.dtype = DType::kU8;
    r.shape = {static_cast<int64_t>(bytes)};
    r.device = kHostDevice;
    r.bytes = bytes;
    r.ipc_kind = IpcKind::kHostShm;
    r.ipc_handle = "/mcd-rr-" + name;
    r.refcount = static_cast<int64_t>(bytes % 7 + 1);
    r.state = "ready";
    r.node = "n1";
    r.owner = "i1";
    r.ctime_ms = 1700000000000 + static_cast<int64_t>(bytes);
    return r;
  }
  // Writes the hashes of `records` in one pipeline.
  void Write(const std::vector<TensorRecord>& records) {
    for (const TensorRecord& r : records) {
      std::vector<std::string> argv = {"HSET", keys_.Tensor(r.name)};
      for (auto& [field, value] : HashFields(r)) {
        argv.push_back(field);
        argv.push_back(value);
      }
      ASSERT_TRUE(conn_->Append(std::vector<std::string_view>(argv.begin(), argv.end())).ok());
    }
    for (size_t i = 0; i < records.size(); ++i) ASSERT_TRUE(conn_->ReadReply().ok());
  }

  test::RedisServer redis_;
  std::unique_ptr<RedisConnection> conn_;
  KeySpace keys_;
  ClientOptions opt_;
  std::unique_ptr<ServerView> view_;
  std::unique_ptr<RecordReads> reads_;
};

TEST_F(RecordReadsTest, StatReadsTheHashFieldForField) {
  TensorRecord want = Record("a", 96);
  Write({want});
  auto got = reads_->Stat("a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->name, "a");
  EXPECT_EQ(got->bytes, 96u);
  EXPECT_EQ(got->shape, want.shape);
  EXPECT_EQ(got->ipc_handle, want.ipc_handle);
  EXPECT_EQ(got->refcount, want.refcount);
  EXPECT_EQ(got->ctime_ms, want.ctime_ms);
  EXPECT_EQ(got->owner, "i1");
}

TEST_F(RecordReadsTest, AMissingHashIsNotFoundOrTryAgainWhereRedisLostIt) {
  EXPECT_EQ(reads_->Stat("absent").status().code(), ErrorCode::kNotFound);
  // The heartbeat names a settled script Redis lacks: Redis restarted, the server not done yet.
  Heartbeat(std::string(40, 'f'));
  EXPECT_EQ(reads_->Stat("absent").status().code(), ErrorCode::kTryAgain);
}

TEST_F(RecordReadsTest, NamesAreSortedAndFilteredByTheGlob) {
  Write({Record("b2", 1), Record("a1", 2), Record("b1", 3), Record("c", 4)});
  ASSERT_TRUE(conn_->Command({"SET", "other:tensor:{b3}", "x"}).ok());  // not under the prefix
  auto all = reads_->ListNames("*");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all.value(), (std::vector<std::string>{"a1", "b1", "b2", "c"}));
  auto bs = reads_->ListNames("b*");
  ASSERT_TRUE(bs.ok());
  EXPECT_EQ(bs.value(), (std::vector<std::string>{"b1", "b2"}));
}

// More names than two windows of pipelined reads: every record comes back, in order, its own.
TEST_F(RecordReadsTest, AListingReturnsEveryRecordInOrder) {
  std::vector<TensorRecord> records;
  for (int i = 0; i < 2345; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "t%05d", i);
    records.push_back(Record(name, static_cast<uint64_t>(i + 1)));
  }
  Write(records);
  std::vector<std::string> unreadable;
  auto listed = reads_->List("*", &unreadable, false);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(unreadable.empty());
  ASSERT_EQ(listed->size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    ASSERT_EQ((*listed)[i].name, records[i].name) << i;
    ASSERT_EQ((*listed)[i].bytes, records[i].bytes) << i;
    ASSERT_EQ((*listed)[i].ipc_handle, records[i].ipc_handle) << i;
    ASSERT_EQ((*listed)[i].refcount, records[i].refcount) << i;
  }
}

TEST_F(RecordReadsTest, AListingNamesWhatItCannotRead) {
  Write({Record("good", 8)});
  ASSERT_TRUE(conn_->Command({"SET", keys_.Tensor("string"), "x"}).ok());
  ASSERT_TRUE(conn_->Command({"HSET", keys_.Tensor("fieldless"), "color", "red"}).ok());
  ASSERT_TRUE(conn_->Command({"HSET", keys_.Tensor("bad"), "dtype", "f99", "shape", "[1]"}).ok());
  std::vector<std::string> unreadable;
  auto listed = reads_->List("*", &unreadable, false);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "good");
  ASSERT_EQ(unreadable.size(), 3u);
  EXPECT_EQ(unreadable[0].rfind("bad: ", 0), 0u) << unreadable[0];
  EXPECT_NE(unreadable[0].find("dtype"), std::string::npos) << unreadable[0];
  EXPECT_EQ(unreadable[1], "string: not a hash");
  EXPECT_EQ(unreadable[2], "fieldless: a hash that holds none of a tensor's fields");
}

TEST_F(RecordReadsTest, AListingWithHoldersReadsThem) {
  Write({Record("held", 8)});
  ASSERT_TRUE(conn_->Command({"HSET", keys_.Tensor("held"), "holder:77:88", "3"}).ok());
  auto plain = reads_->List("*", nullptr, false);
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->size(), 1u);
  EXPECT_TRUE((*plain)[0].holders.empty());
  auto listed = reads_->List("*", nullptr, true);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  ASSERT_EQ((*listed)[0].holders.size(), 1u);
  EXPECT_EQ((*listed)[0].holders[0].pid, 77);
  EXPECT_EQ((*listed)[0].holders[0].refs, 3);
}

}  // namespace
}  // namespace mcd
