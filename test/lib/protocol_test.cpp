// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/protocol.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace mcd {
namespace {

TEST(Protocol, MinimalFormParses) {
  auto cmd = ParseCommand(
      R"({"op":"create","name":"X","dtype":"f32","shape":[2,3],"device":0,"pid":123,"node":"n1"})");
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ(cmd->op, Op::kCreate);
  EXPECT_EQ(cmd->name, "X");
  EXPECT_EQ(cmd->dtype, DType::kF32);
  EXPECT_EQ(cmd->bytes, 24u);
  EXPECT_EQ(cmd->device, 0);
  EXPECT_EQ(cmd->pid, 123);
  EXPECT_EQ(*cmd->node, "n1");
  EXPECT_TRUE(cmd->zero_init);
  EXPECT_EQ(cmd->lifetime, Lifetime::kHeap);
}

TEST(Protocol, CommandRoundTrips) {
  Command c;
  c.op = Op::kCreate;
  c.name = "a.b/c";
  c.req = "r-1";
  c.dtype = DType::kBF16;
  c.shape = {4, 5};
  c.device = kHostDevice;
  c.zero_init = false;
  c.node = "n";
  auto back = ParseCommand(CommandToJson(c));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->dtype, DType::kBF16);
  EXPECT_EQ(back->device, kHostDevice);
  EXPECT_FALSE(back->zero_init);
  EXPECT_EQ(back->bytes, 40u);
  EXPECT_FALSE(back->fill);

  // A create its requester fills, and the publish that makes it ready.
  c.fill = true;
  c.pid = 77;
  auto filled = ParseCommand(CommandToJson(c));
  ASSERT_TRUE(filled.ok()) << filled.status().ToString();
  EXPECT_TRUE(filled->fill);
  EXPECT_EQ(filled->pid, 77);
  auto publish = ParseCommand(R"({"op":"publish","name":"a","pid":77})");
  ASSERT_TRUE(publish.ok()) << publish.status().ToString();
  EXPECT_EQ(publish->op, Op::kPublish);
  EXPECT_STREQ(OpName(publish->op), "publish");
  auto abandon = ParseCommand(R"({"op":"abandon","name":"a","pid":77})");
  ASSERT_TRUE(abandon.ok()) << abandon.status().ToString();
  EXPECT_EQ(abandon->op, Op::kAbandon);
  c.pid_space = "boot/123";
  auto spaced = ParseCommand(CommandToJson(c));
  ASSERT_TRUE(spaced.ok()) << spaced.status().ToString();
  EXPECT_EQ(spaced->pid_space, "boot/123");

  // The release of a reference its client took: the holder's own alone.
  Command del;
  del.op = Op::kDelete;
  del.name = "a";
  del.owner_pid = 42;
  del.owner_start = 7;
  del.own_only = true;
  auto own = ParseCommand(CommandToJson(del));
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_TRUE(own->own_only);
  EXPECT_EQ(own->owner_pid, 42);
  del.own_only = false;
  EXPECT_EQ(CommandToJson(del).find("own_only"), std::string::npos);
  EXPECT_FALSE(ParseCommand(CommandToJson(del))->own_only);
}

struct BadCase {
  const char* json;
  ErrorCode code;
  const char* words;  // part of the message
};

