// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The typed calls of the Lua scripts (redis/script_calls.h), each run against a real
// redis-server with the real script: the typed result, and the keys the call changed.
#include "redis/script_calls.h"

#include <gtest/gtest.h>

#include <map>

#include "redis/lua_scripts.h"
#include "test_support.h"

namespace mcd {
namespace {

std::vector<std::string_view> Views(const std::vector<std::string>& argv) {
  return std::vector<std::string_view>(argv.begin(), argv.end());
}

class ScriptCallsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    conn_ = redis_.Connect();
    ASSERT_TRUE(conn_);
    auto sha = conn_->Command({"SCRIPT", "LOAD", kCommitScript});
    ASSERT_TRUE(sha.ok()) << sha.status().ToString();
    commit_sha_ = sha->str;
  }

  RedisValue Do(const std::vector<std::string_view>& argv) {
    auto reply = conn_->Command(argv);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? std::move(reply).value() : RedisValue{};
  }
  std::map<std::string, std::string> Hash(const std::string& key) {
    RedisValue all = Do({"HGETALL", key});
    std::map<std::string, std::string> out;
    for (size_t i = 0; i + 1 < all.elements.size(); i += 2)
      out[all.elements[i].str] = all.elements[i + 1].str;
    return out;
  }
  std::vector<std::string> List(const std::string& key) {
    std::vector<std::string> out;
    for (RedisValue& v : Do({"LRANGE", key, "0", "-1"}).elements) out.push_back(v.str);
    return out;
  }
  // The events' kinds and refcounts, oldest first: "create:1".
  std::vector<std::string> Events() {
    std::vector<std::string> out;
    for (RedisValue& entry : Do({"XRANGE", kEvents, "-", "+"}).elements) {
      std::map<std::string, std::string> f;
      const auto& kv = entry.elements[1].elements;
      for (size_t i = 0; i + 1 < kv.size(); i += 2) f[kv[i].str] = kv[i + 1].str;
      out.push_back(f["event"] + ":" + f["refcount"] + ":" + f["name"] + ":" + f["pid"] + ":" +
                    f["reason"]);
    }
    return out;
  }

  // A commit of `action` on tensor "t" of node "n" by instance "inst", with a req.
  CommitArgs Commit(CommitAction action, Pre pre) const {
    CommitArgs a;
    a.tensor = kTensor;
    a.processing = kProcessing;
    a.reply_list = kReplyList;
    a.first_result = kFirst;
    a.holders = kHolders;
    a.held = kHeld;
    a.events = kEvents;
    a.raw = "RAW";
    a.reply = "REPLY";
    a.reply_ttl_s = 60;
    a.first_result_ttl_s = 60;
    a.has_req = true;
    a.pre = pre;
    a.owner = "inst";
    a.action = action;
    a.event_cap = 100;
    a.name = "t";
    a.node = "n";
    return a;
  }
  Result<CommitResult> Run(const CommitArgs& a) {
    std::vector<std::string> argv = CommitCall(commit_sha_, a);
    return ParseCommitReply(conn_->CommandRaw(Views(argv)));
  }
  void ReadyTensor(const std::string& refcount) {
    Do({"HSET", kTensor, "state", "ready", "owner", "inst", "refcount", refcount});
  }

  static constexpr const char* kTensor = "p:tensor:t";
  static constexpr const char* kProcessing = "p:processing:n";
  static constexpr const char* kReplyList = "p:reply:r1";
  static constexpr const char* kFirst = "p:req:r1";
  static constexpr const char* kHolders = "p:holders:n";
  static constexpr const char* kHeld = "p:held:n:7:70";
  static constexpr const char* kEvents = "p:events";

  test::RedisServer redis_;
  std::unique_ptr<RedisConnection> conn_;
  std::string commit_sha_;
};

