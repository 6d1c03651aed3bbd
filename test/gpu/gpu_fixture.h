// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A private redis-server and an mcd-serve on GPU 0 for each GPU test; skipped without a device.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "memcuda/client.h"
#include "memcuda/keys.h"
#include "test_support.h"

namespace mcd::test {

class GpuServerTest : public ::testing::Test {
 protected:
  // Extra mcd-serve arguments (the allocator, pool limits).
  virtual std::vector<std::string> ServerArgs() const { return {}; }

  void SetUp() override {
    if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
    redis_ = std::make_unique<RedisServer>();
    node_ = "gpu" + std::to_string(getpid());
    StartServer();
  }

  // A clean shutdown frees every tensor of the test.
  void TearDown() override {
    if (server_ && server_->pid() > 0) EXPECT_EQ(server_->Stop(SIGTERM), 0) << ServeLog();
  }

  void StartServer() {
    std::vector<std::string> argv = {ToolPath("mcd-serve"), "--devices", "0", "--node", node_};
    for (const auto& a : ServerArgs()) argv.push_back(a);
    size_t before = ServeLog().size();
    server_ = std::make_unique<Background>(argv, Env(), dir_.path() + "/serve.log");
    // The heartbeat claims the node first; the log line says the start is complete.
    ASSERT_TRUE(WaitFor(
        [&] {
          return !Heartbeat("instance").empty() &&
                 ServeLog().find("serving node", before) != std::string::npos;
        },
        20000))
        << ServeLog();
  }