TEST(Protocol, EveryBadInputClassIsRefused) {
  std::string huge = R"({"op":"get","name":")" + std::string(5000, 'a') + "\"}";
  std::string deep = std::string(200, '[') + std::string(200, ']');
  const BadCase cases[] = {
      {"not json", ErrorCode::kInvalidArgument, "not valid JSON"},
      {"[1,2]", ErrorCode::kInvalidArgument, "not a JSON object"},
      {huge.c_str(), ErrorCode::kTooLarge, "limit"},
      {deep.c_str(), ErrorCode::kInvalidArgument, "nests"},
      {R"({"op":"get","name":"a","name":"b"})", ErrorCode::kInvalidArgument, "repeats"},
      {R"({"op":"explode","name":"a"})", ErrorCode::kInvalidArgument, "unknown op"},
      {R"({"name":"a"})", ErrorCode::kInvalidArgument, "missing \"op\""},
      {R"({"op":"get"})", ErrorCode::kInvalidArgument, "missing \"name\""},
      {R"({"op":"get","name":7})", ErrorCode::kInvalidArgument, "must be a string"},
      {R"({"op":"create","name":"a","dtype":"f128","shape":[1],"device":0})",
       ErrorCode::kInvalidArgument, "unknown dtype"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[-1],"device":0})",
       ErrorCode::kInvalidArgument, "positive"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[0],"device":0})",
       ErrorCode::kInvalidArgument, "positive"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[2.5],"device":0})",
       ErrorCode::kInvalidArgument, "integers"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1,1,1,1,1,1,1,1,1],"device":0})",
       ErrorCode::kInvalidArgument, "dimensions"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":"[2]","device":0})",
       ErrorCode::kInvalidArgument, "array"},
      {R"({"op":"create","name":"a","dtype":"f64","shape":[4294967296,4294967296],"device":0})",
       ErrorCode::kTooLarge, "overflows"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":-5})",
       ErrorCode::kInvalidArgument, "out of range"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1]})", ErrorCode::kInvalidArgument,
       "missing \"device\""},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":"gpu7"})",
       ErrorCode::kInvalidArgument, "bad device"},
      {R"({"op":"get","name":""})", ErrorCode::kInvalidArgument, "empty"},
      {R"({"op":"get","name":"a\u0001b"})", ErrorCode::kInvalidArgument, "0x01"},
      {R"({"op":"get","name":"\u0000"})", ErrorCode::kInvalidArgument, "0x00"},
      {R"({"op":"get","name":"a\u0000b"})", ErrorCode::kInvalidArgument, "0x00"},
      {R"({"op":"get","name":"a","req":"r\u0000"})", ErrorCode::kInvalidArgument, "\"req\" holds"},
      {R"({"op":"get","name":"a*"})", ErrorCode::kInvalidArgument, "'*'"},
      {R"({"op":"get","name":"a{b}"})", ErrorCode::kInvalidArgument, "'{'"},
      {R"({"op":"get","name":"a b"})", ErrorCode::kInvalidArgument, "' '"},
      {R"({"op":"get","name":"a","dtype":"f32"})", ErrorCode::kInvalidArgument, "only valid"},
      {R"({"op":"get","name":"a","extra":1})", ErrorCode::kInvalidArgument, "unknown field"},
      {R"({"op":"get","name":"a","pid":"12"})", ErrorCode::kInvalidArgument, "integer"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":0,"lifetime":"stack"})",
       ErrorCode::kInvalidArgument, "stack"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":0,"fill":1,"pid":5})",
       ErrorCode::kInvalidArgument, "true or false"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":0,"fill":true})",
       ErrorCode::kInvalidArgument, "the process that fills it"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":0,"fill":true,"pid":5,"copy_of":"b"})",
       ErrorCode::kInvalidArgument, "exclude"},
      {R"({"op":"get","name":"a","fill":true})", ErrorCode::kInvalidArgument, "only valid"},
      {R"({"op":"publish","name":"a"})", ErrorCode::kInvalidArgument, "the process that filled"},
      {R"({"op":"abandon","name":"a"})", ErrorCode::kInvalidArgument, "the process that filled"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":0,"pid":5,"pid_space":"b/1"})",
       ErrorCode::kInvalidArgument, "goes with"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":0,"fill":true,"pid":1})",
       ErrorCode::kInvalidArgument, "init"},
      // init never exits: nothing bound to it would ever be given back.
      {R"({"op":"get","name":"a","owner_pid":1})", ErrorCode::kInvalidArgument, "init"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":0,"lifetime":"stack","pid":1})",
       ErrorCode::kInvalidArgument, "init"},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":0,"lifetime":"stack","pid":7,"owner_pid":1})",
       ErrorCode::kInvalidArgument, "init"},
      {R"({"op":"get","name":"a","owner_pid":7,"own_only":true})", ErrorCode::kInvalidArgument,
       "only valid for op \"delete\""},
      {R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":0,"own_only":true})",
       ErrorCode::kInvalidArgument, "only valid for op \"delete\""},
      {R"({"op":"delete","name":"a","owner_pid":7,"own_only":1})", ErrorCode::kInvalidArgument,
       "true or false"},
      {R"({"op":"delete","name":"a","own_only":true})", ErrorCode::kInvalidArgument,
       "needs \"owner_pid\""},
  };
  for (const BadCase& c : cases) {
    auto parsed = ParseCommand(c.json);
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), c.code) << c.json << " -> " << parsed.status().ToString();
    EXPECT_NE(parsed.status().message().find(c.words), std::string::npos)
        << c.json << " -> " << parsed.status().message();
  }
  std::string long_name = R"({"op":"get","name":")" + std::string(201, 'n') + "\"}";
  EXPECT_EQ(ParseCommand(long_name).status().code(), ErrorCode::kInvalidArgument);
}

