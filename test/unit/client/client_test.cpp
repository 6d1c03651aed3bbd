// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The Client facade (client.cpp) and the Client::Impl parts it drives, connect.cpp,
// requests.cpp, tensor_open.cpp and tensor_bytes.cpp, over a real redis-server and a real
// mcd-serve on host memory: the bytes written at create, read and written by another client,
// the refcount after every step, an open that takes no reference, and a node without a server.
#include <gtest/gtest.h>

#include "../../tools/lifecycle_fixture.h"

namespace mcd {
namespace {

class ClientTest : public Lifecycle {
 protected:
  // A u8 host tensor of `data`'s size, created with `data` as its contents.
  static CreateSpec Filled(const std::string& name, const std::string& data) {
    CreateSpec spec = HostSpec(name);
    spec.shape = {static_cast<int64_t>(data.size())};
    spec.contents = data.data();
    spec.contents_bytes = data.size();
    return spec;
  }
  // The refcount of a record, or -1 (and the test failed) for an error.
  static int64_t Count(const Result<TensorRecord>& record) {
    EXPECT_TRUE(record.ok()) << record.status().ToString();
    return record.ok() ? record->refcount : -1;
  }
  static std::string Read(Client& client, const TensorView& view) {
    std::string got(view.record.bytes, '\0');
    Status read = client.CopyToHost(view, got.data(), got.size());
    EXPECT_TRUE(read.ok()) << read.ToString();
    return got;
  }
};

TEST_F(ClientTest, BytesWrittenAtCreateAreReadAndWrittenByAnotherClient) {
  auto creator = ConnectClient();
  auto reader = ConnectClient();
  ASSERT_NE(creator, nullptr);
  ASSERT_NE(reader, nullptr);
  const std::string first = test::RandomBytes(65536, 7);
  auto created = creator->Create(Filled("t", first));
  ASSERT_TRUE(created.ok()) << created.status().ToString() << ServeLog();
  EXPECT_EQ(created->refcount, 1);
  EXPECT_EQ(created->state, "ready");

  auto view = reader->Get("t");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->record.refcount, 2) << "the creator's and the reader's";
  EXPECT_TRUE(view->referenced);
  EXPECT_TRUE(Read(*reader, view.value()) == first) << "the reader got other bytes";

  // The reader writes; the creator, opening it without a reference, reads what was written.
  const std::string second = test::RandomBytes(65536, 8);
  ASSERT_TRUE(reader->CopyFromHost(view.value(), second.data(), second.size()).ok());
  auto opened = creator->Open("t");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_FALSE(opened->referenced);
  EXPECT_EQ(Count(creator->Stat("t")), 2) << "an open takes no reference";
  EXPECT_TRUE(Read(*creator, opened.value()) == second) << "the creator read other bytes";

  auto released = reader->Release("t");
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->refcount, 1);
  auto last = creator->Release("t");
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(last->refcount, 0);
  EXPECT_EQ(creator->Stat("t").status().code(), ErrorCode::kNotFound);
}

TEST_F(ClientTest, AReadWithoutAReferenceOfATensorFreedMeanwhileIsNotFound) {
  auto creator = ConnectClient();
  auto reader = ConnectClient();
  ASSERT_NE(creator, nullptr);
  ASSERT_NE(reader, nullptr);
  const std::string data = test::RandomBytes(4096, 9);
  ASSERT_TRUE(creator->Create(Filled("gone", data)).ok());
  auto opened = reader->Open("gone");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_TRUE(Read(*reader, opened.value()) == data);
  // The creator's reference given back without closing the mappings, which are this process's
  // (MappingRegistry), and so the reader's too: another process freeing it does the same.
  ASSERT_EQ(Count(creator->ReleaseReference("gone")), 0);
  std::string got(data.size(), '\0');
  Status read = reader->CopyToHost(opened.value(), got.data(), got.size());
  EXPECT_EQ(read.code(), ErrorCode::kNotFound) << read.ToString();
}

TEST_F(ClientTest, ACreateOfATakenNameIsRefusedAndChangesNothing) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  const std::string data = test::RandomBytes(256, 10);
  ASSERT_TRUE(client->Create(Filled("taken", data)).ok());
  auto again = client->Create(Filled("taken", test::RandomBytes(256, 11)));
  EXPECT_EQ(again.status().code(), ErrorCode::kAlreadyExists) << again.status().ToString();
  auto view = client->Get("taken");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->record.refcount, 2);
  EXPECT_TRUE(Read(*client, view.value()) == data) << "the refused create wrote its bytes";
  ASSERT_EQ(Count(client->Release("taken")), 1);
  ASSERT_EQ(Count(client->Release("taken")), 0);
}

TEST_F(ClientTest, ANodeWithoutAServerIsUnavailableNamingTheLiveOnes) {
  ClientOptions opt;
  opt.redis_url = redis_.parsed_url();
  opt.node = "nobody-here";
  opt.timeout_ms = 2000;
  auto connected = Client::Connect(opt);
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(connected.status().message().find(node_), std::string::npos)
      << connected.status().message();
}

}  // namespace
}  // namespace mcd
