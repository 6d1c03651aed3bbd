// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The lifecycle on a real GPU with the default allocator: cudaMalloc + a CUDA IPC handle that
// other processes open, write and read back. Skipped without a CUDA device.
#include <cuda_runtime.h>

#include <cstring>
#include <set>

#include "gpu_fixture.h"

namespace mcd {
namespace {

using GpuLifecycle = test::GpuServerTest;

// A tensor of `bytes` bytes (u8) on GPU 0.
CreateSpec OnGpu0(const std::string& name, uint64_t bytes) {
  CreateSpec spec;
  spec.name = name;
  spec.dtype = DType::kU8;
  spec.shape = {static_cast<int64_t>(bytes)};
  spec.device = 0;
  return spec;
}

// Whether GPU 0's free memory comes back within 10 s to `before`, less 512 MiB (the server's
// own context and stream); `now` holds the last reading.
bool FreeMemoryComesBack(size_t before, size_t& now) {
  size_t total = 0;
  return test::WaitFor(
      [&] { return cudaMemGetInfo(&now, &total) == cudaSuccess && now + (512ull << 20) > before; },
      10000);
}

TEST_F(GpuLifecycle, CreateFromNpyReadBackInAnotherProcessAndScaleInPlace) {
  std::string in = WriteNpy(1024);
  auto created = Tool("mcd-create", {"g", "--from", in, "--device", "0", "--json"});
  ASSERT_EQ(created.exit_code, 0) << created.err << ServeLog();
  auto record = nlohmann::json::parse(created.out);
  EXPECT_EQ(record["ipc_kind"], "cuda_ipc");
  EXPECT_EQ(record["ipc_handle_hex"].get<std::string>().size(), 128u);
  std::string out = dir_.path() + "/out.npy";
  ASSERT_EQ(Tool("mcd-get", {"g", "--no-ref", "-o", out}).exit_code, 0);
  EXPECT_EQ(test::ReadFile(out), test::ReadFile(in));  // byte for byte through CUDA IPC

  auto scaled = Tool("mcd-example-scale", {"g", "2"});
  ASSERT_EQ(scaled.exit_code, 0) << scaled.err;
  auto printed = Tool("mcd-get", {"g", "--no-ref", "--print", "3"});
  // (i * 0.5 + 1) * 2 + 1 for i = 0, 1, 2
  EXPECT_NE(printed.out.find("values:    3,4,5,..."), std::string::npos) << printed.out;

  ASSERT_EQ(Tool("mcd-rm", {"g"}).exit_code, 0);
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "");
  EXPECT_EQ(server_->Stop(SIGTERM), 0);
}

TEST_F(GpuLifecycle, OutOfMemoryIsCleanAndOthersSurvive) {
  ASSERT_EQ(
      Tool("mcd-create", {"small", "--dtype", "f32", "--shape", "256", "--device", "0"}).exit_code,
      0);
  auto oom =
      Tool("mcd-create", {"huge", "--dtype", "u8", "--shape", "1099511627776", "--device", "0"});
  EXPECT_EQ(oom.exit_code, 69);
  EXPECT_NE(oom.err.find("out_of_memory"), std::string::npos) << oom.err;
  EXPECT_NE(oom.err.find("requested 1099511627776 bytes"), std::string::npos) << oom.err;
  auto small = Tool("mcd-get", {"small", "--no-ref", "--print", "2"});
  EXPECT_EQ(small.exit_code, 0) << small.err;
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "small\n");
}