// A tensor or set being made may not take a name the tools would read as an option; one an older
// version made is still got and removed.
TEST(Protocol, ANewNameMayNotStartWithADash) {
  auto made = ParseCommand(R"({"op":"create","name":"-rf","dtype":"u8","shape":[1],"device":-1})");
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("starts with '-'"), std::string::npos)
      << made.status().message();
  EXPECT_FALSE(ValidateNewName("-x").ok());
  EXPECT_TRUE(ValidateNewName("x-").ok());
  EXPECT_TRUE(ValidateName("-x").ok());
  EXPECT_TRUE(ParseCommand(R"({"op":"get","name":"-old"})").ok());
  EXPECT_TRUE(ParseCommand(R"({"op":"delete","name":"-old"})").ok());
}

// A delete may still name init, to give back what an older server bound to it; a heap create's
// pid only says who sent it.
TEST(Protocol, OnlyBindingToInitIsRefused) {
  EXPECT_TRUE(ParseCommand(R"({"op":"delete","name":"a","owner_pid":1})").ok());
  EXPECT_TRUE(
      ParseCommand(R"({"op":"create","name":"a","dtype":"f32","shape":[1],"device":0,"pid":1})")
          .ok());
  EXPECT_TRUE(ParseCommand(R"({"op":"get","name":"a","owner_pid":2})").ok());
}

TEST(Protocol, RequestIdIsRecoveredFromBadCommands) {
  std::string req;
  auto parsed = ParseCommand(R"({"req":"r-9","op":"nope","name":"a"})", &req);
  EXPECT_FALSE(parsed.ok());
  EXPECT_EQ(req, "r-9");
  // From commands that are no JSON object too: the first "req" with a valid id.
  const std::pair<std::string, std::string> unreadable[] = {
      {R"({"req":"r-1","op":)", "r-1"},
      {R"([{"req" : "r-2"}])", "r-2"},
      {R"({"req":7,"op":"get","name":"a"} x)", "7"},
      {R"({"x":"\"req\":","req":"r-4",)", "r-4"},
      {R"({"req":"a b","req":"r-5",)", "r-5"},
      {R"({"req":"r*6",)", ""},
      {R"({"req":")" + std::string(129, 'r') + R"(",)", ""},
      {R"({"op":"get",)", ""},
      {R"({"req":"r-9","name":")" + std::string(5000, 'a') + "\"}", "r-9"},
  };
  for (const auto& [raw, expected] : unreadable) {
    req.clear();
    EXPECT_FALSE(ParseCommand(raw, &req).ok()) << raw;
    EXPECT_EQ(req, expected) << raw;
  }
  // A number cut at the end of the input may have lost digits: not taken.
  req = "x";
  EXPECT_FALSE(ParseCommand(R"({"op":"get","req":12)", &req).ok());
  EXPECT_EQ(req, "");
}