TEST_F(ScriptCallsTest, CommitArgvIsInTheScriptsOrder) {
  CommitArgs a = Commit(CommitAction::kIncr, Pre::kMine);
  a.event = CommitEvent{"ref", 42, "why"};
  a.holder = "7:70";
  a.delta = -1;
  a.held_tail = "HT";
  a.freed_tail = "FT";
  std::vector<std::string> want = {
      "EVALSHA", "SHA",   "7",  kTensor, kProcessing, kReplyList, kFirst, kHolders, kHeld, kEvents,
      "RAW",     "REPLY", "60", "60",    "1",         "mine",     "inst", "incr",   "100", "ref",
      "t",       "n",     "42", "why",   "7:70",      "-1",       "HT",   "FT",     "0"};
  EXPECT_EQ(CommitCall("SHA", a), want);
  a.own_only = true;
  want.back() = "1";
  EXPECT_EQ(CommitCall("SHA", a), want);
  std::vector<std::string> fields = {"state", "ready"};
  CommitArgs h = Commit(CommitAction::kHset, Pre::kAbsent);
  h.fields = &fields;
  std::vector<std::string> hset = CommitCall("SHA", h);
  ASSERT_EQ(hset.size(), 26u);
  EXPECT_EQ(hset[kCommitShaIndex], "SHA");
  EXPECT_EQ(hset[15], "absent");
  EXPECT_EQ(hset[17], "hset");
  EXPECT_EQ(hset[24], "state");
  EXPECT_EQ(hset[25], "ready");
}

TEST_F(ScriptCallsTest, CommitCreatesOnceAndAnswersARepeatWithTheFirstReply) {
  Do({"LPUSH", kProcessing, "RAW"});
  std::vector<std::string> fields = {"state", "ready", "owner", "inst", "refcount", "1"};
  CommitArgs a = Commit(CommitAction::kHset, Pre::kAbsent);
  a.fields = &fields;
  a.event = CommitEvent{"create", 42, ""};
  auto first = Run(a);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->kind, CommitResult::kOk);
  EXPECT_EQ(Hash(kTensor), (std::map<std::string, std::string>{
                               {"state", "ready"}, {"owner", "inst"}, {"refcount", "1"}}));
  EXPECT_EQ(List(kReplyList), std::vector<std::string>{"REPLY"});
  EXPECT_EQ(Do({"GET", kFirst}).str, "REPLY");
  EXPECT_TRUE(List(kProcessing).empty());
  EXPECT_EQ(Events(), std::vector<std::string>{"create:1:t:42:"});

  a.reply = "OTHER";  // a repeat of the req: the first reply again, nothing changed
  auto repeat = Run(a);
  ASSERT_TRUE(repeat.ok());
  EXPECT_EQ(repeat->kind, CommitResult::kDup);
  EXPECT_EQ(List(kReplyList), (std::vector<std::string>{"REPLY", "REPLY"}));
  EXPECT_EQ(Events().size(), 1u);

  a.has_req = false;  // another create of the name
  auto conflict = Run(a);
  ASSERT_TRUE(conflict.ok());
  EXPECT_EQ(conflict->kind, CommitResult::kConflict);
}

TEST_F(ScriptCallsTest, CommitIncrCountsHoldersAndAssemblesTheReply) {
  ReadyTensor("1");
  CommitArgs get = Commit(CommitAction::kIncr, Pre::kMine);
  get.holder = "7:70";
  get.delta = 1;
  get.reply = "HEAD";
  get.held_tail = "+held";
  get.freed_tail = "+freed";
  get.event = CommitEvent{"ref", 7, ""};
  auto taken = Run(get);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->kind, CommitResult::kOk);
  EXPECT_EQ(taken->refcount, 2);
  EXPECT_EQ(List(kReplyList), std::vector<std::string>{"HEAD2+held"});
  auto h = Hash(kTensor);
  EXPECT_EQ(h["refcount"], "2");
  EXPECT_EQ(h["holder:7:70"], "1");
  EXPECT_EQ(h["bound"], "1");
  EXPECT_EQ(Do({"SISMEMBER", kHolders, "7:70"}).integer, 1);
  EXPECT_EQ(Do({"SISMEMBER", kHeld, kTensor}).integer, 1);

  CommitArgs release = get;  // the holder's own, then the creator's, bound to nobody: freed
  release.delta = -1;
  release.has_req = false;
  auto given = Run(release);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->refcount, 1);
  EXPECT_EQ(Hash(kTensor)["holder:7:70"], "0");
  release.holder = "";
  release.held = "p:-";
  release.has_req = true;
  Do({"DEL", kReplyList, kFirst});
  auto freed = Run(release);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(freed->kind, CommitResult::kOk);
  EXPECT_EQ(freed->refcount, 0);
  EXPECT_EQ(List(kReplyList), std::vector<std::string>{"HEAD0+freed"});
  EXPECT_EQ(Do({"EXISTS", kTensor}).integer, 0);
  EXPECT_EQ(Events(), (std::vector<std::string>{"get:2:t:7:", "release:1:t:7:", "delete:0:t:7:"}));
}

