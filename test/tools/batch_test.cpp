// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Batched lifecycle calls: Client::GetMany / ReleaseMany (and mcd-get, mcd-rm with several names)
// take or give back a reference of every tensor named in one script call, all or nothing. Real
// redis-server, mcd-serve and tools, host tensors; every byte read is compared with what was
// written.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "lifecycle_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

using test::RandomBytes;

class Batch : public Lifecycle {
 protected:
  // Creates `count` host tensors <prefix>0.. of different sizes, each holding random bytes;
  // returns the bytes by name.
  std::map<std::string, std::string> CreateFilled(Client& client, const std::string& prefix,
                                                  int count) {
    std::map<std::string, std::string> made;
    for (int i = 0; i < count; ++i) {
      std::string name = prefix + std::to_string(i);
      std::string data = RandomBytes(4096 + 512 * i, 100 + i);
      CreateSpec spec = HostSpec(name);
      spec.shape = {static_cast<int64_t>(data.size())};
      spec.contents = data.data();
      spec.contents_bytes = data.size();
      auto created = client.Create(spec);
      EXPECT_TRUE(created.ok()) << created.status().ToString();
      made[name] = data;
    }
    return made;
  }
  static std::vector<std::string> Names(const std::map<std::string, std::string>& made) {
    std::vector<std::string> names;
    for (const auto& [name, data] : made) names.push_back(name);
    return names;
  }
  // How many EVALSHA calls Redis has run.
  int64_t EvalshaCalls() {
    auto info = redis_.Connect()->Command({"INFO", "commandstats"});
    const std::string& text = info->str;
    size_t at = text.find("cmdstat_evalsha:calls=");
    if (at == std::string::npos) return 0;
    return std::stoll(text.substr(at + std::strlen("cmdstat_evalsha:calls=")));
  }
};

// Every reference in one call: each view holds exactly its tensor's bytes, every refcount went up
// by one, and a batched release gives them back, the creator's last ones freeing the tensors.
TEST_F(Batch, GetManyTakesEveryReferenceInOneCallAndReadsEachTensorsOwnBytes) {
  auto producer = ConnectClient();
  auto consumer = ConnectClient();
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  auto made = CreateFilled(*producer, "w.", 40);
  std::vector<std::string> names = Names(made);
  std::reverse(names.begin(), names.end());  // the views come in the order asked
  int64_t scripts = EvalshaCalls();
  auto views = consumer->GetMany(names);
  ASSERT_TRUE(views.ok()) << views.status().ToString();
  EXPECT_EQ(EvalshaCalls() - scripts, 1) << "one script call for every reference";
  ASSERT_EQ(views->size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorView& view = (*views)[i];
    EXPECT_EQ(view.record.name, names[i]);
    EXPECT_EQ(view.record.refcount, 2);
    EXPECT_EQ(HashField(names[i], "refcount"), "2");
    const std::string& data = made[names[i]];
    ASSERT_EQ(view.record.bytes, data.size());
    EXPECT_EQ(std::memcmp(view.data, data.data(), data.size()), 0) << names[i];
  }

  // Each reference is this process's: its holder field, the hash's bound count, and both sets.
  auto conn = redis_.Connect();
  std::string holder;
  auto fields = conn->Command({"HGETALL", keys_.Tensor(names[0])});
  for (size_t i = 0; i + 1 < fields->elements.size(); i += 2) {
    if (fields->elements[i].str.rfind("holder:", 0) == 0)
      holder = fields->elements[i].str.substr(7);
  }
  ASSERT_FALSE(holder.empty()) << "no holder field";
  EXPECT_EQ(holder.substr(0, holder.find(':')), std::to_string(getpid()));
  for (const std::string& name : names) {
    EXPECT_EQ(HashField(name, "holder:" + holder), "1") << name;
    EXPECT_EQ(HashField(name, "bound"), "1") << name;
    EXPECT_EQ(conn->Command({"SISMEMBER", keys_.Held(node_, holder), keys_.Tensor(name)})->integer,
              1)
        << name;
  }
  EXPECT_EQ(conn->Command({"SISMEMBER", keys_.Holders(node_), holder})->integer, 1);

  scripts = EvalshaCalls();
  auto released = consumer->ReleaseMany(names);
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(EvalshaCalls() - scripts, 1);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ((*released)[i].refcount, 1) << names[i];
    EXPECT_EQ(HashField(names[i], "refcount"), "1");
    EXPECT_EQ(HashField(names[i], "bound"), "0") << "the consumer's own reference went back";
  }
  // The last references: each queues its delete command, answered in the same call.
  released = producer->ReleaseMany(names);
  ASSERT_TRUE(released.ok()) << released.status().ToString() << ServeLog();
  for (const TensorRecord& record : released.value()) EXPECT_EQ(record.refcount, 0);
  for (const std::string& name : names) EXPECT_EQ(HashField(name, "state"), "") << name;
  EXPECT_TRUE(test::WaitFor([&] { return ShmCount() == 0; }, 5000)) << ShmCount();
}

