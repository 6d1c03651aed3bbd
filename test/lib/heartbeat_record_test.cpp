// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The heartbeat's codec (memcuda/heartbeat.h): a record to the hash's fields and back, the
// fields as the server has always written them, and crafted fields refused with an error that
// names them. Pure functions; no Redis.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "memcuda/heartbeat.h"

namespace mcd {
namespace {

HeartbeatRecord Full() {
  HeartbeatRecord r;
  r.instance = "0123456789abcdef";
  r.pid = 4242;
  r.pid_start = 987654321;
  r.pid_ino = 77;
  r.pid_space = "boot-id/4026531836";
  r.node = "n1";
  r.devices = "cpu,0,1";
  r.allocator = "0:cuda_mempool,1:cuda_mempool,cpu:host_shm";
  r.pool_socket = "/run/pool.sock";
  r.pool_fd = "0:12,1:13";
  r.ipc_primer = "";
  r.pool_primer = "0:abcd,1:ef01";
  r.command_socket = "/run/cmd.sock";
  r.ucx_address = "00ff";
  r.ucx_version = "1.15.0";
  r.node_copies = "in_place";
  r.pool_used = 1ull << 40;
  r.ready_bytes = 3;
  r.slab_bytes = 4;
  r.slab_free_bytes = 5;
  r.started_ms = 1700000000123;
  r.queue = "tensor_lifecycle";
  r.node_queue = "mcd:queue:{n1}";
  r.version = "1";
  r.event_history = 10000;
  r.tensors = 6;
  r.tensor_bytes = 7;
  r.device_tensors = "cpu:2:3,0:4:4";
  r.commands_ok = 8;
  r.settled = "5f2e";
  r.errors = {{"already_exists", 2}, {"not_found", 3}};
  r.commands_failed = 5;
  r.latency = {{"create", "50:1,+Inf:0;40;1"}, {"get", "50:0,+Inf:2;900;2"}};
  return r;
}

// Member by member: a codec that reads a field into the wrong member writes it back from there
// too, so comparing the fields alone would not see it.
void ExpectSame(const HeartbeatRecord& a, const HeartbeatRecord& b) {
  EXPECT_EQ(a.instance, b.instance);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.pid_start, b.pid_start);
  EXPECT_EQ(a.pid_ino, b.pid_ino);
  EXPECT_EQ(a.pid_space, b.pid_space);
  EXPECT_EQ(a.node, b.node);
  EXPECT_EQ(a.devices, b.devices);
  EXPECT_EQ(a.allocator, b.allocator);
  EXPECT_EQ(a.pool_socket, b.pool_socket);
  EXPECT_EQ(a.pool_fd, b.pool_fd);
  EXPECT_EQ(a.ipc_primer, b.ipc_primer);
  EXPECT_EQ(a.pool_primer, b.pool_primer);
  EXPECT_EQ(a.command_socket, b.command_socket);
  EXPECT_EQ(a.ucx_address, b.ucx_address);
  EXPECT_EQ(a.ucx_version, b.ucx_version);
  EXPECT_EQ(a.node_copies, b.node_copies);
  EXPECT_EQ(a.pool_used, b.pool_used);
  EXPECT_EQ(a.ready_bytes, b.ready_bytes);
  EXPECT_EQ(a.slab_bytes, b.slab_bytes);
  EXPECT_EQ(a.slab_free_bytes, b.slab_free_bytes);
  EXPECT_EQ(a.started_ms, b.started_ms);
  EXPECT_EQ(a.queue, b.queue);
  EXPECT_EQ(a.node_queue, b.node_queue);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.event_history, b.event_history);
  EXPECT_EQ(a.tensors, b.tensors);
  EXPECT_EQ(a.tensor_bytes, b.tensor_bytes);
  EXPECT_EQ(a.device_tensors, b.device_tensors);
  EXPECT_EQ(a.commands_ok, b.commands_ok);
  EXPECT_EQ(a.settled, b.settled);
  EXPECT_EQ(a.errors, b.errors);
  EXPECT_EQ(a.commands_failed, b.commands_failed);
  EXPECT_EQ(a.latency, b.latency);
}