TEST_F(ScriptCallsTest, CommitAnswersNotHeldAndUnholdGivesBackADeadHoldersReferences) {
  Do({"HSET", kTensor, "state", "ready", "owner", "inst", "refcount", "3", "holder:7:70", "2",
      "bound", "2", "holder:8:80", "1"});
  Do({"HINCRBY", kTensor, "bound", "1"});
  CommitArgs release = Commit(CommitAction::kIncr, Pre::kMine);
  release.holder = "9:90";  // holds none, and every reference is another's
  release.delta = -1;
  release.has_req = false;
  auto not_held = Run(release);
  ASSERT_TRUE(not_held.ok());
  EXPECT_EQ(not_held->kind, CommitResult::kNotHeld);
  EXPECT_EQ(Hash(kTensor)["refcount"], "3");

  CommitArgs unhold = Commit(CommitAction::kUnhold, Pre::kMine);
  unhold.holder = "7:70";
  unhold.has_req = false;
  unhold.event = CommitEvent{"reclaim", 7, "holder_exited"};
  auto given = Run(unhold);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->kind, CommitResult::kOk);
  EXPECT_EQ(given->refcount, 1);
  auto h = Hash(kTensor);
  EXPECT_EQ(h["refcount"], "1");
  EXPECT_EQ(h["bound"], "1");
  EXPECT_EQ(h.count("holder:7:70"), 0u);
  EXPECT_EQ(Events(), std::vector<std::string>{"reclaim:1:t:7:holder_exited"});

  CommitArgs del = Commit(CommitAction::kDel, Pre::kMine);  // says the count it had
  del.has_req = false;
  auto deleted = Run(del);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->refcount, 1);
  EXPECT_EQ(Do({"EXISTS", kTensor}).integer, 0);
}

TEST_F(ScriptCallsTest, CommitReplyKeepsRedisErrorText) {
  std::vector<std::string> argv = CommitCall("0000000000000000000000000000000000000000",
                                             Commit(CommitAction::kNone, Pre::kNone));
  auto lost = ParseCommitReply(conn_->CommandRaw(Views(argv)));
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), ErrorCode::kRedisError);
  EXPECT_EQ(lost.status().message().rfind("Redis EVALSHA: NOSCRIPT", 0), 0u)
      << lost.status().message();
}

TEST_F(ScriptCallsTest, DeleteIfDeletesOnlyWhileTheFieldHoldsTheValue) {
  Do({"HSET", kTensor, "owner", "a", "state", "ready"});
  DeleteIfArgs a;
  a.key = kTensor;
  a.events = kEvents;
  a.field = "owner";
  a.value = "b";
  a.event_cap = 100;
  a.event = CommitEvent{"reclaim", 5, "stale"};
  a.name = "t";
  a.node = "n";
  auto kept = ParseDeleteIfReply(conn_->Command(Views(DeleteIfCall(a))));
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_FALSE(kept.value());
  EXPECT_EQ(Do({"EXISTS", kTensor}).integer, 1);
  a.value = "a";
  auto deleted = ParseDeleteIfReply(conn_->Command(Views(DeleteIfCall(a))));
  ASSERT_TRUE(deleted.ok());
  EXPECT_TRUE(deleted.value());
  EXPECT_EQ(Do({"EXISTS", kTensor}).integer, 0);
  EXPECT_EQ(Events(), std::vector<std::string>{"reclaim:0:t:5:stale"});
}

