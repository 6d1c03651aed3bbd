// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// MappingRegistry on host memory (host_shm, no GPU needed): a tensor opened twice is mapped once
// and unmapped only when its last open is closed; tensors of one object at other offsets or
// sizes are mappings of their own; what the registry maps is the tensor's own bytes. Mappings
// are counted in /proc/self/maps, the kernel's own account.
#include "client/mapping_registry.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "alloc/allocator.h"
#include "test_support.h"

namespace mcd {
namespace {

class MappingRegistryTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& name : objects_) UnlinkHostShm(name);
  }

  // A ready host tensor of `bytes` bytes at `offset` in a new object of `offset + bytes` bytes
  // that holds `data` there, written through a descriptor (no mapping of this process's).
  TensorRecord Tensor(const std::string& name, const std::string& data, uint64_t offset = 0) {
    DeviceContext host(kHostDevice);
    auto allocated = allocator_->Allocate(host, offset + data.size(), true);
    EXPECT_TRUE(allocated.ok()) << allocated.status().ToString();
    objects_.push_back(allocated->ipc_handle);
    WriteObject(allocated->ipc_handle, data, offset);
    return Record(name, allocated->ipc_handle, data.size(), offset);
  }
  static TensorRecord Record(const std::string& name, const std::string& object, uint64_t bytes,
                             uint64_t offset) {
    TensorRecord r;
    r.name = name;
    r.dtype = DType::kU8;
    r.shape = {static_cast<int64_t>(bytes)};
    r.device = kHostDevice;
    r.bytes = bytes;
    r.ipc_kind = IpcKind::kHostShm;
    r.ipc_handle = object;
    r.offset = offset;
    r.refcount = 1;
    r.state = "ready";
    r.owner = "instance-1";
    return r;
  }
  static void WriteObject(const std::string& object, const std::string& data, uint64_t offset) {
    int fd = shm_open(object.c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset)),
              static_cast<ssize_t>(data.size()));
    close(fd);
  }
  static std::string ReadObject(const std::string& object, uint64_t bytes, uint64_t offset) {
    std::string out(bytes, '\0');
    int fd = shm_open(object.c_str(), O_RDONLY, 0);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(pread(fd, out.data(), bytes, static_cast<off_t>(offset)),
              static_cast<ssize_t>(bytes));
    close(fd);
    return out;
  }
  // How many mappings of `object` this process has, as the kernel lists them.
  static int Mappings(const std::string& object) {
    std::ifstream maps("/proc/self/maps");
    std::string line, path = "/dev/shm" + object;
    int n = 0;
    while (std::getline(maps, line)) {
      size_t at = line.find(path);
      if (at != std::string::npos &&
          (at + path.size() == line.size() || line[at + path.size()] == ' '))
        ++n;
    }
    return n;
  }
  static MappingRegistry::SourceOf NoPool() {
    return [](const std::string&, int) -> Result<PoolSource> {
      ADD_FAILURE() << "a host tensor needs no pool";
      return Status(ErrorCode::kInternal, "no pool");
    };
  }
  static std::string Bytes(const void* ptr, size_t n) {
    return std::string(static_cast<const char*>(ptr), n);
  }
  // "same", or where `got` first differs from `want` (rather than two dumps of random bytes).
  static std::string Compare(const std::string& got, const std::string& want) {
    if (got == want) return "same";
    size_t at = 0;
    while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
    return "differs at byte " + std::to_string(at) + " of " + std::to_string(want.size());
  }

  MappingRegistry& registry_ = MappingRegistry::Get();
  std::unique_ptr<Allocator> allocator_ =
      MakeHostShmAllocator("/mcd-mrtest-" + std::to_string(getpid()) + "-");
  std::vector<std::string> objects_;
};

TEST_F(MappingRegistryTest, TheSameTensorOpenedTwiceIsMappedOnceWithItsBytes) {
  const std::string data = test::RandomBytes(3 * 4096 + 17, 1);
  TensorRecord r = Tensor("twice", data);
  ASSERT_EQ(Mappings(r.ipc_handle), 0);
  auto first = registry_.Open(r, NoPool());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = registry_.Open(r, NoPool());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(first.value(), second.value());
  EXPECT_EQ(Mappings(r.ipc_handle), 1);
  EXPECT_EQ(Compare(Bytes(first.value(), data.size()), data), "same")
      << "the mapping shows other bytes";
  // And it is the object's own memory: what is written through it is in the object.
  const std::string written = test::RandomBytes(data.size(), 2);
  std::memcpy(first.value(), written.data(), written.size());
  EXPECT_EQ(Compare(ReadObject(r.ipc_handle, written.size(), 0), written), "same");
  ASSERT_TRUE(registry_.Close(r).ok());
  ASSERT_TRUE(registry_.Close(r).ok());
}

