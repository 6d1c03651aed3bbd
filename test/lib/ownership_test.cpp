// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The typed ownership of the public headers: UniqueFd closes exactly once and hands ownership
// on; IpcKind has one name per kind and reads an unknown one as kUnknown.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <utility>

#include "memcuda/protocol.h"
#include "memcuda/unique_fd.h"

namespace mcd {
namespace {

bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

TEST(UniqueFd, ClosesWhenItGoesAndMovesOwnership) {
  int raw = -1;
  {
    UniqueFd fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    raw = fd.get();
    UniqueFd moved = std::move(fd);
    EXPECT_FALSE(fd.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
    EXPECT_EQ(moved.get(), raw);
    EXPECT_TRUE(IsOpen(raw));
    UniqueFd assigned;
    assigned = std::move(moved);
    EXPECT_EQ(assigned.get(), raw);
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFd, ReleaseGivesUpOwnershipAndResetClosesTheOldOne) {
  UniqueFd fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  int first = fd.get();
  fd.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));  // opened before the old one is closed
  EXPECT_NE(fd.get(), first);
  EXPECT_FALSE(IsOpen(first));
  int second = fd.get();
  int released = fd.release();
  EXPECT_EQ(released, second);
  EXPECT_FALSE(fd.valid());
  EXPECT_TRUE(IsOpen(released));
  close(released);
  UniqueFd none;
  none.reset();  // closing nothing is fine
  EXPECT_FALSE(static_cast<bool>(none));
}

TEST(IpcKind, EachKindHasOneNameAndUnknownNamesReadAsUnknown) {
  for (IpcKind kind : {IpcKind::kHostShm, IpcKind::kCudaIpc, IpcKind::kCudaMempool}) {
    EXPECT_EQ(ParseIpcKind(IpcKindName(kind)), kind) << IpcKindName(kind);
  }
  EXPECT_STREQ(IpcKindName(IpcKind::kCudaIpc), "cuda_ipc");
  EXPECT_EQ(ParseIpcKind("cuda_vmm"), IpcKind::kUnknown);
  EXPECT_EQ(ParseIpcKind(""), IpcKind::kUnknown);
  // A record of an unknown kind still reads (mcd-ls shows it) and names its kind "?".
  TensorRecord r;
  r.name = "t";
  r.dtype = DType::kU8;
  r.shape = {4};
  r.bytes = 4;
  r.state = "ready";
  r.ipc_kind = IpcKind::kCudaMempool;
  std::map<std::string, std::string> fields;
  for (auto& [k, v] : HashFields(r)) fields[k] = v;
  EXPECT_EQ(fields["ipc_kind"], "cuda_mempool");
  fields["ipc_kind"] = "cuda_vmm";
  auto back = RecordFromHash("t", fields);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ipc_kind, IpcKind::kUnknown);
  EXPECT_NE(RecordToJson(back.value()).find(R"("ipc_kind":"?")"), std::string::npos);
}

}  // namespace
}  // namespace mcd
