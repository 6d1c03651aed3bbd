// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The stream-ordered IPC pool (mcd-serve --allocator pool) on a real GPU. Skipped without one.
#include <cuda_runtime.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "common/process.h"
#include "gpu_fixture.h"
#include "ipc/fd_passing.h"

namespace mcd {
namespace {

// From here on pidfd_getfd fails with EPERM in this process and what it executes, as under a
// stricter Yama ptrace_scope or a container's seccomp profile. For a child about to exec.
void DenyDescriptorCopies() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    _exit(126);
  }
}

// Imports the pool whose descriptor `fd` is into this process, on device 0.
cudaError_t ImportPoolHere(const UniqueFd& fd, cudaMemPool_t* pool) {
  cudaError_t err = cudaSetDevice(0);
  if (err == cudaSuccess) {
    err = cudaMemPoolImportFromShareableHandle(
        pool, reinterpret_cast<void*>(static_cast<uintptr_t>(fd.get())),
        cudaMemHandleTypePosixFileDescriptor, 0);
  }
  return err;
}

class PoolTest : public test::GpuServerTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--allocator", "pool", "--pool-max", "256MiB"};
  }
};

TEST_F(PoolTest, ImportReadAndWriteInOtherProcesses) {
  EXPECT_NE(Heartbeat("allocator").find("0:cuda_mempool"), std::string::npos);
  EXPECT_FALSE(Heartbeat("pool_socket").empty());
  std::string in = WriteNpy(4096);
  auto created = Tool("mcd-create", {"p", "--from", in, "--device", "0", "--json"});
  ASSERT_EQ(created.exit_code, 0) << created.err << ServeLog();
  EXPECT_EQ(nlohmann::json::parse(created.out)["ipc_kind"], "cuda_mempool");
  std::string out = dir_.path() + "/out.npy";
  auto got = Tool("mcd-get", {"p", "--no-ref", "-o", out});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(test::ReadFile(out), test::ReadFile(in));
  auto scaled = Tool("mcd-example-scale", {"p", "2"});
  ASSERT_EQ(scaled.exit_code, 0) << scaled.err;
  auto printed = Tool("mcd-get", {"p", "--no-ref", "--print", "3"});
  EXPECT_NE(printed.out.find("values:    3,4,5,..."), std::string::npos) << printed.out;
  ASSERT_EQ(Tool("mcd-rm", {"p"}).exit_code, 0);
}

// A second server for the node, given the live one's socket as --pool-socket, is refused before
// it binds the path: the live server's socket stays, and fresh processes import through it.
TEST_F(PoolTest, ASecondServerWithTheSamePoolSocketLeavesTheLiveOneAlone) {
  std::string socket = Heartbeat("pool_socket");
  ASSERT_FALSE(socket.empty());
  auto second = test::Run({test::ToolPath("mcd-serve"), "--devices", "0", "--node", node_,
                           "--allocator", "pool", "--pool-socket", socket},
                          Env(), 60);
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_NE(second.err.find("already serves node"), std::string::npos) << second.err;
  EXPECT_EQ(access(socket.c_str(), F_OK), 0) << "the live server's pool socket is gone";
  std::string in = WriteNpy(4096);
  ASSERT_EQ(Tool("mcd-create", {"p", "--from", in, "--device", "0"}).exit_code, 0) << ServeLog();
  std::string out = dir_.path() + "/out.npy";
  auto got = Tool("mcd-get", {"p", "--no-ref", "-o", out});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(test::ReadFile(out), test::ReadFile(in));
  ASSERT_EQ(Tool("mcd-rm", {"p"}).exit_code, 0);
}

TEST_F(PoolTest, TenThousandCyclesDoNotGrowThePool) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  CreateSpec live;
  live.dtype = DType::kF32;
  live.shape = {262144};  // 1 MiB
  live.device = 0;
  for (const char* name : {"live0", "live1", "live2"}) {
    live.name = name;
    ASSERT_TRUE(client->Create(live).ok());
  }
  ASSERT_TRUE(test::WaitFor(
      [&] { return Heartbeat("pool_used") != "0" && !Heartbeat("pool_used").empty(); }, 5000));
  uint64_t used_live = std::stoull(Heartbeat("pool_used"));
  EXPECT_GE(used_live, 3u << 20);
  CreateSpec spec = live;
  spec.name = "cycle";
  for (int i = 0; i < 10000; ++i) {
    auto created = client->Create(spec);
    ASSERT_TRUE(created.ok()) << i << ": " << created.status().ToString();
    auto released = client->Release("cycle");
    ASSERT_TRUE(released.ok()) << i << ": " << released.status().ToString();
  }
  // Let the heartbeat refresh its reading, then compare with the live set alone.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(std::stoull(Heartbeat("pool_used")), used_live);
}

