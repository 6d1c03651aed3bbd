// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/server_options.h"

namespace mcd {

CommitOptions CommitOptionsOf(const ServerOptions& opt) {
  return CommitOptions{opt.keys, opt.node, opt.reply_ttl_s, opt.done_ttl_s, opt.event_history};
}

CopyGrantsOptions CopyGrantsOptionsOf(const ServerOptions& opt) {
  return CopyGrantsOptions{opt.redis_url, opt.keys, opt.node};
}

DeviceSetOptions DeviceSetOptionsOf(const ServerOptions& opt) {
  DeviceSetOptions d;
  d.all_devices = opt.all_devices;
  d.devices = opt.devices;
  d.allocator = opt.allocator;
  d.pool_max_bytes = opt.pool_max_bytes;
  d.pool_max_fraction = opt.pool_max_fraction;
  d.pool_release_threshold = opt.pool_release_threshold;
  d.ready_max_bytes = opt.ready_max_bytes;
  d.ready_max_fraction = opt.ready_max_fraction;
  d.ipc_slab_max_bytes = opt.ipc_slab_max_bytes;
  return d;
}

HeartbeatOptions HeartbeatOptionsOf(const ServerOptions& opt) {
  return HeartbeatOptions{opt.node, opt.keys, opt.redis_url, opt.heartbeat_ttl_s,
                          opt.event_history};
}

NodeCopierOptions NodeCopierOptionsOf(const ServerOptions& opt) {
  return NodeCopierOptions{CopyGrantsOptionsOf(opt), opt.stage_gpu_copies};
}

ReaperOptions ReaperOptionsOf(const ServerOptions& opt) {
  return ReaperOptions{opt.keys, opt.node};
}

ResettleOptions ResettleOptionsOf(const ServerOptions& opt) {
  return ResettleOptions{opt.keys, opt.node};
}

}  // namespace mcd