TEST_F(GpuLifecycle, AFreedBlockIsHandedOutAgainZeroed) { ExpectAFreedBlockComesBackZeroed(); }
// The ready stock at its default (a quarter of the device) follows demand for large tensors: a
// 1 GiB tensor created makes a block ahead, its block is kept when it is deleted, the next two
// creates take both blocks zeroed (every byte), and all of it goes back to the driver once such
// creates stop.
TEST_F(GpuLifecycle, TheStockFollowsLargeTensorsAndGivesThemBack) {
  constexpr uint64_t kBytes = 1ull << 30;
  const std::string written = test::RandomBytes(kBytes, 42);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  CreateSpec spec = OnGpu0("w0", kBytes);
  auto first = client->Create(spec);
  ASSERT_TRUE(first.ok()) << first.status().ToString() << ServeLog();
  ASSERT_TRUE(
      test::WaitFor([&] { return std::stoull("0" + Heartbeat("ready_bytes")) >= kBytes; }, 5000))
      << "a block of the size should be made ahead; ready_bytes " << Heartbeat("ready_bytes");
  {
    auto view = client->Get("w0");
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    ASSERT_TRUE(client->CopyFromHost(view.value(), written.data(), kBytes).ok());
    ASSERT_TRUE(client->Release("w0").ok());  // the get's reference and mapping
  }
  ASSERT_TRUE(client->Release("w0").ok());  // the last one: its block goes to the stock
  std::string back(kBytes, '\x01');
  int reused = 0;
  for (const char* name : {"w1", "w2"}) {
    spec.name = name;
    auto next = client->Create(spec);
    ASSERT_TRUE(next.ok()) << next.status().ToString() << ServeLog();
    reused += next->ipc_handle == first->ipc_handle;
    auto view = client->Get(name);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    ASSERT_TRUE(client->CopyToHost(view.value(), back.data(), kBytes).ok());
    EXPECT_EQ(static_cast<uint64_t>(std::count(back.begin(), back.end(), '\0')), kBytes) << name;
    ASSERT_TRUE(client->Release(name).ok());
  }
  EXPECT_EQ(reused, 1) << "one of the two creates should have taken the deleted tensor's block";
  for (const char* name : {"w1", "w2"}) ASSERT_TRUE(client->Release(name).ok());
  // No more creates of the size: the stock goes back to the driver (2 s idle, then a Trim).
  size_t free_after = 0;
  EXPECT_TRUE(FreeMemoryComesBack(free_before, free_after))
      << "free before " << free_before << ", after " << free_after;
  EXPECT_TRUE(test::WaitFor([&] { return Heartbeat("ready_bytes") == "0"; }, 3000))
      << "ready_bytes " << Heartbeat("ready_bytes");
}

// A block made ahead is memory the server did not hold: the stock makes none that would leave
// less than a quarter of the device free.
TEST_F(GpuLifecycle, TheStockMakesNoBlockAheadIntoTheDevicesLastQuarter) {
  constexpr uint64_t kBytes = 1ull << 30;
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  // Held by this process: once the tensor is made, a quarter of the device and half a block
  // stay free, so a block more would cut into the quarter.
  const double reserve = 0.25 * static_cast<double>(total);
  ASSERT_GT(static_cast<double>(free), reserve + 2.0 * kBytes) << "the device is too full";
  size_t hog_bytes = free - static_cast<size_t>(reserve) - kBytes - kBytes / 2;
  void* hog = nullptr;
  ASSERT_EQ(cudaMalloc(&hog, hog_bytes), cudaSuccess);
  size_t before_create = 0;
  ASSERT_EQ(cudaMemGetInfo(&before_create, &total), cudaSuccess);
  CreateSpec spec = OnGpu0("q", kBytes);
  auto made = client->Create(spec);
  ASSERT_TRUE(made.ok()) << made.status().ToString() << ServeLog();
  // The refill is posted right behind the create on the server's worker: a block made ahead
  // would show within the second (and stay until the size is idle for 2 s).
  for (int i = 0; i < 20; ++i) {
    size_t now = 0;
    ASSERT_EQ(cudaMemGetInfo(&now, &total), cudaSuccess);
    ASSERT_GT(now + kBytes + kBytes / 2, before_create)
        << "a block was made ahead into the reserve: free " << now << " of " << total;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Heartbeat("ready_bytes"), "0");
  ASSERT_TRUE(client->Release("q").ok());
  EXPECT_EQ(cudaFree(hog), cudaSuccess);
}

// A size no longer created is not stocked again while a tensor of it lives on: a 1 GiB tensor
// kept alive, then small creates for 3 s, and no 1 GiB block may be made ahead for it meanwhile.
TEST_F(GpuLifecycle, ASizeNoLongerCreatedIsNotStockedWhileItsTensorLivesOn) {
  constexpr uint64_t kBytes = 1ull << 30;
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  CreateSpec spec = OnGpu0("kept", kBytes);
  ASSERT_TRUE(client->Create(spec).ok()) << ServeLog();
  // The block made ahead for the size, then given back once the size is idle.
  ASSERT_TRUE(
      test::WaitFor([&] { return std::stoull("0" + Heartbeat("ready_bytes")) >= kBytes; }, 5000))
      << "ready_bytes " << Heartbeat("ready_bytes");
  ASSERT_TRUE(test::WaitFor([&] { return Heartbeat("ready_bytes") == "0"; }, 10000))
      << "ready_bytes " << Heartbeat("ready_bytes");
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  spec.shape = {1 << 20};
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
    spec.name = "small" + std::to_string(i);
    ASSERT_TRUE(client->Create(spec).ok()) << ServeLog();
    ASSERT_TRUE(client->Release(spec.name).ok());
    size_t free_now = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_now, &total), cudaSuccess);
    ASSERT_GT(free_now + (512ull << 20), free_before)
        << "a 1 GiB block was made for a size no longer created, after " << i << " creates";
  }
  ASSERT_TRUE(client->Release("kept").ok());
}

TEST_F(GpuLifecycle, ATensorPastItsAllocationIsRefused) {
  ExpectATensorPastItsAllocationIsRefused();
}

