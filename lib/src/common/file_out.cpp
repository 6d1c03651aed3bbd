// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/file_out.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

namespace mcd {

namespace {

Status IoError(const std::string& what, const std::string& path, int err) {
  return Status(ErrorCode::kIoError, what + " " + path + ": " + std::strerror(err));
}

// write(2) until all of `data` is out: a write may take only part of it. False with errno set.
bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Writes the contents to `fd` and syncs them to the disk, naming `path` in an error.
Status WriteAndSync(int fd, const FileWriter& write, const std::string& path) {
  MCD_RETURN_IF_ERROR(write(fd));
  if (fsync(fd) != 0) return IoError("cannot sync", path, errno);
  return Status::Ok();
}

// A pipe, a terminal or a device is written where it is: a rename would put a plain file in its
// place (a FIFO's reader would wait for ever, a /dev/null replaced would keep what it is given).
// Such a target has no "whole or not at all": its reader takes the bytes as they come.
Status WriteInPlace(const std::string& path, const FileWriter& write) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open", path, errno);
  Status written = write(fd);
  // A pipe or a character device has nothing to sync (EINVAL); a block device has.
  if (written.ok() && fsync(fd) != 0 && errno != EINVAL)
    written = IoError("cannot sync", path, errno);
  if (close(fd) != 0 && written.ok()) written = IoError("cannot write", path, errno);
  return written;
}

}  // namespace

Status WriteAllTo(int fd, std::string_view data, const std::string& path) {
  return WriteAll(fd, data) ? Status::Ok() : IoError("cannot write", path, errno);
}

Status WriteFileWhole(const std::string& path, const FileWriter& caller_write) {
  // What the caller's writer throws (a buffer it could not allocate) is a failed write like any:
  // the new file is removed and the old one kept.
  const FileWriter write = [&](int fd) -> Status {
    try {
      return caller_write(fd);
    } catch (const std::exception& e) {
      return Status(ErrorCode::kInternal, "writing " + path + ": " + e.what());
    }
  };
  std::string target = path;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char resolved[PATH_MAX];
    if (realpath(path.c_str(), resolved) != nullptr) target = resolved;
  }
  const bool existed = stat(target.c_str(), &st) == 0;
  if (existed && !S_ISREG(st.st_mode)) return WriteInPlace(path, write);
  // A rename would replace even a file that may not be written: refuse it as a write would.
  if (existed && access(target.c_str(), W_OK) != 0) return IoError("cannot write", path, errno);
  // Beside the target, so that the rename stays on one file system and is atomic.
  size_t slash = target.rfind('/');
  std::string folder = slash == std::string::npos ? "." : target.substr(0, slash == 0 ? 1 : slash);
  std::string name = target.substr(slash == std::string::npos ? 0 : slash + 1);
  std::string temp_prefix = folder + "/." + name + "." + std::to_string(getpid());
  std::string temp;
  int fd = -1;
  // One left by a process of the same pid that was killed is not taken over.
  for (int n = 0; fd < 0 && n < 100; ++n) {
    temp = temp_prefix + (n == 0 ? "" : "-" + std::to_string(n)) + ".tmp";
    fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return IoError("cannot create a file beside", path, errno);
  if (existed && S_ISREG(st.st_mode)) (void)fchmod(fd, st.st_mode & 07777);
  Status written = WriteAndSync(fd, write, path);
  if (close(fd) != 0 && written.ok()) written = IoError("cannot write", path, errno);
  if (written.ok() && rename(temp.c_str(), target.c_str()) != 0) {
    written = IoError("cannot replace", path, errno);
  }
  if (!written.ok()) {
    unlink(temp.c_str());
    return written;
  }
  // The rename itself reaches the disk with the folder (best effort: some file systems refuse).
  int dir = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)fsync(dir);
    close(dir);
  }
  return Status::Ok();
}

}  // namespace mcd
