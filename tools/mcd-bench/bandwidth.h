// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The bandwidth rows: a copy out of a shared mapping against the same copy between buffers of
// this process, on the tensor's own device ("copy_from_mapping" / "copy_local") and, on a host
// with two GPUs, from a tensor on one GPU into a process working on another
// ("copy_cross_device" / "copy_cross_local").
#pragma once

#include <vector>

#include "bench_common.h"

namespace mcd::bench {

// `spec` names a tensor that does not exist yet: it is created, copied from, and freed.
Status MeasureBandwidth(Client& client, const CreateSpec& spec, const std::string& kind,
                        std::vector<Row>& rows);
// The tensor lives on spec.device; the copies land on `peer`, a buffer of this process on that
// GPU, through the mapping this process opened, against the same peer copy out of a buffer of
// this process on spec.device. Peer access is enabled both ways where the GPUs allow it.
Status MeasureCrossDevice(Client& client, const CreateSpec& spec, const std::string& kind, int peer,
                          std::vector<Row>& rows);

}  // namespace mcd::bench