TEST_F(GpuLifecycle, BatchesAndSetsKeepEveryByte) { ExpectBatchesAndSetsKeepEveryByte(); }

TEST_F(GpuLifecycle, AWaitingConsumerReadsEveryByteOfAFilledTensor) {
  ExpectAWaitingConsumerReadsEveryByte();
}

// Small tensors are carved from one slab (mcd-serve --slab-max): one handle, their own offsets.
// Each keeps its own bytes, a process closing one keeps the others mapped (the driver counts the
// opens of the slab's handle), and another process reads them through the same handle.
TEST_F(GpuLifecycle, SmallTensorsShareASlabAndKeepTheirOwnBytes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  constexpr size_t kBytes = (1 << 20) - 4;  // not a whole class: the tail of the block is unused
  const char* names[] = {"a", "b", "c"};
  std::vector<TensorRecord> records;
  std::vector<TensorView> views;
  for (int i = 0; i < 3; ++i) {
    CreateSpec spec;
    spec.name = names[i];
    spec.dtype = DType::kU8;
    spec.shape = {static_cast<int64_t>(kBytes)};
    spec.device = 0;
    auto created = client->Create(spec);
    ASSERT_TRUE(created.ok()) << created.status().ToString() << ServeLog();
    records.push_back(created.value());
    auto view = client->Get(names[i]);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    std::vector<uint8_t> fill(kBytes, static_cast<uint8_t>(0x11 * (i + 1)));
    ASSERT_TRUE(client->CopyFromHost(view.value(), fill.data(), kBytes).ok());
    views.push_back(view.value());
  }
  EXPECT_EQ(records[1].ipc_handle, records[0].ipc_handle);
  EXPECT_EQ(records[2].ipc_handle, records[0].ipc_handle);
  std::set<uint64_t> offsets;
  for (const auto& r : records) {
    EXPECT_EQ(r.offset % 512, 0u);
    offsets.insert(r.offset);
  }
  EXPECT_EQ(offsets.size(), 3u) << "two tensors at one offset";
  // One mapping of the slab in this process: each tensor at its offset from the same base.
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(static_cast<char*>(views[i].data) - static_cast<char*>(views[0].data),
              static_cast<ptrdiff_t>(records[i].offset) - static_cast<ptrdiff_t>(records[0].offset))
        << names[i];
  }
  // The heartbeat counts the slab, and the part of it that no tensor (or stocked block) holds;
  // both from one heartbeat.
  long long slab_bytes = 0, slab_free = 0;
  EXPECT_TRUE(test::WaitFor(
      [&] {
        auto both = redis_->Connect()->Command(
            {"HMGET", KeySpace().Server(node_), "slab_bytes", "slab_free_bytes"});
        if (!both.ok() || both->elements.size() != 2) return false;
        slab_bytes = std::atoll(both->elements[0].str.c_str());
        slab_free = std::atoll(both->elements[1].str.c_str());
        return slab_bytes >= (2 << 20);
      },
      5000))
      << "slab_bytes " << slab_bytes;
  EXPECT_GT(slab_free, 0);
  EXPECT_LE(slab_free, slab_bytes - 3 * (1 << 20)) << "three 1 MiB blocks are carved out";

  // "a" goes: its mapping is closed and its block freed. "b" and "c" are still mapped here.
  ASSERT_TRUE(client->Release("a").ok());
  ASSERT_TRUE(client->Release("a").ok());
  for (int i = 1; i < 3; ++i) {
    std::vector<uint8_t> back(kBytes);
    ASSERT_TRUE(client->CopyToHost(views[i], back.data(), kBytes).ok());
    EXPECT_EQ(static_cast<size_t>(
                  std::count(back.begin(), back.end(), static_cast<uint8_t>(0x11 * (i + 1)))),
              kBytes)
        << names[i];
  }
  // Another process, through the same handle and its offset: 0x33 = 51.
  auto printed = Tool("mcd-get", {"c", "--no-ref", "--print", "2"});
  EXPECT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_NE(printed.out.find("values:    51,51,..."), std::string::npos) << printed.out;

  // Larger than a slab's eighth: alone, at offset 0.
  CreateSpec big;
  big.name = "big";
  big.dtype = DType::kU8;
  big.shape = {64 << 20};
  big.device = 0;
  auto alone = client->Create(big);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(alone->offset, 0u);
  EXPECT_NE(alone->ipc_handle, records[0].ipc_handle);
  // "b" goes too: "c" is the last tensor of the slab open here, and the slab stays mapped for it.
  ASSERT_TRUE(client->Release("b").ok());
  ASSERT_TRUE(client->Release("b").ok());
  {
    std::vector<uint8_t> back(kBytes);
    ASSERT_TRUE(client->CopyToHost(views[2], back.data(), kBytes).ok());
    EXPECT_EQ(static_cast<size_t>(std::count(back.begin(), back.end(), uint8_t{0x33})), kBytes);
  }
  // The last tensor unmaps the slab; a tensor carved after that maps it again.
  for (const char* name : {"c", "c"}) ASSERT_TRUE(client->Release(name).ok()) << name;
  {
    CreateSpec spec;
    spec.name = "d";
    spec.dtype = DType::kU8;
    spec.shape = {static_cast<int64_t>(kBytes)};
    spec.device = 0;
    ASSERT_TRUE(client->Create(spec).ok());
    auto view = client->Get("d");
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    std::vector<uint8_t> fill(kBytes, 0x44), back(kBytes);
    ASSERT_TRUE(client->CopyFromHost(view.value(), fill.data(), kBytes).ok());
    ASSERT_TRUE(client->CopyToHost(view.value(), back.data(), kBytes).ok());
    EXPECT_EQ(back, fill);
  }
  // The gets' references and the creators'.
  for (const char* name : {"d", "d", "big"}) ASSERT_TRUE(client->Release(name).ok()) << name;
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "");
  // The stock's blocks and the empty slab kept are reported, then go back once unused.
  EXPECT_TRUE(test::WaitFor([&] { return std::atoll(Heartbeat("ready_bytes").c_str()) > 0; }, 5000))
      << "the heartbeat should report what is held ready";
  EXPECT_TRUE(test::WaitFor([&] { return Heartbeat("ready_bytes") == "0"; }, 10000))
      << "ready_bytes " << Heartbeat("ready_bytes");
  EXPECT_TRUE(test::WaitFor([&] { return Heartbeat("slab_bytes") == "0"; }, 3000))
      << "slab_bytes " << Heartbeat("slab_bytes")
      << ": no slab should outlive its tensors and the idle time";
  EXPECT_EQ(Heartbeat("slab_free_bytes"), "0");
}