// One name that cannot be got (missing, being filled) and nothing is taken: the error names it.
// Nor given back: a release naming a tensor the caller holds none of changes nothing.
TEST_F(Batch, OneTensorThatCannotBeGotLeavesEveryRefcountAsItWas) {
  auto producer = ConnectClient();
  auto consumer = ConnectClient();
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  std::vector<std::string> names = Names(CreateFilled(*producer, "a.", 5));
  std::vector<std::string> with_missing = names;
  with_missing.insert(with_missing.begin() + 2, "nope");
  auto refused = consumer->GetMany(with_missing);
  EXPECT_EQ(refused.status().code(), ErrorCode::kNotFound) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("'nope'"), std::string::npos)
      << refused.status().ToString();
  for (const std::string& name : names) EXPECT_EQ(HashField(name, "refcount"), "1") << name;

  json creating = Raw(R"({"op":"create","name":"filling","dtype":"u8","shape":[16],)"
                      R"("device":"cpu","fill":true,"pid":)" +
                          std::to_string(getpid()) + R"(,"req":"f1"})",
                      "f1");
  ASSERT_EQ(creating["ok"], true) << creating.dump();
  std::vector<std::string> with_creating = names;
  with_creating.push_back("filling");
  refused = consumer->GetMany(with_creating);
  EXPECT_EQ(refused.status().code(), ErrorCode::kNotReady) << refused.status().ToString();
  for (const std::string& name : names) EXPECT_EQ(HashField(name, "refcount"), "1") << name;

  // Twice the same name, or none at all: refused before anything is sent.
  std::vector<std::string> twice = {names[0], names[1], names[0]};
  EXPECT_EQ(consumer->GetMany(twice).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(consumer->GetMany({}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(consumer->ReleaseMany(twice).status().code(), ErrorCode::kInvalidArgument);

  // The consumer holds a reference of the first two; the third's only reference is bound to
  // nobody (the creator's), so a release bound to the consumer's process may give that back;
  // a missing name stops the whole release.
  auto views = consumer->GetMany({names[0], names[1]});
  ASSERT_TRUE(views.ok()) << views.status().ToString();
  auto released = consumer->ReleaseMany({names[0], names[1], "nope"});
  EXPECT_EQ(released.status().code(), ErrorCode::kNotFound) << released.status().ToString();
  EXPECT_EQ(HashField(names[0], "refcount"), "2");
  EXPECT_EQ(HashField(names[1], "refcount"), "2");
  (void)Raw(
      R"({"op":"abandon","name":"filling","pid":)" + std::to_string(getpid()) + R"(,"req":"f2"})",
      "f2");
}

// How many mappings of shared-memory objects this process has.
int MappedShmObjects() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);)
    count += line.find("/dev/shm/") != std::string::npos;
  return count;
}

