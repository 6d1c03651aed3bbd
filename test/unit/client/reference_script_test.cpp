// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// ReferenceScript (client/reference_script.h) against a real redis-server: a reference taken and
// given back with exact refcounts and holder fields, a release of a reference taken before the
// hash was put back (another epoch), which gives back nothing, and a release by a process that
// holds none of another's references. No server runs: the script answers these alone.
#include "client/reference_script.h"

#include <gtest/gtest.h>

#include <map>

#include "test_support.h"

namespace mcd {
namespace {

class ReferenceScriptTest : public ::testing::Test {
 protected:
  using Whose = ReferenceBook::Whose;

  void SetUp() override {
    conn_ = redis_.Connect();
    ASSERT_TRUE(conn_);
    opt_.redis_url = RedisUrl::Parse(redis_.url()).value();
    opt_.node = "n";
    opt_.timeout_ms = 5000;
    TensorRecord r;
    r.name = "t";
    r.dtype = DType::kF32;
    r.shape = {4};
    r.device = kHostDevice;
    r.bytes = 16;
    r.refcount = 1;
    r.state = "ready";
    r.ctime_ms = 1700000000000;
    r.node = "n";
    r.owner = "inst";
    r.ipc_kind = IpcKind::kHostShm;
    r.ipc_handle = "/mcd-t";
    r.epoch = "e1";
    std::vector<std::string> hset = {"HSET", opt_.keys.Tensor("t")};
    for (auto& [field, value] : HashFields(r)) {
      hset.push_back(field);
      hset.push_back(value);
    }
    Do(std::vector<std::string_view>(hset.begin(), hset.end()));
    Do({"HSET", opt_.keys.Server("n"), "instance", "inst", "event_history", "100"});
    server_ = std::make_unique<ServerView>(*conn_, opt_.node, opt_.keys, opt_.redis_url.Redacted());
    transport_ = std::make_unique<Transport>(
        *conn_, TransportOptions{opt_.node, opt_.keys, opt_.timeout_ms, opt_.command_socket},
        *server_);
    script_ = std::make_unique<ReferenceScript>(*conn_, opt_.node, opt_.keys, *transport_, holder_,
                                                *server_);
    ASSERT_TRUE(script_->Load().ok());
  }

  RedisValue Do(const std::vector<std::string_view>& argv) {
    auto reply = conn_->Command(argv);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? std::move(reply).value() : RedisValue{};
  }
  std::map<std::string, std::string> Hash() {
    RedisValue all = Do({"HGETALL", opt_.keys.Tensor("t")});
    std::map<std::string, std::string> out;
    for (size_t i = 0; i + 1 < all.elements.size(); i += 2)
      out[all.elements[i].str] = all.elements[i + 1].str;
    return out;
  }

  test::RedisServer redis_;
  std::unique_ptr<RedisConnection> conn_;
  ClientOptions opt_;
  const Holder holder_{4242, 99, 0};  // no such process is needed: the script takes its word
  const std::string field_ = "holder:" + HolderId(4242, 99);
  std::unique_ptr<ServerView> server_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<ReferenceScript> script_;
};

TEST_F(ReferenceScriptTest, TakesAndGivesBackAReferenceOfItsHolder) {
  auto got = script_->Get("t");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->refcount, 2);
  EXPECT_EQ(got->epoch, "e1");
  auto h = Hash();
  EXPECT_EQ(h["refcount"], "2");
  EXPECT_EQ(h[field_], "1");
  EXPECT_EQ(h["bound"], "1");
  EXPECT_EQ(Do({"SISMEMBER", opt_.keys.Holders("n"), HolderId(4242, 99)}).integer, 1);

  auto released = script_->Release("t", got->epoch, Whose::kTaken);
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->refcount, 1);
  h = Hash();
  EXPECT_EQ(h["refcount"], "1");
  EXPECT_EQ(h[field_], "0");
  EXPECT_EQ(h["bound"], "0");
  EXPECT_EQ(Do({"XLEN", opt_.keys.Events()}).integer, 2);        // the get and the release
  EXPECT_EQ(Do({"LLEN", opt_.keys.NodeQueue("n")}).integer, 0);  // nothing for a server
}