TEST_F(ScriptCallsTest, ForwardMovesTheCommandOnlyToANodeWithALiveServer) {
  Do({"LPUSH", kProcessing, "RAW"});
  ForwardArgs a{kProcessing, "p:queue:m", "p:server:m", "RAW"};
  auto refused = ParseForwardReply(conn_->Command(ForwardCall(a)));
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_FALSE(refused.value());
  EXPECT_EQ(List(kProcessing), std::vector<std::string>{"RAW"});
  Do({"HSET", "p:server:m", "instance", "other"});
  auto forwarded = ParseForwardReply(conn_->Command(ForwardCall(a)));
  ASSERT_TRUE(forwarded.ok());
  EXPECT_TRUE(forwarded.value());
  EXPECT_TRUE(List(kProcessing).empty());
  EXPECT_EQ(List("p:queue:m"), std::vector<std::string>{"RAW"});
}

TEST_F(ScriptCallsTest, ForgetHolderForgetsOnlyOnceNothingNamesIt) {
  Do({"HSET", kTensor, "owner", "inst", "holder:7:70", "1"});
  Do({"SADD", kHeld, kTensor, "p:tensor:gone"});
  Do({"SADD", kHolders, "7:70"});
  ForgetHolderArgs a{kHolders, kHeld, "7:70", "inst"};
  auto left = ParseForgetHolderReply(conn_->Command(ForgetHolderCall(a)));
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_EQ(left.value(), 1);
  EXPECT_EQ(Do({"SCARD", kHeld}).integer, 1);  // the gone tensor left the set
  EXPECT_EQ(Do({"SISMEMBER", kHolders, "7:70"}).integer, 1);
  Do({"HDEL", kTensor, "holder:7:70"});
  left = ParseForgetHolderReply(conn_->Command(ForgetHolderCall(a)));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left.value(), 0);
  EXPECT_EQ(Do({"SISMEMBER", kHolders, "7:70"}).integer, 0);
}

class ReferenceCallTest : public ScriptCallsTest {
 protected:
  void SetUp() override {
    ScriptCallsTest::SetUp();
    auto sha = conn_->Command({"SCRIPT", "LOAD", kRefScript});
    ASSERT_TRUE(sha.ok());
    ref_sha_ = sha->str;
    Do({"HSET", kTensor, "state", "ready", "owner", "inst", "refcount", "1", "node", "n", "epoch",
        "e1"});
    Do({"HSET", kServer, "instance", "inst", "event_history", "100", "settled", "1"});
  }
  ReferenceArgs Args(bool release) const {
    ReferenceArgs a;
    a.tensor = kTensor;
    a.heartbeat = kServer;
    a.holders = kHolders;
    a.held = kHeld;
    a.events = kEvents;
    a.release = release;
    a.node = "n";
    a.holder = "7:70";
    a.pid = "7";
    a.name = "t";
    a.fields = &fields_;
    if (release) {
      a.queue = "p:queue:n";
      a.reply_list = "p:reply:r2";
      a.delete_command = "DELETE";
      a.marker_ttl_s = "60";
      a.epoch = kAnyEpoch;
    }
    return a;
  }
  Result<ReferenceReply> Call(const ReferenceArgs& a) {
    auto reply = conn_->Command(ReferenceCall(ref_sha_, a));
    if (!reply.ok()) return reply.status();
    return ParseReferenceReply(std::move(reply).value());
  }

  static constexpr const char* kServer = "p:server:n";
  const std::vector<std::string> fields_ = {"refcount", "state"};
  std::string ref_sha_;
};

