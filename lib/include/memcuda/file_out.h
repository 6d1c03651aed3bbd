// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Writing a file whole or not at all: the one way libmemcuda (Client::SaveSafetensors) and the
// tools (their -o) write what they are asked to.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "memcuda/export.h"
#include "memcuda/status.h"

namespace mcd {

// Writes a file's contents to the descriptor it is given.
using FileWriter = std::function<Status(int fd)>;

// Writes to `path` whole or not at all, the contents `write` puts out: into a new file beside
// it (".NAME.PID.tmp"), synced, then renamed over it (a link is followed; a file replaced keeps
// its permission bits). On any failure the new file is removed and `path` is as it was; kIoError
// names the step, the file and the reason (strerror). A file this process may not write is not
// replaced. A target that is not a regular file (a FIFO, a device, also through a link) is
// written in place, as its reader takes the bytes as they come.
MCD_API Status WriteFileWhole(const std::string& path, const FileWriter& write);
// write(2) of all of `data` (a write may take only part of it); kIoError naming `path`.
MCD_API Status WriteAllTo(int fd, std::string_view data, const std::string& path);

}  // namespace mcd
