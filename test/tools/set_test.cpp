// Tensor sets: Client::CreateSet lays its members out in one allocation, each a tensor of its own;
// Client::GetSet takes every member's reference in one script call and maps the allocation once;
// the allocation goes with the last member. Real redis-server, mcd-serve and tools, host
// tensors; every byte read is compared with what was written.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

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
  std::string previous;
  for (const TensorView& view : views.value()) {
    EXPECT_LT(previous, view.record.name) << "sorted by name";
    previous = view.record.name;
    size_t i = index.at(view.record.name);
    EXPECT_EQ(view.record.refcount, 2);
    EXPECT_EQ(view.record.set, "model");
    ASSERT_EQ(view.record.bytes, made.bytes[i].size());
    EXPECT_EQ(std::memcmp(view.data, made.bytes[i].data(), made.bytes[i].size()), 0)
        << view.record.name;
  }
  // A member is a tensor like any other: mcd-get reads its bytes, mcd-ls lists it.
  auto listed = Tool("mcd-ls", {"model/*", "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(json::parse(listed.out).size(), 25u);

  // The allocation goes with the last member: members freed one by one keep it until then.
  std::vector<std::string> names;
  for (const SetMember& m : made.spec.members) names.push_back(m.name);
  ASSERT_TRUE(consumer->ReleaseMany(names).ok());
  std::vector<std::string> first(names.begin(), names.begin() + 24);
  auto released = producer->ReleaseMany(first);
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  for (const std::string& name : first) EXPECT_EQ(HashField(name, "state"), "") << name;
  EXPECT_EQ(ShmCount(), 1u) << "the last member still holds the allocation";
  auto last = consumer->GetSet("model");
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  ASSERT_EQ(last->size(), 1u) << "freed members have left the set";
  EXPECT_EQ(std::memcmp((*last)[0].data, made.bytes[24].data(), made.bytes[24].size()), 0);
  ASSERT_TRUE(consumer->ReleaseMany({names[24]}).ok());
  ASSERT_TRUE(producer->ReleaseMany({names[24]}).ok());
  EXPECT_TRUE(test::WaitFor([&] { return ShmCount() == 0; }, 5000)) << ServeLog();
  EXPECT_TRUE(test::WaitFor(
      [&] {
        return redis_.Connect()->Command({"EXISTS", keys_.Set("model")})->integer == 0;
      },
      5000))
      << "the set's list goes with its last member";
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
