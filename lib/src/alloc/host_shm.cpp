// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// host_shm: one POSIX shared-memory object per tensor, so the whole lifecycle runs on machines
// without a GPU. The object name goes into ipc_handle; it is unlinked at refcount 0.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "alloc/allocator.h"
#include "common/process.h"
#include "common/trust.h"
#include "memcuda/unique_fd.h"

namespace mcd {
namespace {

std::string Errno(const std::string& call, int err) { return call + ": " + std::strerror(err); }

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

class HostShmAllocator final : public Allocator {
 public:
  HostShmAllocator(std::string name_prefix, gid_t group)
      : prefix_(std::move(name_prefix)), group_(group) {}
  IpcKind kind() const noexcept override { return IpcKind::kHostShm; }

  Result<Allocation> Allocate(DeviceContext&, uint64_t bytes, bool /*zero*/) override {
    // A new object is all zero pages, so "init: zero" costs nothing here. Check the space first:
    // ftruncate of a sparse object succeeds and the first touch past the limit would SIGBUS.
    ShmSpace space = ReadShmSpace();
    if (space.total > 0 && bytes > space.available) {
      return Status(ErrorCode::kOutOfMemory,
                    "host shared memory: requested " + std::to_string(bytes) + " bytes, " +
                        std::to_string(space.available) + " available in /dev/shm");
    }
    // Names nobody can guess ahead, tried again when taken: another local user who made the
    // names a server will use would otherwise make its creates fail.
    std::string name;
    UniqueFd fd;
    for (int attempt = 0; attempt < 8 && !fd; ++attempt) {
      MCD_ASSIGN_OR_RETURN(std::string suffix, RandomHex(8));
      name = prefix_ + std::to_string(seq_.fetch_add(1) + 1) + "-" + suffix;
      fd = UniqueFd(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600));
      if (!fd && errno != EEXIST) break;
    }
    if (!fd) return Status(ErrorCode::kIoError, Errno("shm_open(" + name + ")", errno));
    // For the group's members: the group set on the object itself, and its mode set after the
    // open, which the umask (0077 under systemd's UMask=) would otherwise narrow.
    // No fchown where the object has the group already (made by a process of that group, as
    // the service is): its sandbox may deny the call itself.
    struct stat st {};
    bool has_group = fstat(fd.get(), &st) == 0 && st.st_gid == group_;
    if (group_ != static_cast<gid_t>(-1) &&
        ((!has_group && fchown(fd.get(), static_cast<uid_t>(-1), group_) != 0) ||
         fchmod(fd.get(), 0660) != 0)) {
      int err = errno;
      shm_unlink(name.c_str());
      return Status(ErrorCode::kIoError, Errno("giving " + name + " to the pool group", err));
    }
    if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
      int err = errno;
      shm_unlink(name.c_str());
      return Status(err == ENOSPC || err == EFBIG ? ErrorCode::kOutOfMemory : ErrorCode::kIoError,
                    Errno("ftruncate(" + name + ")", err));
    }
    Allocation a;
    a.bytes = bytes;
    a.ipc_kind = kind();
    a.ipc_handle = name;
    return a;
  }

  Status Free(DeviceContext&, const Allocation& allocation) override {
    if (shm_unlink(allocation.ipc_handle.c_str()) != 0 && errno != ENOENT) {
      return Status(ErrorCode::kIoError, Errno("shm_unlink(" + allocation.ipc_handle + ")", errno));
    }
    return Status::Ok();
  }

 private:
  std::string prefix_;
  gid_t group_;  // -1: none
  std::atomic<uint64_t> seq_{0};
};

}  // namespace

std::unique_ptr<Allocator> MakeHostShmAllocator(std::string name_prefix, gid_t group) {
  return std::make_unique<HostShmAllocator>(std::move(name_prefix), group);
}

ShmSpace ReadShmSpace() {
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0) return {};
  return {static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize,
          static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize};
}

