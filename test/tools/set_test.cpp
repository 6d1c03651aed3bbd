// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Tensor sets: Client::CreateSet lays its members out in one allocation, each a tensor of its own;
// Client::GetSet takes one reference for the whole set in one script call and maps the allocation
// once, and that reference keeps every member's bytes; the allocation goes with the last member.
// Real redis-server, mcd-serve and tools, host tensors; every byte read is compared with what was
// written.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "lifecycle_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

using test::RandomBytes;

class Sets : public Lifecycle {
 protected:
  // A set `name` of `count` members of mixed dtypes and odd sizes, with random contents.
  struct Made {
    CreateSetSpec spec;
    std::vector<std::string> bytes;  // each member's, in order
  };
  static Made Spec(const std::string& name, int count, uint32_t seed) {
    Made made;
    made.spec.name = name;
    made.spec.device = kHostDevice;
    const DType dtypes[] = {DType::kF16, DType::kF32, DType::kU8, DType::kI64, DType::kBF16};
    for (int i = 0; i < count; ++i) {
      SetMember member;
      member.name = name + "/layer." + std::to_string(i) + ".weight";
      member.dtype = dtypes[i % 5];
      member.shape = {3 + i, 7};
      made.bytes.push_back(RandomBytes(static_cast<size_t>(3 + i) * 7 * DTypeSize(member.dtype),
                                       seed + static_cast<uint32_t>(i)));
      made.spec.members.push_back(member);
    }
    for (const std::string& b : made.bytes) made.spec.contents.push_back(b.data());
    return made;
  }
  // The keys set `set`'s list names, in order.
  std::vector<std::string> ListedKeys(const std::string& set) {
    std::vector<std::string> keys;
    auto listed = redis_.Connect()->Command({"LRANGE", keys_.Set(set), "0", "-1"});
    if (listed.ok()) {
      for (const RedisValue& v : listed->elements) keys.push_back(v.str);
    }
    return keys;
  }
  // The member names set `set`'s record has.
  std::set<std::string> RecordNames(const std::string& set) {
    std::set<std::string> names;
    auto fields = redis_.Connect()->Command({"HKEYS", keys_.SetRecord(set)});
    if (fields.ok()) {
      for (const RedisValue& v : fields->elements) names.insert(v.str);
    }
    return names;
  }
  int64_t EvalshaCalls() {
    auto info = redis_.Connect()->Command({"INFO", "commandstats"});
    size_t at = info->str.find("cmdstat_evalsha:calls=");
    if (at == std::string::npos) return 0;
    return std::stoll(info->str.substr(at + std::strlen("cmdstat_evalsha:calls=")));
  }
};