// A batch larger than a chunk (64) is taken 64 per script call, each chunk opened while the next
// call is under way: every byte read is its tensor's own, and a refusal in a later chunk, or an
// open that fails there, gives back every reference of the earlier chunks and leaves nothing
// mapped.
TEST_F(Batch, ALargeBatchIsTakenInChunksAndStaysAllOrNone) {
  unsetenv("MCD_GET_MANY_CHUNK");  // the default, 64: read at this process's first batched get
  auto producer = ConnectClient();
  auto consumer = ConnectClient();
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  auto made = CreateFilled(*producer, "big.", 150);
  std::vector<std::string> names = Names(made);
  std::reverse(names.begin(), names.end());
  int mapped = MappedShmObjects();
  int64_t scripts = EvalshaCalls();
  {
    auto views = consumer->GetMany(names);
    ASSERT_TRUE(views.ok()) << views.status().ToString();
    EXPECT_EQ(EvalshaCalls() - scripts, 3) << "150 tensors, 64 per script call";
    ASSERT_EQ(views->size(), names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      const TensorView& view = (*views)[i];
      EXPECT_EQ(view.record.name, names[i]);
      EXPECT_EQ(HashField(names[i], "refcount"), "2") << names[i];
      const std::string& data = made[names[i]];
      ASSERT_EQ(view.record.bytes, data.size());
      EXPECT_EQ(std::memcmp(view.data, data.data(), data.size()), 0) << names[i];
    }
    auto released = consumer->ReleaseMany(names);
    ASSERT_TRUE(released.ok()) << released.status().ToString();
  }
  EXPECT_EQ(MappedShmObjects(), mapped);

  // Refused in the third chunk: the first two chunks' references go back.
  std::vector<std::string> with_missing = names;
  with_missing.insert(with_missing.begin() + 140, "nope");
  auto refused = consumer->GetMany(with_missing);
  EXPECT_EQ(refused.status().code(), ErrorCode::kNotFound) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("'nope'"), std::string::npos)
      << refused.status().ToString();
  for (const std::string& name : names) EXPECT_EQ(HashField(name, "refcount"), "1") << name;
  EXPECT_EQ(MappedShmObjects(), mapped);

  // An open that fails in the second chunk (its object removed behind the server's back): the
  // error names its tensor, and every reference and mapping goes.
  const std::string broken = names[100];
  std::string object = HashField(broken, "ipc_handle");
  ASSERT_EQ(shm_unlink(object.c_str()), 0) << object;
  auto failed = consumer->GetMany(names);
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("'" + broken + "'"), std::string::npos)
      << failed.status().ToString();
  for (const std::string& name : names) EXPECT_EQ(HashField(name, "refcount"), "1") << name;
  EXPECT_EQ(MappedShmObjects(), mapped);

  // References bound to nobody (or to another process, as mcd-get binds them) would outlive a
  // kill between two calls: such a batch is taken in one call, whatever its size, and the same
  // failed open gives every reference back there too.
  auto unbound = ConnectClient(5000, kNoHolder);
  ASSERT_NE(unbound, nullptr);
  scripts = EvalshaCalls();
  failed = unbound->GetMany(names);
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(EvalshaCalls() - scripts, 2) << "one call to take, one to give back";
  EXPECT_NE(failed.status().message().find("'" + broken + "'"), std::string::npos)
      << failed.status().ToString();
  for (const std::string& name : names) EXPECT_EQ(HashField(name, "refcount"), "1") << name;
  EXPECT_EQ(MappedShmObjects(), mapped);
  names.erase(names.begin() + 100);  // its object is gone
  scripts = EvalshaCalls();
  auto taken = unbound->GetMany(names);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(EvalshaCalls() - scripts, 1) << "one script call for references bound to nobody";
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& data = made[names[i]];
    EXPECT_EQ(std::memcmp((*taken)[i].data, data.data(), data.size()), 0) << names[i];
  }
  ASSERT_TRUE(unbound->ReleaseMany(names).ok());
}

// The tools: mcd-get with several names takes every reference (bound to its caller) and prints
// an array; one it cannot get fails the whole call with nothing taken; mcd-rm gives them back.
TEST_F(Batch, TheToolsGetAndRemoveSeveralTensorsAllOrNone) {
  auto producer = ConnectClient();
  ASSERT_NE(producer, nullptr);
  auto made = CreateFilled(*producer, "t.", 3);
  std::vector<std::string> names = Names(made);

  auto failed = Tool("mcd-get", {names[0], "missing", names[1], "-q"});
  EXPECT_NE(failed.exit_code, 0);
  EXPECT_NE(failed.err.find("missing"), std::string::npos) << failed.err;
  for (const std::string& name : names) EXPECT_EQ(HashField(name, "refcount"), "1") << name;

  auto got =
      Tool("mcd-get", {names[0], names[1], names[2], "--detached", "--json", "--print", "4"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  json records = json::parse(got.out);
  ASSERT_TRUE(records.is_array()) << got.out;
  ASSERT_EQ(records.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(records[i]["name"], names[i]);
    EXPECT_EQ(records[i]["refcount"], 2);
    const std::string& data = made[names[i]];
    for (size_t v = 0; v < 4; ++v) {
      EXPECT_EQ(records[i]["values"][v], static_cast<unsigned char>(data[v])) << names[i];
    }
  }

  auto removed = Tool("mcd-rm", {names[0], names[1], names[2], "--json"});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  json rm = json::parse(removed.out);
  ASSERT_EQ(rm.size(), 3u);
  for (const std::string& name : names) EXPECT_EQ(HashField(name, "refcount"), "1") << name;
  removed = Tool("mcd-rm", {names[0], names[1], "nope"});
  EXPECT_NE(removed.exit_code, 0);
  EXPECT_EQ(HashField(names[0], "refcount"), "1");
  removed = Tool("mcd-rm", {names[0], names[1], names[2]});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_NE(removed.out.find("freed"), std::string::npos) << removed.out;
  for (const std::string& name : names) EXPECT_EQ(HashField(name, "state"), "") << name;
}

}  // namespace
}  // namespace mcd