TEST(HeartbeatRecord, RoundTripsThroughItsFields) {
  HeartbeatRecord r = Full();
  auto back = HeartbeatFromFields(HeartbeatMap(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(r, *back);
  EXPECT_EQ(back->pool_used, 1ull << 40);
  EXPECT_EQ(back->pid_ino, 77u);
  EXPECT_EQ(back->settled, "5f2e");
}

TEST(HeartbeatRecord, AnEmptyRecordRoundTripsToo) {
  auto back = HeartbeatFromFields(HeartbeatMap(HeartbeatRecord{}));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(HeartbeatRecord{}, *back);
}

// The layout the server has always written (man memcuda(7)): names, order and the text of each
// value, as other programs (redis-cli, scripts) read it.
TEST(HeartbeatRecord, WritesTheFieldsAsTheServerAlwaysHas) {
  HeartbeatRecord r = Full();
  r.pid_ino = 0;  // no pidfs: written as ""
  std::vector<std::pair<std::string, std::string>> expected = {
      {"instance", "0123456789abcdef"},
      {"pid", "4242"},
      {"pid_start", "987654321"},
      {"pid_ino", ""},
      {"pid_space", "boot-id/4026531836"},
      {"node", "n1"},
      {"devices", "cpu,0,1"},
      {"allocator", "0:cuda_mempool,1:cuda_mempool,cpu:host_shm"},
      {"pool_socket", "/run/pool.sock"},
      {"pool_fd", "0:12,1:13"},
      {"ipc_primer", ""},
      {"pool_primer", "0:abcd,1:ef01"},
      {"command_socket", "/run/cmd.sock"},
      {"ucx_address", "00ff"},
      {"ucx_version", "1.15.0"},
      {"node_copies", "in_place"},
      {"pool_used", "1099511627776"},
      {"ready_bytes", "3"},
      {"slab_bytes", "4"},
      {"slab_free_bytes", "5"},
      {"started", "1700000000123"},
      {"queue", "tensor_lifecycle"},
      {"node_queue", "mcd:queue:{n1}"},
      {"version", "1"},
      {"event_history", "10000"},
      {"tensors", "6"},
      {"tensor_bytes", "7"},
      {"device_tensors", "cpu:2:3,0:4:4"},
      {"commands_ok", "8"},
      {"settled", "5f2e"},
      {"errors_already_exists", "2"},
      {"errors_not_found", "3"},
      {"commands_failed", "5"},
      {"latency_create", "50:1,+Inf:0;40;1"},
      {"latency_get", "50:0,+Inf:2;900;2"},
  };
  EXPECT_EQ(HeartbeatFields(r), expected);
}

TEST(HeartbeatRecord, AbsentOrEmptyNumbersReadAsZeroAndUnknownFieldsAreKept) {
  auto r = HeartbeatFromFields(
      {{"instance", "i"}, {"pid", "7"}, {"pid_ino", ""}, {"from_a_newer_server", "x"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instance, "i");
  EXPECT_EQ(r->pid, 7);
  EXPECT_EQ(r->pid_ino, 0u);
  EXPECT_EQ(r->started_ms, 0);
  EXPECT_EQ(r->event_history, 0u);
  EXPECT_TRUE(r->errors.empty());
  // A newer server's field is kept as the hash has it, and only it: the known ones are members.
  EXPECT_EQ(r->other,
            (std::vector<std::pair<std::string, std::string>>{{"from_a_newer_server", "x"}}));
  EXPECT_EQ(HeartbeatMap(*r).at("from_a_newer_server"), "x");
}

// What anyone with Redis credentials may write: each malformed number is refused, naming the
// field and its value on one line.
TEST(HeartbeatRecord, AMalformedNumberIsRefusedNamingTheField) {
  struct Case {
    std::string field, value, shown;
  };
  const Case cases[] = {
      {"pid", "12x", "'12x'"},
      {"pid", " 12", "' 12'"},
      {"pid", "99999999999999999999", "'99999999999999999999'"},
      {"pid_start", "-1", "'-1'"},
      {"pid_ino", "0x10", "'0x10'"},
      {"started", "1.5", "'1.5'"},
      {"tensors", "+3", "'+3'"},
      {"event_history", "ten", "'ten'"},
      {"commands_failed", "1e3", "'1e3'"},
      {"errors_not_found", "lots", "'lots'"},
      {"commands_ok", "1\n\x1b[2J", "'1??[2J'"},
  };
  for (const Case& c : cases) {
    std::map<std::string, std::string> fields = HeartbeatMap(Full());
    fields[c.field] = c.value;
    auto r = HeartbeatFromFields(fields);
    ASSERT_FALSE(r.ok()) << c.field << "=" << c.value;
    EXPECT_EQ(r.status().code(), ErrorCode::kUnexpectedReply);
    EXPECT_NE(r.status().message().find("'" + c.field + "' is " + c.shown), std::string::npos)
        << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
  }
}

TEST(HeartbeatRecord, AHugeFieldIsShownCut) {
  std::map<std::string, std::string> fields = {{"tensors", std::string(100000, '9') + "z"}};
  auto r = HeartbeatFromFields(fields);
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 200u) << r.status().message();
}

RedisValue Str(const std::string& text) {
  RedisValue v;
  v.type = RedisValue::Type::kString;
  v.str = text;
  return v;
}
RedisValue Array(std::vector<RedisValue> elements) {
  RedisValue v;
  v.type = RedisValue::Type::kArray;
  v.elements = std::move(elements);
  return v;
}

TEST(HeartbeatRecord, AnHmgetOfAFewFieldsReadsThemAndChecksThem) {
  const std::vector<const char*> names = {"instance", "pid", "settled"};
  auto r = HeartbeatFromHmget(names, Array({Str("i"), Str("7"), RedisValue{}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instance, "i");
  EXPECT_EQ(r->pid, 7);
  EXPECT_EQ(r->settled, "");
  // No hash: every field nil.
  r = HeartbeatFromHmget(names, Array({RedisValue{}, RedisValue{}, RedisValue{}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instance, "");
  // A malformed number is refused as HeartbeatFromFields refuses it.
  r = HeartbeatFromHmget(names, Array({Str("i"), Str("7x"), RedisValue{}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'pid' is '7x'"), std::string::npos) << r.status().message();
  // A reply that is not the HMGET of those names.
  r = HeartbeatFromHmget(names, Array({Str("i"), Str("7")}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnexpectedReply);
}

}  // namespace
}  // namespace mcd