TEST_F(PoolTest, AFreedBlockIsHandedOutAgainZeroed) { ExpectAFreedBlockComesBackZeroed(); }
TEST_F(PoolTest, ATensorPastItsAllocationIsRefused) { ExpectATensorPastItsAllocationIsRefused(); }

TEST_F(PoolTest, BatchesAndSetsKeepEveryByte) { ExpectBatchesAndSetsKeepEveryByte(); }

TEST_F(PoolTest, AWaitingConsumerReadsEveryByteOfAFilledTensor) {
  ExpectAWaitingConsumerReadsEveryByte();
}

// 32 MiB blocks are stocked (sizes up to half of --ready-max are).
class PoolWithStockTest : public test::GpuServerTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--allocator", "pool", "--pool-max", "256MiB", "--ready-max", "128MiB"};
  }
};

TEST_F(PoolWithStockTest, ACreateThatRunsOutOfMemoryGetsTheStockBackFirst) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  CreateSpec spec;
  spec.dtype = DType::kU8;
  spec.shape = {32 << 20};
  spec.device = 0;
  // Two creates and two deletes of 32 MiB leave three blocks ready (one refilled after each
  // create, the one the second create took back, and the two deleted): 96 MiB of the 256.
  for (const char* name : {"a", "b"}) {
    spec.name = name;
    ASSERT_TRUE(client->Create(spec).ok()) << ServeLog();
  }
  ASSERT_TRUE(client->Release("a").ok());
  ASSERT_TRUE(client->Release("b").ok());
  // 176 MiB fit only if the stock is given back: 256 - 96 = 160.
  spec.name = "big";
  spec.shape = {176 << 20};
  auto big = client->Create(spec);
  ASSERT_TRUE(big.ok()) << big.status().ToString() << ServeLog();
  EXPECT_NE(ServeLog().find("giving back the 100663296 bytes held ready"), std::string::npos)
      << ServeLog();
  ASSERT_TRUE(client->Release("big").ok());
}

// A pool pointer above 5 GiB would crash every process that imports it (the CUDA driver's
// cudaMemPoolImportPointer): the create is refused with a clear error, whatever the pool's size,
// and the server goes on serving.
TEST_F(PoolTest, ATensorAboveThePoolImportLimitIsRefused) {
  auto big = Tool("mcd-create", {"big", "--dtype", "u8", "--shape", "5370806272", "--device",
                                 "0"});  // 5 GiB + 2 MiB
  EXPECT_EQ(big.exit_code, 64) << big.err;
  EXPECT_NE(big.err.find("too_large"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("--allocator cuda"), std::string::npos) << big.err;
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "");
  ASSERT_EQ(
      Tool("mcd-create", {"small", "--dtype", "u8", "--shape", "4096", "--device", "0"}).exit_code,
      0);
  EXPECT_EQ(Tool("mcd-get", {"small", "--no-ref", "--print", "2"}).exit_code, 0);
}

TEST_F(PoolTest, OutOfMemoryAtThePoolMaximum) {
  ASSERT_EQ(
      Tool("mcd-create", {"a", "--dtype", "u8", "--shape", "201326592", "--device", "0"}).exit_code,
      0);  // 192 MiB
  auto oom = Tool("mcd-create",
                  {"b", "--dtype", "u8", "--shape", "134217728", "--device", "0"});  // 128 MiB
  EXPECT_EQ(oom.exit_code, 69) << oom.err;
  EXPECT_NE(oom.err.find("out_of_memory"), std::string::npos) << oom.err;
  EXPECT_NE(oom.err.find("requested 134217728 bytes"), std::string::npos) << oom.err;
  EXPECT_NE(oom.err.find("pool maximum 268435456"), std::string::npos) << oom.err;
  EXPECT_EQ(Tool("mcd-get", {"a", "--no-ref", "--print", "2"}).exit_code, 0);
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "a\n");
}

// After Warmup, the first Get imports the pool on the worker while its reference script is in
// flight, and with it the small pointer the server publishes for this (the heartbeat's
// pool_primer). A pool server has no cuda_ipc device, so no ipc_primer.
TEST_F(PoolTest, AWarmedUpProcessImportsThePoolAndItsPrimerDuringItsFirstGet) {
  EXPECT_EQ(Heartbeat("ipc_primer"), "");
  std::string data = DevicePrimer("pool_primer");
  ASSERT_EQ(data.size(), sizeof(cudaMemPoolPtrExportData));

  ExpectAWarmedUpFirstGetMapsItsTensor();

  // The primer is a live pointer of the pool: it imports here, a process other than the server.
  auto fd = FetchFd(Heartbeat("pool_socket"), 0, 2000, 0);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  cudaMemPool_t pool = nullptr;
  ASSERT_EQ(ImportPoolHere(fd.value(), &pool), cudaSuccess);
  cudaMemPoolPtrExportData raw{};
  std::memcpy(&raw, data.data(), sizeof(raw));
  void* ptr = nullptr;
  ASSERT_EQ(cudaMemPoolImportPointer(&ptr, pool, &raw), cudaSuccess);
  EXPECT_NE(ptr, nullptr);
  EXPECT_EQ(cudaFree(ptr), cudaSuccess);
  // The heartbeat's pool_used counts tensors only: back to 0 without the one tensor made above.
  EXPECT_TRUE(test::WaitFor([&] { return Heartbeat("pool_used") == "0"; }, 5000))
      << "pool_used " << Heartbeat("pool_used");
}