TEST_F(MappingRegistryTest, EachOpenIsCountedAndTheLastCloseUnmaps) {
  TensorRecord r = Tensor("counted", test::RandomBytes(4096, 3));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(registry_.Open(r, NoPool()).ok());
  ASSERT_EQ(Mappings(r.ipc_handle), 1);
  ASSERT_TRUE(registry_.Close(r).ok());
  ASSERT_TRUE(registry_.Close(r).ok());
  EXPECT_EQ(Mappings(r.ipc_handle), 1) << "unmapped while one open was left";
  ASSERT_TRUE(registry_.FindByName("counted").has_value());
  ASSERT_TRUE(registry_.Close(r).ok());
  EXPECT_EQ(Mappings(r.ipc_handle), 0) << "still mapped after the last close";
  EXPECT_FALSE(registry_.FindByName("counted").has_value());
  EXPECT_TRUE(registry_.Close(r).ok()) << "closing what is not open is fine";
  // Opened again after that: a fresh mapping, with the bytes as they are now.
  const std::string now = test::RandomBytes(4096, 4);
  WriteObject(r.ipc_handle, now, 0);
  auto again = registry_.Open(r, NoPool());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Mappings(r.ipc_handle), 1);
  EXPECT_EQ(Compare(Bytes(again.value(), now.size()), now), "same");
  ASSERT_TRUE(registry_.Close(r).ok());
  EXPECT_EQ(Mappings(r.ipc_handle), 0);
}

// A host tensor maps only its own bytes: another offset or size of the same object is another
// mapping, each with its own count.
TEST_F(MappingRegistryTest, TensorsAtOtherOffsetsOfOneObjectAreMappingsOfTheirOwn) {
  const std::string data = test::RandomBytes(3 * 4096, 5);
  TensorRecord whole = Tensor("whole", data);
  TensorRecord head = Record("head", whole.ipc_handle, 4096, 0);
  TensorRecord tail = Record("tail", whole.ipc_handle, 4096, 4096);
  auto a = registry_.Open(whole, NoPool());
  auto h = registry_.Open(head, NoPool());
  auto t = registry_.Open(tail, NoPool());
  ASSERT_TRUE(a.ok() && h.ok() && t.ok());
  EXPECT_EQ(Mappings(whole.ipc_handle), 3);
  EXPECT_EQ(Compare(Bytes(a.value(), data.size()), data), "same");
  EXPECT_EQ(Compare(Bytes(h.value(), 4096), data.substr(0, 4096)), "same")
      << "the head maps other bytes";
  EXPECT_EQ(Compare(Bytes(t.value(), 4096), data.substr(4096, 4096)), "same")
      << "the tail maps other bytes";
  ASSERT_TRUE(registry_.Close(whole).ok());
  ASSERT_TRUE(registry_.Close(head).ok());
  EXPECT_EQ(Mappings(whole.ipc_handle), 1);
  EXPECT_EQ(Compare(Bytes(t.value(), 4096), data.substr(4096, 4096)), "same");
  ASSERT_TRUE(registry_.Close(tail).ok());
  EXPECT_EQ(Mappings(whole.ipc_handle), 0);
}

TEST_F(MappingRegistryTest, AnOpenThatFailsLeavesNothingOpen) {
  TensorRecord r = Tensor("small", test::RandomBytes(4096, 6));
  TensorRecord bigger = r;
  bigger.bytes = 8192;  // larger than its object
  bigger.shape = {8192};
  auto opened = registry_.Open(bigger, NoPool());
  EXPECT_FALSE(opened.ok());
  EXPECT_EQ(Mappings(r.ipc_handle), 0);
  EXPECT_FALSE(registry_.FindByName("small").has_value());
}

}  // namespace
}  // namespace mcd