// One definition of a req: what the scan of an unreadable command takes is what the parser takes
// from a whole one, whatever the value and whatever JSON lets follow it.
TEST(Protocol, TheScanForAReqAgreesWithTheParser) {
  const std::string values[] = {"-5",
                                "7",
                                "0",
                                "18446744073709551615",
                                "-9223372036854775808",
                                "1.5",
                                "1e3",
                                "-0",
                                "true",
                                "null",
                                R"("r-1")",
                                R"("r\u002d1")",
                                R"("a b")",
                                R"("")",
                                R"("r\"1")",
                                "[1]"};
  for (const std::string& value : values) {
    std::string parsed = "unset";
    auto whole = ParseCommand(R"({"op":"get","name":"a","req":)" + value + "}", &parsed);
    std::string expected = whole.ok() ? whole->req : "";
    if (!whole.ok()) EXPECT_EQ(parsed, "unset") << value;  // a bad req is not reported as one
    for (std::string after : {",", " ", "\t", "\r", "\n", "}", "]"}) {
      std::string raw = R"({"name":"a","req":)" + value + after + R"("op":)";
      std::string found = "unset";
      EXPECT_FALSE(ParseCommand(raw, &found).ok()) << raw;
      EXPECT_EQ(found, expected) << value << " followed by " << static_cast<int>(after[0]);
    }
  }
  std::string negative;
  ASSERT_TRUE(ParseCommand(R"({"op":"get","name":"a","req":-5})", &negative).ok());
  EXPECT_EQ(negative, "-5");
}

TEST(Protocol, RecordHashAndJsonRoundTrip) {
  TensorRecord r;
  r.name = "t";
  r.dtype = DType::kI16;
  r.shape = {3, 7};
  r.device = 1;
  r.bytes = 42;
  r.ipc_kind = IpcKind::kCudaIpc;
  r.ipc_handle = std::string("\0\x01\xfe\xff", 4) + std::string(60, 'h');
  r.refcount = 3;
  r.state = "ready";
  r.ctime_ms = 1234;
  r.node = "n";
  r.owner = "abc";
  std::map<std::string, std::string> fields;
  for (auto& [k, v] : HashFields(r)) fields[k] = v;
  auto from_hash = RecordFromHash("t", fields);
  ASSERT_TRUE(from_hash.ok());
  EXPECT_EQ(from_hash->ipc_handle, r.ipc_handle);
  EXPECT_EQ(from_hash->shape, r.shape);
  auto from_json = RecordFromJson(RecordToJson(r));
  ASSERT_TRUE(from_json.ok()) << from_json.status().ToString();
  EXPECT_EQ(from_json->ipc_handle, r.ipc_handle);
  EXPECT_EQ(from_json->refcount, 3);
  // A lifetime is read as written: no other value passes for heap.
  for (const char* lifetime : {"bogus", "heap\nX", "", "Stack"}) {
    auto bad = fields;
    bad["lifetime"] = lifetime;
    EXPECT_EQ(RecordFromHash("t", bad).status().code(), ErrorCode::kUnexpectedReply) << lifetime;
  }
  fields["lifetime"] = "stack";
  EXPECT_EQ(RecordFromHash("t", fields)->lifetime, Lifetime::kStack);
  fields.erase("dtype");
  EXPECT_EQ(RecordFromHash("t", fields).status().code(), ErrorCode::kUnexpectedReply);
}