// Every member is a tensor with its own hash (its set named), in one allocation (one
// shared-memory object), ready only once filled; another process gets the whole set in one
// script call and reads each member's own bytes.
TEST_F(Sets, ASetsMembersShareOneAllocationAndAreGotInOneCall) {
  auto producer = ConnectClient();
  auto consumer = ConnectClient();
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  Made made = Spec("model", 25, 40);
  auto created = producer->CreateSet(made.spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString() << ServeLog();
  ASSERT_EQ(created->size(), 25u);
  EXPECT_EQ(ShmCount(), 1u) << "one allocation for the whole set";
  uint64_t last_end = 0;
  for (size_t i = 0; i < created->size(); ++i) {
    const TensorRecord& r = (*created)[i];
    EXPECT_EQ(r.name, made.spec.members[i].name);
    EXPECT_EQ(HashField(r.name, "set"), "model");
    EXPECT_EQ(HashField(r.name, "state"), "ready");
    EXPECT_EQ(HashField(r.name, "refcount"), "1");
    EXPECT_EQ(HashField(r.name, "offset"), std::to_string(r.offset));
    EXPECT_GE(r.offset, last_end);
    EXPECT_EQ(r.offset % kSetMemberAlign, 0u);
    last_end = r.offset + r.bytes;
  }

  int64_t scripts = EvalshaCalls();
  auto views = consumer->GetSet("model");
  ASSERT_TRUE(views.ok()) << views.status().ToString();
  EXPECT_EQ(EvalshaCalls() - scripts, 1) << "one script call for the whole set";
  ASSERT_EQ(views->size(), 25u);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < made.spec.members.size(); ++i) index[made.spec.members[i].name] = i;
  auto same_bytes = [&](const std::vector<TensorView>& got) {
    for (const TensorView& view : got) {
      size_t i = index.at(view.record.name);
      if (view.record.bytes != made.bytes[i].size() ||
          std::memcmp(view.data, made.bytes[i].data(), made.bytes[i].size()) != 0) {
        ADD_FAILURE() << view.record.name << " does not read what was written";
        return false;
      }
    }
    return true;
  };
  std::string previous;
  for (const TensorView& view : views.value()) {
    EXPECT_LT(previous, view.record.name) << "sorted by name";
    previous = view.record.name;
    EXPECT_EQ(view.record.set, "model");
  }
  EXPECT_TRUE(same_bytes(*views));
  // One reference for the set, counted on its member first by name: the others are untouched.
  const std::string leader = views->front().record.name;
  EXPECT_EQ(views->front().record.refcount, 2);
  for (const SetMember& m : made.spec.members) {
    EXPECT_EQ(HashField(m.name, "refcount"), m.name == leader ? "2" : "1") << m.name;
  }
  // A member is a tensor like any other: mcd-get reads its bytes, mcd-ls lists it.
  auto listed = Tool("mcd-ls", {"model/*", "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(json::parse(listed.out).size(), 25u);
  auto given = consumer->ReleaseSet(*views);
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->name, leader);
  EXPECT_EQ(HashField(leader, "refcount"), "1") << "ReleaseSet gave the set's reference back";

  // While a set's reference is held, every member's bytes stay, whoever frees the members: the
  // allocation goes with the last of them, and the reference keeps its leader.
  auto held = consumer->GetSet("model");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  // (By the tool: mappings are the process's, and this one's views must stay.)
  // The creator's references, all of them: --detached, since this process, the tool's parent,
  // holds the set's reference (of the leader), which the tool would give back first.
  auto removed = Tool("mcd-rm", {"model/", "--detached"});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  for (const SetMember& m : made.spec.members) {
    EXPECT_EQ(HashField(m.name, "state"), m.name == leader ? "ready" : "") << m.name;
  }
  EXPECT_EQ(ShmCount(), 1u) << "the set's reference still holds the allocation";
  EXPECT_TRUE(same_bytes(*held)) << "members freed while the set is held keep their bytes";
  EXPECT_EQ(ListedKeys("model"), std::vector<std::string>{keys_.Tensor(leader)})
      << "freed members have left the set's list";
  EXPECT_EQ(RecordNames("model"), std::set<std::string>{leader}) << "and its record";
  auto last = producer->GetSet("model");
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  ASSERT_EQ(last->size(), 1u) << "freed members have left the set";
  EXPECT_TRUE(same_bytes(*last));
  ASSERT_TRUE(producer->ReleaseSet(*last).ok());
  ASSERT_TRUE(consumer->ReleaseSet(*held).ok());
  EXPECT_TRUE(test::WaitFor([&] { return ShmCount() == 0; }, 5000)) << ServeLog();
  EXPECT_TRUE(test::WaitFor(
      [&] {
        return redis_.Connect()
                   ->Command({"EXISTS", keys_.Set("model"), keys_.SetRecord("model")})
                   ->integer == 0;
      },
      5000))
      << "the set's list and record go with its last member";
  EXPECT_EQ(consumer->GetSet("model").status().code(), ErrorCode::kNotFound);
}

// All or nothing: a set naming a member that exists, or twice the same member, or a member
// outside its name, makes nothing and allocates nothing; and a set of that name made again
// after the first is gone works.
TEST_F(Sets, ABadSetMakesNothing) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  CreateSpec plain = HostSpec("w/taken");
  ASSERT_TRUE(client->Create(plain).ok());
  Made made = Spec("w", 4, 7);
  made.spec.members[2].name = "w/taken";
  made.spec.members[2].shape = {16};
  made.spec.members[2].dtype = DType::kU8;
  made.bytes[2] = RandomBytes(16, 3);
  made.spec.contents[2] = made.bytes[2].data();
  auto refused = client->CreateSet(made.spec);
  EXPECT_EQ(refused.status().code(), ErrorCode::kAlreadyExists) << refused.status().ToString();
  EXPECT_EQ(ShmCount(), 1u);
  EXPECT_EQ(HashField("w/layer.0.weight", "state"), "");

  Made twice = Spec("v", 3, 9);
  twice.spec.members[1].name = twice.spec.members[0].name;
  EXPECT_EQ(client->CreateSet(twice.spec).status().code(), ErrorCode::kInvalidArgument);
  Made outside = Spec("u", 3, 9);
  outside.spec.members[1].name = "elsewhere/x";
  EXPECT_EQ(client->CreateSet(outside.spec).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ShmCount(), 1u);

  // A raw create_set whose members list holds a bad member is answered with the member named.
  auto conn = redis_.Connect();
  ASSERT_TRUE(
      conn->Command({"RPUSH", keys_.Members("m1"), R"({"name":"s/a","dtype":"f32","shape":[2]})",
                     R"({"name":"s/b","dtype":"f99","shape":[2]})"})
          .ok());
  json bad =
      Raw(R"({"op":"create_set","name":"s","members":"m1","device":"cpu","req":"c1"})", "c1");
  EXPECT_EQ(bad["ok"], false) << bad.dump();
  EXPECT_NE(bad.dump().find("member 2"), std::string::npos) << bad.dump();
  EXPECT_EQ(ShmCount(), 1u);
  json none =
      Raw(R"({"op":"create_set","name":"s","members":"m2","device":"cpu","req":"c2"})", "c2");
  EXPECT_EQ(none["ok"], false) << none.dump();

  // The same set again, without the taken name: made.
  Made again = Spec("w", 4, 11);
  auto created = client->CreateSet(again.spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(ShmCount(), 2u);
  // A set of that name is refused while any member of it lives.
  EXPECT_EQ(client->CreateSet(Spec("w", 2, 12).spec).status().code(), ErrorCode::kAlreadyExists);
}

// mcd-create --members: a set from a list, in one command; a bad line names itself and makes
// nothing.
TEST_F(Sets, ASetFromAListIsMadeByTheTool) {
  std::string list = dir_.path() + "/list.txt";
  std::ofstream(list) << "# weights\nemb f16 64x8\n\nbias f32 17\nids i64 2,3\n";
  auto made = Tool("mcd-create", {"batch", "--members", list, "--device", "cpu", "--json"});
  ASSERT_EQ(made.exit_code, 0) << made.err << ServeLog();
  json records = json::parse(made.out);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0]["name"], "batch/emb");
  EXPECT_EQ(HashField("batch/bias", "shape"), "[17]");
  EXPECT_EQ(HashField("batch/ids", "dtype"), "i64");
  EXPECT_EQ(HashField("batch/ids", "set"), "batch");
  EXPECT_EQ(ShmCount(), 1u);

  std::ofstream(list) << "a f16 4\nb f99 4\n";
  auto bad = Tool("mcd-create", {"other", "--members", list, "--device", "cpu"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("list.txt:2"), std::string::npos) << bad.err;
  EXPECT_EQ(HashField("other/a", "state"), "");
  EXPECT_EQ(ShmCount(), 1u);

  // A set is got alone and without --print; each mistake says which it is, nothing taken.
  auto two = Tool("mcd-get", {"batch/", "batch/ids"});
  EXPECT_EQ(two.exit_code, 64);
  EXPECT_NE(two.err.find("not with other names"), std::string::npos) << two.err;
  auto print = Tool("mcd-get", {"batch/", "--print", "2"});
  EXPECT_EQ(print.exit_code, 64);
  EXPECT_NE(print.err.find("--print shows one tensor"), std::string::npos) << print.err;
  EXPECT_EQ(HashField("batch/bias", "refcount"), "1");
  EXPECT_EQ(HashField("batch/ids", "refcount"), "1");
}