// A process of the server's user copies the pool's descriptor out of the server (the heartbeat's
// pid, pid_start and pool_fd) and needs no pool socket; one that may not copy it (pidfd_getfd
// refused) asks the socket, and without the socket it gets a clear error.
TEST_F(PoolTest, TheServersUserCopiesThePoolDescriptorAndOthersAskThePoolSocket) {
  int64_t pid = std::atoll(Heartbeat("pid").c_str());
  EXPECT_EQ(pid, server_->pid());
  ProcessIdentity server;
  server.start_time = std::strtoull(Heartbeat("pid_start").c_str(), nullptr, 10);
  EXPECT_EQ(server.start_time, ProcessStartTime(pid));
  server.pidfd_ino = std::strtoull(Heartbeat("pid_ino").c_str(), nullptr, 10);
  EXPECT_EQ(server.pidfd_ino, PidfdInode(pid));  // 0 and "" without pidfs
  std::string pool_fd = Heartbeat("pool_fd");
  ASSERT_EQ(pool_fd.rfind("0:", 0), 0u) << pool_fd;
  auto pinned = PinnedProcess::Open(pid, server);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  auto fd = pinned.value()->CopyFd(std::atoi(pool_fd.c_str() + 2));
  if (fd.status().code() == ErrorCode::kPermissionDenied) {
    GTEST_SKIP() << "this machine forbids pidfd_getfd: " << fd.status().ToString();
  }
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  cudaMemPool_t pool = nullptr;
  cudaError_t imported = ImportPoolHere(fd.value(), &pool);
  EXPECT_EQ(imported, cudaSuccess) << cudaGetErrorString(imported);

  std::string in = WriteNpy(4096);
  ASSERT_EQ(Tool("mcd-create", {"p", "--from", in, "--device", "0"}).exit_code, 0) << ServeLog();
  std::string out = dir_.path() + "/out.npy";
  auto without_copy = [&] {
    return test::Run({test::ToolPath("mcd-get"), "p", "--no-ref", "-o", out, "--node", node_},
                     Env(), 60, DenyDescriptorCopies);
  };
  auto asked = without_copy();
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  EXPECT_EQ(test::ReadFile(out), test::ReadFile(in));

  std::string socket = Heartbeat("pool_socket");
  ASSERT_EQ(unlink(socket.c_str()), 0) << socket;
  std::remove(out.c_str());
  auto copied = Tool("mcd-get", {"p", "--no-ref", "-o", out});
  ASSERT_EQ(copied.exit_code, 0) << copied.err;
  EXPECT_EQ(test::ReadFile(out), test::ReadFile(in));
  auto refused = without_copy();
  EXPECT_EQ(refused.exit_code, 69) << refused.err;
  EXPECT_NE(refused.err.find("pool socket"), std::string::npos) << refused.err;
  ASSERT_EQ(Tool("mcd-rm", {"p"}).exit_code, 0);
}

TEST_F(PoolTest, ANewServerInstanceIsImportedAfresh) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  CreateSpec spec;
  spec.name = "first";
  spec.dtype = DType::kI32;
  spec.shape = {1024};
  spec.device = 0;
  ASSERT_TRUE(client->Create(spec).ok());
  auto view = client->Get("first");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  ASSERT_TRUE(client->Release("first").ok());
  std::string first_instance = Heartbeat("instance");
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  StartServer();
  ASSERT_NE(Heartbeat("instance"), first_instance);
  spec.name = "second";
  ASSERT_TRUE(client->Create(spec).ok());
  auto second = client->Get("second");  // same process: must import the new instance's pool
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  std::vector<int32_t> host(1024, -1);
  ASSERT_TRUE(client->CopyToHost(second.value(), host.data(), host.size() * 4).ok());
  EXPECT_EQ(host, std::vector<int32_t>(1024, 0));  // zeroed
  ASSERT_TRUE(client->Release("second").ok());
}

}  // namespace
}  // namespace mcd
