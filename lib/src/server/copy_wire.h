// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The copy service's messages on the wire (UCX active messages, server/copy_service_ucx.cpp),
// little-endian on every host memcuda builds for (x86-64, aarch64). Apart from the service, so
// that the tests' raw UCX peer speaks them as a stranger would.
#pragma once

#include <cstdint>

namespace mcd::copy_wire {

// Ids of the active messages. 1 and 2 were those of servers that asked without a grant: they
// have no handler here, so what such a server sends is dropped.
constexpr unsigned kReadId = 3;
constexpr unsigned kDataId = 4;

constexpr unsigned kIdBytes = 16;  // fetch ids, grant ids and grant tokens: 128 random bits

// READ, from the fetching server, sent with a reply endpoint. The tensor's name follows, then
// the asker's node.
struct ReadHeader {
  uint8_t fetch[kIdBytes];  // names the answer
  uint8_t grant[kIdBytes];  // names the grant key, <prefix>:copy:<hex>
  uint8_t token[kIdBytes];  // what the grant key must hold
  int64_t ctime_ms;
  uint32_t name_length;
  uint32_t node_length;
  uint32_t flags;  // kReadRendezvous
};
// The asker receives into GPU memory: the answer goes by rendezvous, so that UCX writes the bytes
// in place (eager bytes arrive in UCX's own host buffer).
constexpr uint32_t kReadRendezvous = 1;

// DATA, the answer, sent on the READ's reply endpoint with a reply endpoint of its own (the
// asker takes answers only from the endpoint it asked): the error message follows, then the
// bytes as the message's data.
struct DataHeader {
  uint8_t fetch[kIdBytes];
  int32_t code;  // ErrorCode
  uint32_t message_length;
  uint64_t bytes;
};

}  // namespace mcd::copy_wire