// A member freed on its own leaves the set for good: a tensor of its name made since is none of
// the set's (not got, listed or removed with it); the set's list goes with its last member, also
// when the reaper frees it; and after Redis lost it all, the server puts the list back too.
TEST_F(Sets, ASetIsItsMembersAndNothingElse) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  Made made = Spec("s", 3, 5);
  ASSERT_TRUE(client->CreateSet(made.spec).ok());
  const std::string first = made.spec.members[0].name;
  ASSERT_TRUE(client->ReleaseMany({first}).ok());
  CreateSpec plain = HostSpec(first);
  ASSERT_TRUE(client->Create(plain).ok());
  auto members = client->SetMembers("s");
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members->size(), 2u) << "the plain tensor of a former member's name is no member";
  // Listed as "s/", the set is its members alone: neither that plain tensor nor one named under
  // a member, which the glob s/* matches too.
  const std::string under = made.spec.members[1].name + "/under";
  ASSERT_TRUE(client->Create(HostSpec(under)).ok());
  auto listed = client->List("s/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::vector<std::string> listed_names;
  for (const TensorRecord& r : *listed) listed_names.push_back(r.name);
  EXPECT_EQ(listed_names, *members);
  auto names = client->ListNames("s/");
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(*names, *members);
  EXPECT_EQ(client->List("s/*")->size(), 4u) << "a glob is a glob";
  auto quiet = Tool("mcd-ls", {"s/", "-q"});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.out, (*members)[0] + "\n" + (*members)[1] + "\n");
  auto table = Tool("mcd-ls", {"s/", "--json"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  json rows = json::parse(table.out);
  ASSERT_EQ(rows.size(), 2u) << table.out;
  EXPECT_EQ(rows[0]["name"], (*members)[0]);
  EXPECT_EQ(rows[1]["name"], (*members)[1]);
  ASSERT_TRUE(client->ReleaseMany({under}).ok());
  auto views = client->GetSet("s");
  ASSERT_TRUE(views.ok()) << views.status().ToString();
  EXPECT_EQ(views->size(), 2u);
  for (const TensorView& v : *views) EXPECT_NE(v.record.name, first);
  ASSERT_TRUE(client->ReleaseSet(*views).ok());
  ASSERT_EQ(Tool("mcd-rm", {"s/"}).exit_code, 0);
  EXPECT_EQ(HashField(first, "refcount"), "1") << "mcd-rm s/ left the plain tensor alone";
  EXPECT_TRUE(test::WaitFor(
      [&] {
        return redis_.Connect()->Command({"EXISTS", keys_.Set("s")})->integer == 0;
      },
      5000));

  // A set whose filler dies: the reaper frees it, and its list goes too.
  pid_t filler = fork();
  if (filler == 0) {
    sleep(2);
    _exit(0);
  }
  auto conn = redis_.Connect();
  ASSERT_TRUE(
      conn->Command({"RPUSH", keys_.Members("r1"), R"({"name":"k/a","dtype":"u8","shape":[8]})",
                     R"({"name":"k/b","dtype":"u8","shape":[8]})"})
          .ok());
  json reaped = Raw(R"({"op":"create_set","name":"k","members":"r1","device":"cpu","fill":true,)"
                    R"("pid":)" +
                        std::to_string(filler) + R"(,"req":"k1"})",
                    "k1");
  ASSERT_EQ(reaped["ok"], true) << reaped.dump();
  EXPECT_EQ(HashField("k/a", "state"), "creating");
  waitpid(filler, nullptr, 0);
  EXPECT_TRUE(test::WaitFor([&] { return HashField("k/a", "state").empty(); }, 10000))
      << ServeLog();
  EXPECT_TRUE(test::WaitFor(
      [&] {
        return conn->Command({"EXISTS", keys_.Set("k")})->integer == 0;
      },
      5000))
      << "the reaped set's list";

  // Redis loses everything: the members and their list come back, the list sorted by name again
  // (made here in the reverse order).
  Made kept = Spec("p", 12, 9);
  std::reverse(kept.spec.members.begin(), kept.spec.members.end());
  std::reverse(kept.bytes.begin(), kept.bytes.end());
  std::reverse(kept.spec.contents.begin(), kept.spec.contents.end());
  ASSERT_TRUE(client->CreateSet(kept.spec).ok());
  redis_.Restart();
  EXPECT_TRUE(test::WaitFor(
      [&] {
        auto c = redis_.Connect();
        return c && c->Command({"EXISTS", keys_.Set("p")}).ok() &&
               c->Command({"EXISTS", keys_.Set("p")})->integer == 1 &&
               HashField(kept.spec.members[1].name, "state") == "ready";
      },
      15000))
      << ServeLog();
  auto again = ConnectClient();
  ASSERT_NE(again, nullptr);
  auto back = again->GetSet("p");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 12u);
  for (size_t i = 0; i < kept.spec.members.size(); ++i) {
    const SetMember& m = kept.spec.members[i];
    auto view = std::find_if(back->begin(), back->end(),
                             [&](const TensorView& v) { return v.record.name == m.name; });
    ASSERT_NE(view, back->end()) << m.name;
    EXPECT_EQ(std::memcmp(view->data, kept.bytes[i].data(), kept.bytes[i].size()), 0) << m.name;
  }
}