  std::string Heartbeat(const std::string& field) const {
    auto r = redis_->Connect()->Command({"HGET", KeySpace().Server(node_), field});
    return r.ok() && !r->is_nil() ? r->str : "";
  }
  // The heartbeat's primer of device 0 in `field` (ipc_primer, pool_primer: "0:<hex>"), decoded;
  // "" with a failure recorded when the field names no device 0 or is not hex.
  std::string DevicePrimer(const std::string& field) const {
    std::string text = Heartbeat(field);
    EXPECT_EQ(text.rfind("0:", 0), 0u) << field << ": " << text;
    if (text.rfind("0:", 0) != 0) return "";
    auto bytes = HexDecode(text.substr(2));
    EXPECT_TRUE(bytes.ok()) << field << ": " << text;
    return bytes.ok() ? std::move(bytes).value() : "";
  }
  std::string ServeLog() const { return ReadFile(dir_.path() + "/serve.log"); }
  std::map<std::string, std::string> Env() const { return {{"MCD_REDIS_URL", redis_->url()}}; }
  ProcessResult Tool(const std::string& tool, std::vector<std::string> args) {
    std::vector<std::string> argv = {ToolPath(tool)};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--node", node_});
    return test::Run(argv, Env());
  }
  std::unique_ptr<Client> Connect() {
    ClientOptions opt;
    opt.redis_url = redis_->parsed_url();
    opt.node = node_;
    auto client = Client::Connect(opt);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client).value() : nullptr;
  }
  // A float32 .npy of n values i * 0.5 + 1.
  std::string WriteNpy(int n) {
    std::string path = dir_.path() + "/in" + std::to_string(n) + ".npy";
    std::string header =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }";
    header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
    std::ofstream out(path, std::ios::binary);
    out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size() & 0xff)
        << static_cast<char>(header.size() >> 8) << header;
    for (int i = 0; i < n; ++i) {
      float v = static_cast<float>(i) * 0.5f + 1.0f;
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
    return path;
  }

  // Ready means filled: a consumer waiting before `mcd-create --from` reads every byte of the
  // file (random, 64 MiB, so the copy takes a while after the create), and so does a reader of a
  // tensor made by the library with contents.
  void ExpectAWaitingConsumerReadsEveryByte() {
    constexpr size_t kBytes = 64 << 20;
    for (int run = 0; run < 3; ++run) {
      std::string name = "fill" + std::to_string(run);
      std::string data(kBytes, '\0');
      uint64_t x = 0x9e3779b97f4a7c15ull * (run + 1);
      for (char& c : data) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        c = static_cast<char>(x);
      }
      std::string in = dir_.path() + "/" + name + ".npy",
                  out = dir_.path() + "/" + name + ".out.npy";
      std::string header =
          "{'descr': '|u1', 'fortran_order': False, 'shape': (" + std::to_string(kBytes) + ",), }";
      header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
      std::ofstream(in, std::ios::binary)
          << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size() & 0xff)
          << static_cast<char>(header.size() >> 8) << header << data;
      Background consumer(
          {ToolPath("mcd-get"), name, "--wait", "60", "--no-ref", "-q", "-o", out, "--node", node_},
          Env(), dir_.path() + "/" + name + ".log");
      auto created = Tool("mcd-create", {name, "--from", in, "--device", "0", "-q"});
      ASSERT_EQ(created.exit_code, 0) << created.err << ServeLog();
      ASSERT_EQ(consumer.Wait(60), 0) << ReadFile(dir_.path() + "/" + name + ".log");
      std::string got = ReadFile(out);
      ASSERT_GE(got.size(), kBytes);
      ASSERT_TRUE(got.compare(got.size() - kBytes, kBytes, data) == 0)
          << "run " << run << ": other bytes than the file's";
      ASSERT_EQ(Tool("mcd-rm", {name}).exit_code, 0);
    }
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    std::string data(1 << 20, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
    CreateSpec spec;
    spec.name = "lib";
    spec.dtype = DType::kU8;
    spec.shape = {static_cast<int64_t>(data.size())};
    spec.device = 0;
    spec.contents = data.data();
    spec.contents_bytes = data.size();
    auto created = client->Create(spec);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    EXPECT_EQ(created->state, "ready");
    std::string out = dir_.path() + "/lib.bin";
    ASSERT_EQ(Tool("mcd-get", {"lib", "--no-ref", "-q", "-o", out}).exit_code, 0);
    EXPECT_TRUE(ReadFile(out) == data);
    ASSERT_TRUE(client->Release("lib").ok());
  }

  // The ready stock (mcd-serve --ready-max): a deleted tensor's block is handed to a later
  // create of its size, zeroed, and the stock is given back once the size is no longer created.
  void ExpectAFreedBlockComesBackZeroed() {
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    constexpr size_t kBytes = 1 << 20;
    CreateSpec spec;
    spec.name = "first";
    spec.dtype = DType::kU8;
    spec.shape = {static_cast<int64_t>(kBytes)};
    spec.device = 0;
    auto first = client->Create(spec);
    ASSERT_TRUE(first.ok()) << first.status().ToString() << ServeLog();
    auto view = client->Get("first");
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    std::vector<uint8_t> bytes(kBytes, 0xA5);
    ASSERT_TRUE(client->CopyFromHost(view.value(), bytes.data(), kBytes).ok());
    ASSERT_TRUE(client->Release("first").ok());  // the Get's reference (and the mapping)
    ASSERT_TRUE(client->Release("first").ok());  // the last one: deleted
    // The stock holds the freed block and the one refilled after the first create; a create
    // takes the block whose zeroing finished first, so one of the next two gets the freed block
    // (its export is kept with it: the stock was used), and neither carries the former tenant's
    // bytes.
    int reused = 0;
    for (const char* name : {"second", "third"}) {
      spec.name = name;
      auto next = client->Create(spec);
      ASSERT_TRUE(next.ok()) << next.status().ToString() << ServeLog();
      reused += next->ipc_handle == first->ipc_handle && next->offset == first->offset;
      auto again = client->Get(name);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      ASSERT_TRUE(client->CopyToHost(again.value(), bytes.data(), kBytes).ok());
      EXPECT_EQ(static_cast<size_t>(std::count(bytes.begin(), bytes.end(), uint8_t{0})), kBytes)
          << name;
    }
    EXPECT_EQ(reused, 1);
    for (const char* name : {"second", "third"}) {
      ASSERT_TRUE(client->Release(name).ok());
      ASSERT_TRUE(client->Release(name).ok());
    }
    ASSERT_TRUE(WaitFor([&] { return std::atoll(Heartbeat("ready_bytes").c_str()) > 0; }, 5000))
        << "the heartbeat should report the stock";
    ASSERT_TRUE(WaitFor([&] { return Heartbeat("ready_bytes") == "0"; }, 10000))
        << "an unused stock should be given back; ready_bytes " << Heartbeat("ready_bytes");
  }

  // A warmed-up process's first Get overlaps the driver's once-per-process costs (the pool's
  // import, the primer's open) with its Redis round trip, on the device's worker: the mapping
  // must then work as if they had run in order, here and in another process.
  // A hash whose offset puts the tensor past the end of its allocation is refused (76) by
  // every reader, in a fresh process and in one that has the allocation mapped already, and
  // changes nothing: put right, the tensor reads back byte for byte.
  void ExpectATensorPastItsAllocationIsRefused() {
    auto conn = redis_->Connect();
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    for (size_t bytes : {size_t{4096}, size_t{8} << 20}) {  // carved from a slab; a block alone
      std::string name = "past" + std::to_string(bytes), in = dir_.path() + "/" + name + ".npy";
      std::string data = RandomBytes(bytes, static_cast<uint32_t>(bytes));
      std::ofstream(in, std::ios::binary) << U8Npy(data);
      ASSERT_EQ(Tool("mcd-create", {name, "--from", in, "--device", "0", "-q"}).exit_code, 0);
      std::string key = KeySpace().Tensor(name);
      std::string offset = conn->Command({"HGET", key, "offset"})->str;
      // In this process the allocation stays mapped: the next open of it needs no driver call.
      ASSERT_TRUE(client->Get(name).ok());
      ASSERT_TRUE(conn->Command({"HSET", key, "offset", std::to_string(uint64_t{1} << 36)}).ok());
      std::string out = dir_.path() + "/" + name + ".out";
      for (const char* ref : {"--no-ref", "-q"}) {
        auto got = Tool("mcd-get", {name, ref, "-o", out + ".bin"});
        EXPECT_EQ(got.exit_code, 76) << got.err;
        EXPECT_NE(got.err.find("past the end of its allocation"), std::string::npos) << got.err;
      }
      ASSERT_TRUE(client->Close(name).ok());  // the Get's mapping, under the true offset
      auto again = client->Get(name);  // mapped afresh: the driver gives the allocation's size
      EXPECT_EQ(again.status().code(), ErrorCode::kUnexpectedReply) << again.status().ToString();
      ASSERT_TRUE(conn->Command({"HSET", key, "offset", offset}).ok());
      EXPECT_EQ(conn->Command({"HGET", key, "refcount"})->str, "2");  // the first Get's
      ASSERT_TRUE(client->Release(name).ok());
      ASSERT_EQ(Tool("mcd-get", {name, "--no-ref", "-q", "-o", out + ".bin"}).exit_code, 0);
      EXPECT_TRUE(ReadFile(out + ".bin") == data) << name << ": other bytes than the file's";
      ASSERT_EQ(Tool("mcd-rm", {name}).exit_code, 0);
    }
    // A planted hash naming a mapped allocation with an offset past it: refused with no driver
    // call, from the allocation's size learnt at its first open.
    std::string data = RandomBytes(4096, 9);
    std::string in = dir_.path() + "/kept.npy";
    std::ofstream(in, std::ios::binary) << U8Npy(data);
    ASSERT_EQ(Tool("mcd-create", {"kept", "--from", in, "--device", "0", "-q"}).exit_code, 0);
    ASSERT_TRUE(client->Get("kept").ok());
    auto fields = conn->Command({"HGETALL", KeySpace().Tensor("kept")});
    std::vector<std::string> planted = {"HSET", KeySpace().Tensor("planted")};
    for (const auto& e : fields->elements) planted.push_back(e.str);
    ASSERT_TRUE(conn->Command(std::vector<std::string_view>(planted.begin(), planted.end())).ok());
    ASSERT_TRUE(conn->Command({"HSET", KeySpace().Tensor("planted"), "offset",
                               std::to_string(uint64_t{1} << 36)})
                    .ok());
    auto planted_get = client->Get("planted");
    EXPECT_EQ(planted_get.status().code(), ErrorCode::kUnexpectedReply)
        << planted_get.status().ToString();
    std::string read(data.size(), '\0');
    auto kept = client->Open("kept");
    ASSERT_TRUE(kept.ok()) << kept.status().ToString();
    ASSERT_TRUE(client->CopyToHost(*kept, read.data(), read.size()).ok());
    EXPECT_TRUE(read == data);
    ASSERT_TRUE(conn->Command({"DEL", KeySpace().Tensor("planted")}).ok());
    ASSERT_TRUE(client->Close("kept").ok());
    ASSERT_TRUE(client->Release("kept").ok());
    ASSERT_EQ(Tool("mcd-rm", {"kept"}).exit_code, 0);
  }

  void ExpectAWarmedUpFirstGetMapsItsTensor() {
    ASSERT_EQ(
        Tool("mcd-create", {"w", "--dtype", "i32", "--shape", "4096", "--device", "0"}).exit_code,
        0);
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Warmup(0).ok());
    auto view = client->Get("w");
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    std::vector<int32_t> sevens(4096, 7), back(4096, -1);
    ASSERT_TRUE(client->CopyFromHost(view.value(), sevens.data(), sevens.size() * 4).ok());
    ASSERT_TRUE(client->CopyToHost(view.value(), back.data(), back.size() * 4).ok());
    EXPECT_EQ(back, sevens);
    auto printed = Tool("mcd-get", {"w", "--no-ref", "--print", "3"});  // seen from another process
    EXPECT_NE(printed.out.find("values:    7,7,7,..."), std::string::npos) << printed.out;
    ASSERT_TRUE(client->Release("w").ok());
    ASSERT_EQ(Tool("mcd-rm", {"w"}).exit_code, 0);
  }

  TempDir dir_;
  std::unique_ptr<RedisServer> redis_;
  std::string node_;
  std::unique_ptr<Background> server_;

  // Batched gets and a tensor set on the GPU, every byte compared: plain tensors got in one call;
  // a set of odd sizes (one of 64 MiB) made in one allocation, whose members are opened through
  // one mapping, read by another process, written to a safetensors file and loaded again.
  void ExpectBatchesAndSetsKeepEveryByte() {
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    const std::vector<int64_t> sizes = {1000, 3 << 20, 17, 64 << 20, 3 * 4096 + 1};
    std::vector<std::string> data, names;
    CreateSetSpec spec;
    spec.name = "gs";
    spec.device = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      data.push_back(RandomBytes(static_cast<size_t>(sizes[i]), 77 + static_cast<uint32_t>(i)));
      names.push_back("gs/m" + std::to_string(i));
      spec.members.push_back(SetMember{names.back(), DType::kU8, {sizes[i]}, 0});
    }
    for (const std::string& d : data) spec.contents.push_back(d.data());
    auto made = client->CreateSet(spec);
    ASSERT_TRUE(made.ok()) << made.status().ToString() << ServeLog();
    auto views = client->GetSet("gs");
    ASSERT_TRUE(views.ok()) << views.status().ToString();
    ASSERT_EQ(views->size(), sizes.size());
    const TensorView& first = views->front();
    for (size_t i = 0; i < views->size(); ++i) {
      const TensorView& view = (*views)[i];
      ASSERT_EQ(view.record.name, names[i]);
      EXPECT_EQ(static_cast<char*>(view.data) - static_cast<char*>(first.data),
                static_cast<ptrdiff_t>(view.record.offset - first.record.offset))
          << "one mapping of the set's allocation";
      std::string got(data[i].size(), '\0');
      ASSERT_TRUE(client->CopyToHost(view, got.data(), got.size()).ok());
      EXPECT_TRUE(got == data[i]) << names[i];
    }
    std::string out = dir_.path() + "/m3.bin";
    ASSERT_EQ(Tool("mcd-get", {"gs/m3", "--no-ref", "-q", "-o", out}).exit_code, 0);
    EXPECT_TRUE(ReadFile(out) == data[3]) << "another process reads the member's own bytes";
    std::string file = dir_.path() + "/gs.safetensors";
    ASSERT_EQ(Tool("mcd-get", {"gs/", "-q", "-o", file}).exit_code, 0) << ServeLog();
    auto loaded = Tool("mcd-create", {"gs2", "--from", file, "--device", "0", "-q"});
    ASSERT_EQ(loaded.exit_code, 0) << loaded.err << ServeLog();
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::string again = dir_.path() + "/again" + std::to_string(i) + ".bin";
      ASSERT_EQ(
          Tool("mcd-get", {"gs2/m" + std::to_string(i), "--no-ref", "-q", "-o", again}).exit_code,
          0);
      EXPECT_TRUE(ReadFile(again) == data[i]) << "gs2/m" << i;
    }

    // More plain tensors than a batched get takes per script call (64): the chunks are opened
    // while the later chunks' references are taken.
    std::vector<std::string> plain;
    std::vector<std::string> plain_data;
    for (int i = 0; i < 70; ++i) {
      plain_data.push_back(
          RandomBytes(4096 + 96 * static_cast<size_t>(i), 900 + static_cast<uint32_t>(i)));
      CreateSpec one;
      one.name = "plain" + std::to_string(i);
      one.dtype = DType::kU8;
      one.shape = {static_cast<int64_t>(plain_data.back().size())};
      one.device = 0;
      one.contents = plain_data.back().data();
      one.contents_bytes = plain_data.back().size();
      ASSERT_TRUE(client->Create(one).ok());
      plain.push_back(one.name);
    }
    auto other = Connect();
    ASSERT_NE(other, nullptr);
    auto batch = other->GetMany(plain);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    for (size_t i = 0; i < plain.size(); ++i) {
      std::string got(plain_data[i].size(), '\0');
      ASSERT_TRUE(other->CopyToHost((*batch)[i], got.data(), got.size()).ok());
      EXPECT_TRUE(got == plain_data[i]) << plain[i];
    }
    ASSERT_TRUE(other->ReleaseMany(plain).ok());
    ASSERT_TRUE(client->ReleaseMany(plain).ok());
    ASSERT_TRUE(client->ReleaseSet(*views).ok());  // GetSet's one reference
    ASSERT_TRUE(client->ReleaseMany(names).ok());  // the creator's
    ASSERT_EQ(Tool("mcd-rm", {"gs2/", "-q"}).exit_code, 0);
    EXPECT_TRUE(Tool("mcd-ls", {"-q"}).out.empty()) << Tool("mcd-ls", {}).out;
  }
};

}  // namespace mcd::test