// Offsets and sizes at the edges of 64 bits, devices and handles of each kind: what a mapper
// would compute from a record that passes never wraps.
TEST(Protocol, ValidateRecordBoundsEveryFieldAMapperUses) {
  TensorRecord r;
  r.name = "t";
  r.dtype = DType::kU8;
  r.shape = {4096};
  r.bytes = 4096;
  r.device = kHostDevice;
  r.ipc_kind = IpcKind::kHostShm;
  r.ipc_handle = "/mcd-x-1-0123456789abcdef";
  r.state = "ready";
  EXPECT_TRUE(ValidateRecord(r).ok());
  auto refused = [](TensorRecord bad) {
    Status status = ValidateRecord(bad);
    return status.code() == ErrorCode::kUnexpectedReply;
  };
  for (uint64_t offset : {UINT64_MAX, UINT64_MAX - 7, UINT64_MAX - 4095, uint64_t{1} << 63,
                          (uint64_t{1} << 63) - 4095}) {
    TensorRecord bad = r;
    bad.offset = offset;
    EXPECT_TRUE(refused(bad)) << offset;
  }
  TensorRecord edge = r;
  edge.offset = (uint64_t{1} << 63) - 4097;  // ends at 2^63 - 1
  EXPECT_TRUE(ValidateRecord(edge).ok());
  for (int device : {-2, 0, 1024, INT32_MIN}) {
    TensorRecord bad = r;
    bad.device = device;
    EXPECT_TRUE(refused(bad)) << device;
  }
  for (const std::string& handle : {std::string("/"), std::string("x"), std::string("/a/b"),
                                    std::string("/.."), std::string("/a b"), std::string("/a\x1b"),
                                    std::string("/") + std::string(255, 'a'), std::string()}) {
    TensorRecord bad = r;
    bad.ipc_handle = handle;
    EXPECT_TRUE(refused(bad)) << handle;
  }
  TensorRecord creating = r;
  creating.ipc_handle.clear();
  creating.state = "creating";
  EXPECT_TRUE(ValidateRecord(creating).ok());
  TensorRecord gpu = r;
  gpu.ipc_kind = IpcKind::kCudaIpc;
  gpu.device = 0;
  gpu.ipc_handle = std::string(64, '\0');
  EXPECT_TRUE(ValidateRecord(gpu).ok());
  for (size_t size : {0, 63, 65}) {
    TensorRecord bad = gpu;
    bad.ipc_handle = std::string(size, 'h');
    EXPECT_TRUE(refused(bad)) << size;
  }
  gpu.device = kHostDevice;
  EXPECT_TRUE(refused(gpu));
}

// The record's JSON, and the server's reply head (the same without "refcount", left open), are
// valid JSON that a conforming parser reads back to the same values, whatever the strings hold
// (quotes, control characters, non-ASCII; invalid UTF-8 comes out as U+FFFD), for both lifetimes.
TEST(Protocol, RecordJsonIsValidJsonAndTheHeadIsItWithoutRefcount) {
  TensorRecord r;
  r.name = "a/b.c:d@e+f=g,h-i_0";
  r.dtype = DType::kBF16;
  r.shape = {2, 3, 262144};
  r.device = 7;
  r.ipc_kind = IpcKind::kCudaMempool;
  r.ipc_handle = std::string("\0\x01\xfe\xff\\\"", 6) + std::string(58, 'h');
  r.offset = 4096;
  r.refcount = 3;
  r.state = "ready";
  r.ctime_ms = 1763800000123;
  r.owner = "0123456789abcdef";
  r.creator_pid = 4242;
  // Every 64-bit count is written exactly; one that shape and dtype do not make is refused.
  r.bytes = 18446744073709551615ull;
  EXPECT_EQ(nlohmann::json::parse(RecordToJson(r))["bytes"], r.bytes);
  EXPECT_EQ(RecordFromJson(RecordToJson(r)).status().code(), ErrorCode::kUnexpectedReply);
  r.bytes = 2 * 3 * 262144 * 2;
  const std::pair<const char*, const char*> nodes[] = {
      {"gpu-host-1", "gpu-host-1"},
      {"q\"uote\\back", "q\"uote\\back"},
      {"tab\tnew\nline\x01", "tab\tnew\nline\x01"},
      {"\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9"},
      {"bad\xff\xfeutf8", "bad\xef\xbf\xbd\xef\xbf\xbdutf8"},
      {"del\x7f", "del\x7f"}};
  for (const auto& [node, read_back] : nodes) {
    for (Lifetime lifetime : {Lifetime::kHeap, Lifetime::kStack}) {
      r.node = node;
      r.lifetime = lifetime;
      r.owner_pid = lifetime == Lifetime::kStack ? 99 : 0;
      r.owner_start = lifetime == Lifetime::kStack ? 123456789 : 0;
      nlohmann::json doc = nlohmann::json::parse(RecordToJson(r));
      EXPECT_EQ(doc["node"], read_back) << "node " << node;
      EXPECT_EQ(doc["bytes"], r.bytes);
      EXPECT_EQ(doc["refcount"], 3);
      EXPECT_EQ(doc["shape"], nlohmann::json(r.shape));
      EXPECT_EQ(doc.contains("owner_pid"), lifetime == Lifetime::kStack);
      nlohmann::json head = nlohmann::json::parse(RecordJsonHead(r) + R"(,"refcount":3})");
      EXPECT_EQ(head, doc) << "node " << node;
      auto back = RecordFromJson(RecordJsonHead(r) + R"(,"refcount":3})");
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(back->ipc_handle, r.ipc_handle);
      EXPECT_EQ(back->owner_start, r.owner_start);
      EXPECT_EQ(back->bytes, r.bytes);
      EXPECT_EQ(back->node, read_back);
    }
  }
}