// A hash written by hand with a refcount that is no number stops a batched get before any
// reference is taken; a name ending in '/' (which the tools read as a set) is refused.
TEST_F(Sets, BadHashesAndNamesChangeNothing) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Create(HostSpec("a")).ok());
  ASSERT_TRUE(client->Create(HostSpec("b")).ok());
  ASSERT_TRUE(redis_.Connect()->Command({"HSET", keys_.Tensor("b"), "refcount", "abc"}).ok());
  auto got = client->GetMany({"a", "b"});
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(HashField("a", "refcount"), "1") << "nothing taken";
  EXPECT_EQ(client->Create(HostSpec("slash/")).status().code(), ErrorCode::kInvalidArgument);
  auto tool = Tool("mcd-create", {"pl/", "--dtype", "u8", "--shape", "1", "--device", "cpu"});
  EXPECT_EQ(tool.exit_code, 64) << tool.err;
}

// The set's list in Redis goes by name, so that a set's get takes the reference of its member
// first by name (the one ReleaseSet gives back) without comparing names; a list out of that order
// is refused, nothing taken.
TEST_F(Sets, ASetsListGoesByNameAndItsFirstMemberHoldsTheReference) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  Made made = Spec("o", 12, 60);  // layer.0, layer.1, ..., layer.11: not in byte order
  ASSERT_TRUE(client->CreateSet(made.spec).ok());
  auto conn = redis_.Connect();
  auto listed = conn->Command({"LRANGE", keys_.Set("o"), "0", "-1"});
  ASSERT_TRUE(listed.ok());
  std::vector<std::string> keys;
  for (const RedisValue& v : listed->elements) keys.push_back(v.str);
  ASSERT_EQ(keys.size(), 12u);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EXPECT_EQ(keys.front(), keys_.Tensor("o/layer.0.weight"));
  EXPECT_EQ(keys[2], keys_.Tensor("o/layer.10.weight"));
  // Its first member freed on its own leaves the set's list and record with its hash, and the
  // next by name holds the set's reference.
  ASSERT_TRUE(client->ReleaseMany({"o/layer.0.weight"}).ok());
  EXPECT_EQ(ListedKeys("o").front(), keys_.Tensor("o/layer.1.weight"));
  EXPECT_EQ(ListedKeys("o").size(), 11u);
  EXPECT_EQ(RecordNames("o").size(), 11u);
  EXPECT_EQ(RecordNames("o").count("o/layer.0.weight"), 0u);
  auto views = client->GetSet("o");
  ASSERT_TRUE(views.ok()) << views.status().ToString();
  EXPECT_EQ(views->front().record.name, "o/layer.1.weight");
  EXPECT_EQ(HashField("o/layer.1.weight", "refcount"), "2");
  EXPECT_EQ(HashField("o/layer.10.weight", "refcount"), "1");
  auto given = client->ReleaseSet(*views);
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->name, "o/layer.1.weight");
  EXPECT_EQ(HashField("o/layer.1.weight", "refcount"), "1");
  // A list put out of order by hand.
  ASSERT_TRUE(conn->Command({"LREM", keys_.Set("o"), "0", keys_.Tensor("o/layer.9.weight")}).ok());
  ASSERT_TRUE(conn->Command({"LPUSH", keys_.Set("o"), keys_.Tensor("o/layer.9.weight")}).ok());
  auto refused = client->GetSet("o");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kUnexpectedReply);
  EXPECT_NE(refused.status().message().find("does not start with the first by name"),
            std::string::npos)
      << refused.status().message();
  EXPECT_EQ(HashField("o/layer.9.weight", "refcount"), "1") << "the reference went back";
  ASSERT_TRUE(conn->Command({"LREM", keys_.Set("o"), "0", keys_.Tensor("o/layer.9.weight")}).ok());
  ASSERT_TRUE(conn->Command({"RPUSH", keys_.Set("o"), keys_.Tensor("o/layer.9.weight")}).ok());
  auto in_order = client->GetSet("o");
  ASSERT_TRUE(in_order.ok()) << "in order again: " << in_order.status().ToString();
  ASSERT_TRUE(client->ReleaseSet(*in_order).ok());
  // A member's value in the record written by hand, malformed or out of its allocation: refused
  // with the member named, the reference given back, nothing opened.
  for (const char* crafted : {"f32 [3,7] 84", "f32 [3,7] 84 0 9", "f99 [3,7] 84 0",
                              "f32 [3,7] 85 0", "f32 [3,7] 84 18446744073709551000", ""}) {
    ASSERT_TRUE(conn->Command({"HSET", keys_.SetRecord("o"), "o/layer.5.weight", crafted}).ok());
    auto bad = client->GetSet("o");
    ASSERT_FALSE(bad.ok()) << crafted;
    EXPECT_EQ(bad.status().code(), ErrorCode::kUnexpectedReply) << crafted;
    EXPECT_NE(bad.status().message().find("o/layer.5.weight"), std::string::npos)
        << bad.status().message();
    EXPECT_EQ(HashField("o/layer.1.weight", "refcount"), "1") << crafted << ": given back";
  }
  ASSERT_TRUE(conn->Command({"HSET", keys_.SetRecord("o"), "o/layer.5.weight",
                             "f16 [8,7] 112 " + HashField("o/layer.5.weight", "offset")})
                  .ok());
  auto own = client->GetSet("o");
  ASSERT_TRUE(own.ok()) << "its own value again: " << own.status().ToString();
  ASSERT_TRUE(client->ReleaseSet(*own).ok());
  // A name in the record that is no member's: refused the same way.
  for (const std::string& stranger : {std::string("p/layer.5.weight"), std::string("o/"),
                                      std::string("o/bad name"), "o/" + std::string(300, 'x')}) {
    ASSERT_TRUE(conn->Command({"HSET", keys_.SetRecord("o"), stranger, "u8 [8] 8 0"}).ok());
    auto bad = client->GetSet("o");
    ASSERT_FALSE(bad.ok()) << stranger;
    EXPECT_EQ(bad.status().code(), ErrorCode::kUnexpectedReply) << stranger;
    EXPECT_NE(bad.status().message().find("no member of it"), std::string::npos)
        << stranger << ": " << bad.status().message();
    EXPECT_EQ(HashField("o/layer.1.weight", "refcount"), "1") << stranger << ": given back";
    ASSERT_TRUE(conn->Command({"HDEL", keys_.SetRecord("o"), stranger}).ok());
  }
  // The record gone, or of another type, under a list still there: refused before any
  // reference is taken (no get in the event stream), with the record's key named.
  auto record = conn->Command({"DUMP", keys_.SetRecord("o")});
  ASSERT_TRUE(record.ok() && !record->is_nil());
  auto events = [&] { return conn->Command({"XLEN", keys_.Events()})->integer; };
  const int64_t events_before = events();
  ASSERT_TRUE(conn->Command({"DEL", keys_.SetRecord("o")}).ok());
  auto no_record = client->GetSet("o");
  ASSERT_FALSE(no_record.ok());
  EXPECT_NE(no_record.status().message().find("no record of its members"), std::string::npos)
      << no_record.status().message();
  ASSERT_TRUE(conn->Command({"SET", keys_.SetRecord("o"), "not a hash"}).ok());
  auto wrong_type = client->GetSet("o");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("is a string, not a hash"), std::string::npos)
      << wrong_type.status().message();
  EXPECT_EQ(HashField("o/layer.1.weight", "refcount"), "1");
  EXPECT_EQ(events(), events_before) << "no reference taken, none given back";
  ASSERT_TRUE(conn->Command({"DEL", keys_.SetRecord("o")}).ok());
  ASSERT_TRUE(conn->Command({"RESTORE", keys_.SetRecord("o"), "0", record->str}).ok());
  // Its record back, with Redis having lost the script (the script and the record's read go in
  // one transaction, whose every reply is read): loaded again, the set got whole, and the
  // connection in step for the next call.
  ASSERT_TRUE(conn->Command({"SCRIPT", "FLUSH"}).ok());
  auto restored = client->GetSet("o");
  ASSERT_TRUE(restored.ok()) << "its record back: " << restored.status().ToString();
  EXPECT_EQ(restored->size(), 11u);
  EXPECT_EQ(HashField("o/layer.1.weight", "refcount"), "2");
  ASSERT_TRUE(client->ReleaseSet(*restored).ok());
  EXPECT_EQ(HashField("o/layer.1.weight", "refcount"), "1");
  auto again = client->GetSet("o");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(client->ReleaseSet(*again).ok());
  ASSERT_EQ(Tool("mcd-rm", {"o/", "-q"}).exit_code, 0);
  EXPECT_TRUE(ShmFreedSoon());
}