TEST_F(ReferenceCallTest, GetAndReleaseAnswerWithTheFieldsAsked) {
  auto got = Call(Args(false));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->kind, ReferenceReply::kOk);
  ASSERT_EQ(got->values.elements.size(), 2u);
  EXPECT_EQ(got->values.elements[0].str, "2");
  EXPECT_EQ(got->values.elements[1].str, "ready");
  EXPECT_EQ(Hash(kTensor)["holder:7:70"], "1");
  auto released = Call(Args(true));
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(released->kind, ReferenceReply::kOk);
  EXPECT_EQ(released->values.elements[0].str, "1");
  EXPECT_EQ(List("p:reply:r2"), std::vector<std::string>{""});  // the marker for the BLPOP
  // The last reference: the delete command goes to the server.
  auto queued = Call(Args(true));
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(queued->kind, ReferenceReply::kQueued);
  EXPECT_EQ(List("p:queue:n"), std::vector<std::string>{"DELETE"});
  EXPECT_EQ(Hash(kTensor)["refcount"], "1");
}

TEST_F(ReferenceCallTest, RefusalsSayWhy) {
  ReferenceArgs old = Args(true);
  old.epoch = "e0";
  auto forgotten = Call(old);
  ASSERT_TRUE(forgotten.ok());
  EXPECT_EQ(forgotten->kind, ReferenceReply::kForgotten);
  EXPECT_EQ(forgotten->values.elements[0].str, "1");
  ReferenceArgs other = Args(true);
  other.holder = "9:90";
  Do({"HSET", kTensor, "holder:8:80", "1", "bound", "1"});
  auto not_held = Call(other);
  ASSERT_TRUE(not_held.ok());
  EXPECT_EQ(not_held->kind, ReferenceReply::kNotHeld);
  ReferenceArgs wrong = Args(false);
  wrong.node = "m";
  auto wrong_node = Call(wrong);
  ASSERT_TRUE(wrong_node.ok());
  EXPECT_EQ(wrong_node->kind, ReferenceReply::kWrongNode);
  EXPECT_EQ(wrong_node->detail, "n");
  Do({"HSET", kServer, "instance", "new"});
  auto gone = Call(Args(false));
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->kind, ReferenceReply::kGone);
  Do({"HSET", kTensor, "state", "creating"});
  auto not_ready = Call(Args(false));
  ASSERT_TRUE(not_ready.ok());
  EXPECT_EQ(not_ready->kind, ReferenceReply::kNotReady);
  EXPECT_EQ(not_ready->detail, "creating");
  Do({"DEL", kTensor});
  auto missing = Call(Args(false));
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->kind, ReferenceReply::kMissing);
  EXPECT_EQ(missing->detail, "new");
  EXPECT_EQ(missing->settled, "1");
  EXPECT_EQ(Hash(kTensor).size(), 0u);
  RedisValue junk{
      RedisValue::Type::kArray, 0, "", {RedisValue{RedisValue::Type::kString, 0, "what", {}}}};
  auto unexpected = ParseReferenceReply(junk);
  ASSERT_FALSE(unexpected.ok());
  EXPECT_EQ(unexpected.status().code(), ErrorCode::kUnexpectedReply);
}

TEST_F(ScriptCallsTest, RedeemGrantTakesOutOnlyTheGrantThatHoldsTheValue) {
  Do({"SET", "p:grant:1", "secret"});
  auto wrong = ParseRedeemGrantReply(conn_->Command(RedeemGrantCall({"p:grant:1", "guess"})));
  ASSERT_TRUE(wrong.ok()) << wrong.status().ToString();
  EXPECT_FALSE(wrong.value());
  EXPECT_EQ(Do({"EXISTS", "p:grant:1"}).integer, 1);
  auto taken = ParseRedeemGrantReply(conn_->Command(RedeemGrantCall({"p:grant:1", "secret"})));
  ASSERT_TRUE(taken.ok());
  EXPECT_TRUE(taken.value());
  EXPECT_EQ(Do({"EXISTS", "p:grant:1"}).integer, 0);
}