TEST_F(ReferenceScriptTest, AReferenceOfAnotherEpochIsForgottenNotGivenBack) {
  auto got = script_->Get("t");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  // Redis lost the hash and the server put it back: a new epoch, which does not count the get.
  Do({"HSET", opt_.keys.Tensor("t"), "epoch", "e2", "refcount", "1"});
  auto released = script_->Release("t", "e1", Whose::kTaken);
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->refcount, 1);  // the hash as it is
  EXPECT_EQ(released->epoch, "e2");
  EXPECT_EQ(Hash()["refcount"], "1");
  EXPECT_EQ(Hash()[field_], "1");
}

TEST_F(ReferenceScriptTest, AReleaseOfNoneOfItsOwnIsRefused) {
  Do({"HSET", opt_.keys.Tensor("t"), "refcount", "2", "holder:1:1", "2", "bound", "2"});
  auto released = script_->Release("t", ReferenceScript::kAnyEpoch, Whose::kUnknown);
  ASSERT_FALSE(released.ok());
  EXPECT_EQ(released.status().code(), ErrorCode::kNotHeld);
  EXPECT_EQ(Hash()["refcount"], "2");
}

// A client gives back only the kind of reference it has. One it took, bound to its holder: when
// another client of the same process (so of the same holder: a second Client, an mcd-rm the
// program ran) gave that one back already, the creator's, bound to nobody, is not its to give
// back. One it created, bound to nobody: never the process's own, which another client of it
// holds. A release not known to be either (a tool's, for its parent) gives back the holder's
// own first, else one bound to nobody.
TEST_F(ReferenceScriptTest, AClientGivesBackOnlyTheKindOfReferenceItHas) {
  Do({"HSET", opt_.keys.Tensor("t"), "refcount", "2"});  // two bound to nobody
  for (bool many : {false, true}) {
    auto got = script_->Get("t");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(Hash()[field_], "1");
    // Another client of its process gives the holder's reference back (it took none itself).
    auto other = script_->Release("t", ReferenceScript::kAnyEpoch, Whose::kUnknown);
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    EXPECT_EQ(Hash()[field_], "0");
    Status released = many ? script_->ReleaseMany({"t"}, {got->epoch}, {Whose::kTaken}).status()
                           : script_->Release("t", got->epoch, Whose::kTaken).status();
    ASSERT_FALSE(released.ok()) << many;
    EXPECT_EQ(released.code(), ErrorCode::kNotHeld) << released.ToString();
    EXPECT_NE(released.message().find("that this client took was given back already"),
              std::string::npos)
        << released.message();
    EXPECT_EQ(Hash()["refcount"], "2") << many;  // both still there
    EXPECT_EQ(Hash()["bound"], "0") << many;
  }
  // The creator's release while the process holds a reference of its own: the creator's goes.
  for (bool many : {false, true}) {
    ASSERT_TRUE(script_->Get("t").ok());
    Status creators =
        many ? script_->ReleaseMany({"t"}, {ReferenceScript::kAnyEpoch}, {Whose::kCreated}).status()
             : script_->Release("t", ReferenceScript::kAnyEpoch, Whose::kCreated).status();
    ASSERT_TRUE(creators.ok()) << creators.ToString();
    EXPECT_EQ(Hash()["refcount"], "2") << many;
    EXPECT_EQ(Hash()[field_], "1") << many << ": the process's own stays";
    EXPECT_EQ(Hash()["bound"], "1") << many;
    ASSERT_TRUE(script_->Release("t", ReferenceScript::kAnyEpoch, Whose::kTaken).ok());
    EXPECT_EQ(Hash()[field_], "0");
    Do({"HINCRBY", opt_.keys.Tensor("t"), "refcount", "1"});  // bound to nobody, for the next
  }
  // With none bound to nobody left, the creator's release is refused.
  Do({"HSET", opt_.keys.Tensor("t"), "refcount", "2", field_, "2", "bound", "2"});
  auto refused = script_->Release("t", ReferenceScript::kAnyEpoch, Whose::kCreated);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kNotHeld);
  EXPECT_NE(refused.status().message().find("bound to no process (a creator's"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(Hash()["refcount"], "2");
  // Not known: the holder's own first.
  auto any = script_->Release("t", ReferenceScript::kAnyEpoch, Whose::kUnknown);
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(Hash()[field_], "1");
}

TEST_F(ReferenceScriptTest, AGetOfATensorOfAnotherNodeSaysWhere) {
  Do({"HSET", opt_.keys.Tensor("t"), "node", "m"});
  auto got = script_->Get("t");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), ErrorCode::kWrongNode);
  EXPECT_NE(got.status().message().find("lives on node 'm'"), std::string::npos);
  EXPECT_EQ(Hash()["refcount"], "1");
}

}  // namespace
}  // namespace mcd