// A server SIGKILLed with a set: the next instance removes the dead one's member hashes, and the
// set's list and record with them; a plain tensor made since under a former member's name is no
// member, and a get of the set takes no reference of it. A list whose first entry lost its hash
// some other way (by hand here) is mended by the set's next get.
TEST_F(Sets, ASetOfADeadServerGoesWithItsMembers) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->CreateSet(Spec("d", 3, 11).spec).ok());
  EXPECT_EQ(server_->Stop(SIGKILL), -SIGKILL);
  ASSERT_TRUE(test::WaitFor([&] { return !Heartbeat(); }, 6000));
  StartServer();
  auto conn = redis_.Connect();
  EXPECT_EQ(conn->Command({"EXISTS", keys_.Set("d"), keys_.SetRecord("d")})->integer, 0)
      << ServeLog();
  auto again = ConnectClient();
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(again->Create(HostSpec("d/layer.0.weight")).ok());
  auto none = again->GetSet("d");
  EXPECT_EQ(none.status().code(), ErrorCode::kNotFound) << none.status().ToString();
  EXPECT_EQ(HashField("d/layer.0.weight", "refcount"), "1") << "no reference taken of it";
  ASSERT_TRUE(again->ReleaseMany({"d/layer.0.weight"}).ok());

  Made made = Spec("e", 3, 12);
  ASSERT_TRUE(again->CreateSet(made.spec).ok());
  ASSERT_TRUE(conn->Command({"DEL", keys_.Tensor("e/layer.0.weight")}).ok());
  auto mended = again->GetSet("e");
  ASSERT_TRUE(mended.ok()) << mended.status().ToString();
  EXPECT_EQ(ListedKeys("e").front(), keys_.Tensor("e/layer.1.weight"));
  EXPECT_EQ(RecordNames("e").count("e/layer.0.weight"), 0u);
  ASSERT_EQ(mended->size(), 2u);
  for (const TensorView& view : *mended) {
    size_t i = view.record.name == "e/layer.1.weight" ? 1 : 2;
    EXPECT_EQ(std::memcmp(view.data, made.bytes[i].data(), made.bytes[i].size()), 0)
        << view.record.name;
  }
  EXPECT_EQ(HashField("e/layer.1.weight", "refcount"), "2");
  ASSERT_TRUE(again->ReleaseSet(*mended).ok());
}

// A set made empty (no contents) is zeroed and ready at once.
TEST_F(Sets, ASetWithoutContentsIsZeroed) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  Made made = Spec("z", 6, 1);
  made.spec.contents.clear();
  auto created = client->CreateSet(made.spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto views = client->GetSet("z");
  ASSERT_TRUE(views.ok()) << views.status().ToString();
  for (const TensorView& view : views.value()) {
    std::string zeros(view.record.bytes, '\0');
    EXPECT_EQ(std::memcmp(view.data, zeros.data(), zeros.size()), 0) << view.record.name;
  }
}

}  // namespace
}  // namespace mcd