TEST_F(ScriptCallsTest, HeartbeatClaimsBeatsAndAnswersWithTheNodesHolder) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"instance", "mine"}, {"pid", "7"}, {"node", "n"}};
  HeartbeatArgs a;
  a.heartbeat = "p:server:n";
  a.events = kEvents;
  a.instance = "mine";
  a.ttl_s = 30;
  a.event_cap = 100;
  a.fields = &fields;
  auto claimed = ParseHeartbeatReply(conn_->CommandRaw(Views(HeartbeatCall(a))));
  ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
  EXPECT_FALSE(claimed->has_value());
  EXPECT_EQ(Hash("p:server:n"), (std::map<std::string, std::string>{
                                    {"instance", "mine"}, {"node", "n"}, {"pid", "7"}}));
  EXPECT_GT(Do({"PTTL", "p:server:n"}).integer, 0);
  EXPECT_EQ(Events(), std::vector<std::string>{"server_start:0::7:"});
  // A beat rewrites the fields and is no new start.
  fields[1].second = "8";
  a.held_before = true;
  auto beat = ParseHeartbeatReply(conn_->CommandRaw(Views(HeartbeatCall(a))));
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();
  EXPECT_FALSE(beat->has_value());
  EXPECT_EQ(Hash("p:server:n")["pid"], "8");
  EXPECT_EQ(Events().size(), 1u);

  // A node another instance holds is answered with that holder, and nothing is written.
  Do({"HSET", "p:server:m", "instance", "theirs", "pid", "42", "pid_start", "420", "pid_space",
      "boot/ns"});
  Do({"EXPIRE", "p:server:m", "20"});
  a.heartbeat = "p:server:m";
  a.held_before = false;
  auto held = ParseHeartbeatReply(conn_->CommandRaw(Views(HeartbeatCall(a))));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_TRUE(held->has_value());
  const HeartbeatHolder& holder = **held;
  EXPECT_EQ(holder.instance, "theirs");
  EXPECT_EQ(holder.pid, 42);
  EXPECT_EQ(holder.pid_start, 420u);
  EXPECT_EQ(holder.pid_space, "boot/ns");
  EXPECT_TRUE(holder.expires);
  EXPECT_GT(holder.pttl_ms, 0);
  EXPECT_LE(holder.pttl_ms, 20000);
  EXPECT_EQ(Hash("p:server:m")["pid"], "42");

  // A hand-written holder: no expiry, a pid that is no number (read as 0, so it counts as stale).
  Do({"PERSIST", "p:server:m"});
  Do({"HSET", "p:server:m", "pid", "x1", "pid_start", "nope"});
  held = ParseHeartbeatReply(conn_->CommandRaw(Views(HeartbeatCall(a))));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_TRUE(held->has_value());
  EXPECT_EQ((*held)->pid, 0);
  EXPECT_EQ((*held)->pid_start, 0u);
  EXPECT_FALSE((*held)->expires);
  EXPECT_EQ((*held)->pttl_ms, -1);

  // Replacing it (its process is gone) takes the node over and drops the fields not written.
  a.replace = "theirs";
  auto taken = ParseHeartbeatReply(conn_->CommandRaw(Views(HeartbeatCall(a))));
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_FALSE(taken->has_value());
  EXPECT_EQ(Hash("p:server:m"), (std::map<std::string, std::string>{
                                    {"instance", "mine"}, {"node", "n"}, {"pid", "8"}}));
}

TEST_F(ScriptCallsTest, HeartbeatReplyKeepsRedisErrorText) {
  RedisValue error;
  error.type = RedisValue::Type::kError;
  error.str = "OOM command not allowed";
  auto reply = ParseHeartbeatReply(Result<RedisValue>(error));
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), ErrorCode::kRedisError);
  EXPECT_EQ(reply.status().message(), "Redis: OOM command not allowed");
}

}  // namespace
}  // namespace mcd