// The server publishes a small allocation's handle (the heartbeat's ipc_primer) that a client
// opens during its first Get, to pay the driver's per-process IPC setup while Redis answers.
// The handle must be a live export of device 0, and a warmed-up process's first Get must map
// its tensor as if nothing had gone before it on the worker.
TEST_F(GpuLifecycle, AWarmedUpProcessOpensThePrimerDuringItsFirstGet) {
  std::string handle = DevicePrimer("ipc_primer");
  ASSERT_EQ(handle.size(), sizeof(cudaIpcMemHandle_t));

  ExpectAWarmedUpFirstGetMapsItsTensor();

  // The primer itself opens here (a process other than the server) and closes again.
  cudaIpcMemHandle_t raw{};
  std::memcpy(&raw, handle.data(), sizeof(raw));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* ptr = nullptr;
  ASSERT_EQ(cudaIpcOpenMemHandle(&ptr, raw, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  EXPECT_NE(ptr, nullptr);
  EXPECT_EQ(cudaIpcCloseMemHandle(ptr), cudaSuccess);
}

TEST_F(GpuLifecycle, CreatesWhoseCommitRedisRefusesGiveTheirMemoryBack) {
  // Each reply key is taken by a string, so Redis refuses each commit: nothing may be published
  // and each 256 MiB allocation must go back to the driver (through the ready stock).
  constexpr int kCreates = 8;
  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  auto conn = redis_->Connect();
  KeySpace keys = KeySpace();
  for (int i = 0; i < kCreates; ++i) {
    std::string req = "refused-" + std::to_string(i);
    ASSERT_TRUE(conn->Command({"SET", keys.Reply(req), "taken"}).ok());
    std::string cmd = R"({"op":"create","name":"r)" + std::to_string(i) +
                      R"(","dtype":"u8","shape":[268435456],"device":0,"req":")" + req + R"("})";
    ASSERT_TRUE(conn->Command({"LPUSH", keys.queue, cmd}).ok());
  }
  auto refused = [&] {
    std::string log = ServeLog();
    int n = 0;
    for (size_t at = log.find("got no reply"); at != std::string::npos;
         at = log.find("got no reply", at + 1))
      ++n;
    return n;
  };
  ASSERT_TRUE(test::WaitFor([&] { return refused() == kCreates; }, 20000)) << ServeLog();
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "");
  EXPECT_EQ(conn->Command({"LLEN", keys.Processing(node_)})->integer, 0);
  // 2 GiB would be missing had they leaked. Their blocks went to the ready stock, which gives
  // them back once no such create comes (2 s); allow for the server's own context.
  EXPECT_TRUE(FreeMemoryComesBack(free_before, free_after))
      << "free before " << free_before << ", after " << free_after;
  EXPECT_EQ(Tool("mcd-create", {"ok", "--dtype", "u8", "--shape", "268435456", "--device", "0"})
                .exit_code,
            0)
      << ServeLog();
}

}  // namespace
}  // namespace mcd