Status FillHostShm(const std::string& shm_name, uint64_t bytes) {
  UniqueFd fd(shm_open(shm_name.c_str(), O_RDWR, 0));
  if (!fd) return Status(ErrorCode::kIoError, Errno("shm_open(" + shm_name + ")", errno));
  if (fallocate(fd.get(), 0, 0, static_cast<off_t>(bytes)) == 0) return Status::Ok();
  int err = errno;
  if (err == EOPNOTSUPP || err == ENOSYS) return Status::Ok();
  return Status(err == ENOSPC ? ErrorCode::kOutOfMemory : ErrorCode::kIoError,
                Errno("fallocate(" + shm_name + ")", err));
}

void UnlinkHostShm(const std::string& shm_name) { shm_unlink(shm_name.c_str()); }

bool HostShmIsOwn(const std::string& shm_name) {
  struct stat st {};
  return lstat(("/dev/shm" + shm_name).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         st.st_uid == geteuid();
}

int RemoveHostShmObjects(const std::string& name_prefix) {
  // Linux keeps POSIX shm objects as files in /dev/shm, named without the leading '/'.
  std::string file_prefix = name_prefix.substr(name_prefix.rfind('/') + 1);
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    std::string file = entry->d_name;
    if (file.rfind(file_prefix, 0) != 0 || !HostShmIsOwn("/" + file)) continue;
    if (shm_unlink(("/" + file).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

Result<void*> OpenHostShm(const std::string& name, uint64_t bytes, uint64_t offset) {
  UniqueFd fd(shm_open(name.c_str(), O_RDWR, 0));
  if (!fd) {
    return Status(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIoError,
                  Errno("shm_open(" + name + ")", errno));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0)
    return Status(ErrorCode::kIoError, Errno("fstat(" + name + ")", errno));
  // A hash names the object, and anyone with Redis credentials can write a hash: what this
  // process then writes must not land in another user's object.
  if (st.st_uid != geteuid())
    MCD_RETURN_IF_ERROR(CheckOwner(st.st_uid, "shared-memory object " + name));
  // Overflow-safe: offset and bytes come from a hash (ValidateRecord bounds them too).
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (bytes == 0 || offset > size || bytes > size - offset) {
    return Status(ErrorCode::kUnexpectedReply,
                  "shared-memory object " + name + " is smaller than the tensor it should hold");
  }
  // Only the pages the tensor lies in: the members of a tensor set share one object, and a
  // process that opens them all maps each member's own bytes, not the set up to it.
  uint64_t lead = offset % PageSize();
  void* base = mmap(nullptr, lead + bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(),
                    static_cast<off_t>(offset - lead));
  int err = errno;
  if (base == MAP_FAILED) return Status(ErrorCode::kIoError, Errno("mmap(" + name + ")", err));
  return static_cast<void*>(static_cast<char*>(base) + lead);
}

// glibc before 2.35 lacks their names; the kernel has them from 5.14 (EINVAL before).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

Status PopulateHost(void* ptr, uint64_t bytes, bool for_write) {
  uintptr_t page = PageSize();
  uintptr_t start = reinterpret_cast<uintptr_t>(ptr) / page * page;
  uintptr_t end = reinterpret_cast<uintptr_t>(ptr) + bytes;
  if (madvise(reinterpret_cast<void*>(start), end - start,
              for_write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0) {
    return Status::Ok();
  }
  int err = errno;  // before the message's strings are made
  if (err == EINVAL) return Status::Ok();
  return Status(
      ErrorCode::kOutOfMemory,
      Errno("host shared memory: " + std::to_string(bytes) + " bytes cannot be had", err));
}

Status CloseHostShm(void* ptr, uint64_t bytes, uint64_t offset) {
  uint64_t lead = offset % PageSize();
  void* base = static_cast<char*>(ptr) - lead;
  if (munmap(base, lead + bytes) != 0) return Status(ErrorCode::kIoError, Errno("munmap", errno));
  return Status::Ok();
}

}  // namespace mcd