// What the codec refuses or survives: a NUL byte inside the text (not its end), invalid UTF-8,
// hostile nesting, numbers past 64 bits.
TEST(Protocol, CommandCodecRefusesWhatIsNotOneJsonObject) {
  std::string with_nul = std::string(R"({"op":"get","name":"a"})") + '\0' + "garbage";
  EXPECT_EQ(ParseCommand(with_nul).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ParseCommand("{\"op\":\"get\",\"name\":\"\xff\"}").status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(ParseCommand(std::string(4000, '[')).status().message().find("nests"),
            std::string::npos);
  EXPECT_NE(
      ParseCommand(R"({"op":"get","name":"a","x":1,"x":2})").status().message().find("repeats"),
      std::string::npos);
  auto big = ParseCommand(R"({"op":"get","name":"a","pid":18446744073709551615})");
  EXPECT_EQ(big.status().code(), ErrorCode::kTooLarge);
  auto huge = ParseCommand(R"({"op":"get","name":"a","pid":1e999})");
  EXPECT_EQ(huge.status().code(), ErrorCode::kInvalidArgument);
  auto numeric_req = ParseCommand(R"({"op":"get","name":"a","req":17})");
  ASSERT_TRUE(numeric_req.ok());
  EXPECT_EQ(numeric_req->req, "17");
}

TEST(Protocol, ShapesAndRepliesReadBack) {
  EXPECT_EQ(ShapeToJson({2, 3}), "[2,3]");
  EXPECT_EQ(ShapeFromJson(" [ 2 , 3 ] ").value(), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(ShapeFromJson("[2,3").ok());
  EXPECT_FALSE(ShapeFromJson("[2.5]").ok());
  EXPECT_FALSE(ShapeFromJson("[[2]]").ok());
  Command create;
  create.op = Op::kCreate;
  create.name = "t";
  create.dtype = DType::kF32;
  create.shape = {4};
  create.device = 0;
  create.owner_start = 18446744073709551615ull;
  EXPECT_EQ(nlohmann::json::parse(CommandToJson(create))["owner_start"], 18446744073709551615ull);
}

TEST(Protocol, DTypesAndShapes) {
  EXPECT_EQ(AllDTypes().size(), 13u);
  for (DType d : AllDTypes()) EXPECT_EQ(ParseDType(DTypeName(d)), d);
  EXPECT_EQ(ParseDType("float16"), DType::kF16);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(ParseShapeList("2,3,4").value(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(ParseShapeList("2x3").value(), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(ParseShapeList("2,,3").ok());
  EXPECT_EQ(ParseDevice("cuda:1").value(), 1);
  EXPECT_EQ(ParseDevice("cpu").value(), kHostDevice);
}

}  // namespace
}  // namespace mcd
