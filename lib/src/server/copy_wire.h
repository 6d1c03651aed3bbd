// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The copy service's messages on the wire (UCX active messages, server/copy_service_ucx.cpp),
// little-endian on every host memcuda builds for (x86-64, aarch64). Apart from the service, so
// that the tests' raw UCX peer speaks them as a stranger would.
#pragma once

#include <cstdint>

namespace mcd::copy_wire {

// Ids of the active messages, new with each change of their layout: a server of another layout
// has no handler for them, and what it sends is dropped rather than misread (1 and 2 asked
// without a grant; 3 and 4 answered a tensor whole; 5 asked without the asker's address).
constexpr unsigned kReadId = 7;
constexpr unsigned kDataId = 6;

constexpr unsigned kIdBytes = 16;  // fetch ids, grant ids and grant tokens: 128 random bits

// READ, from the fetching server, sent with a reply endpoint. The tensor's name follows, then
// the asker's node, then the asker's worker address (hex), to which the asked server makes the
// endpoint it answers on (UcxCopyService::TakeOverConnection). The answer comes in pieces of
// piece_bytes (the last one shorter), so that neither side needs a buffer of the tensor's size to
// stage GPU memory in, and the device's copies overlap the transport.
struct ReadHeader {
  uint8_t fetch[kIdBytes];  // names the answer
  uint8_t grant[kIdBytes];  // names the grant key, <prefix>:copy:<hex>
  uint8_t token[kIdBytes];  // what the grant key must hold
  int64_t ctime_ms;
  uint32_t name_length;
  uint32_t node_length;
  uint32_t address_length;
  uint32_t flags;  // kReadRendezvous
  uint64_t piece_bytes;
};
// The asker receives into GPU memory or staging slots: the answer goes by rendezvous, so that UCX
// writes the bytes in place, or waits for a slot (eager bytes arrive in UCX's own host buffer).
constexpr uint32_t kReadRendezvous = 1;

// DATA, the answer, sent on the READ's reply endpoint with a reply endpoint of its own (the
// asker takes answers only from the endpoint it asked): one per piece, each with the piece's
// bytes as the message's data, or one with an error code, whose message follows the header.
struct DataHeader {
  uint8_t fetch[kIdBytes];
  int32_t code;  // ErrorCode
  uint32_t message_length;
  uint64_t total;   // the tensor's bytes
  uint64_t offset;  // the piece's, a whole number of pieces
};

}  // namespace mcd::copy_wire
