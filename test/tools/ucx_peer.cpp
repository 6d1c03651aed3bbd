// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A stranger's raw UCX peer for copy_test: it speaks the copy service's messages
// (server/copy_wire.h) to a server's worker, whose address it was given, without any Redis.
//
//   ucx_peer read ADDRESS NAME CTIME_MS [ASKER]
//                                         a READ with a made-up grant, naming ASKER (hex) as the
//                                         asker's worker address (default: its own); prints
//                                         each answer, "answer code=C bytes=N" (waits 20 s for
//                                         the first)
//   ucx_peer reads ADDRESS NAME CTIME_MS COUNT ANSWERS
//                                         COUNT such READs at once; prints each answer as above
//                                         (waits 30 s for ANSWERS of them, then 200 ms more)
//   ucx_peer flood ADDRESS BYTES SECONDS  DATA answers of BYTES bytes (0xa5) for guessed fetch
//                                         ids (counters from 1, and random ones), for SECONDS;
//                                         prints "sent N answers"
//   ucx_peer serve ADDRESS FILE           a server's side: prints "address HEX" (its worker's),
//                                         waits 30 s for a READ, answers it with the READ's
//                                         fetch id from another worker of its own (to ADDRESS,
//                                         the asker's) with as many bytes of 0xa5, with and
//                                         without a reply endpoint; 1 s later, from the endpoint
//                                         asked, with FILE's bytes; prints "answered"
//   ucx_peer serve ADDRESS FILE HOW       the same, answering amiss (AnswerAmiss) or, with HOW
//                                         "stall", with the first piece alone (of the READ's
//                                         piece size), then nothing for 10 s, its connection
//                                         open; prints "stalled"
//
// With UCX_PEER_UNREPORTED=1 in its environment it connects without failure reporting, as no
// server of this build does. Exit 0 when done, 2 on usage, 3 when UCX fails.
#include <sys/random.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "server/copy_wire.h"

namespace {

using mcd::copy_wire::DataHeader;
using mcd::copy_wire::ReadHeader;
using Clock = std::chrono::steady_clock;

ucp_context_h context;
ucp_worker_h worker;
int in_flight = 0;
int answers = 0;

int Fail(const char* what, ucs_status_t status) {
  std::fprintf(stderr, "ucx_peer: %s: %s\n", what, ucs_status_string(status));
  return 3;
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

void RandomId(uint8_t* id) {
  if (getrandom(id, mcd::copy_wire::kIdBytes, 0) != mcd::copy_wire::kIdBytes) std::abort();
}

ucs_status_t OnAnswer(void*, const void* header, size_t header_length, void*, size_t length,
                      const ucp_am_recv_param_t*) {
  DataHeader h{};
  if (header_length >= sizeof(h)) std::memcpy(&h, header, sizeof(h));
  ++answers;
  std::printf("answer code=%d bytes=%zu\n", h.code, length);
  std::fflush(stdout);
  return UCS_OK;
}

// Sends one active message; at most 64 are in flight, the worker progressing meanwhile. UCX
// reads the header until the send completes: it is kept till then. `data` outlives every send.
bool Send(ucp_ep_h ep, unsigned id, const std::string& header, const std::string& data,
          uint32_t flags) {
  auto* kept = new std::string(header);
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_USER_DATA;
  param.flags = flags;
  param.user_data = kept;
  param.cb.send = [](void* request, ucs_status_t, void* user_data) {
    --in_flight;
    delete static_cast<std::string*>(user_data);
    ucp_request_free(request);
  };
  ucs_status_ptr_t sent =
      ucp_am_send_nbx(ep, id, kept->data(), kept->size(), data.data(), data.size(), &param);
  if (!UCS_PTR_IS_PTR(sent)) delete kept;
  if (UCS_PTR_IS_ERR(sent)) return false;
  if (UCS_PTR_IS_PTR(sent)) ++in_flight;
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (in_flight >= 64 && Clock::now() < deadline) ucp_worker_progress(worker);
  return true;
}

void ProgressFor(std::chrono::milliseconds how_long) {
  auto until = Clock::now() + how_long;
  while (Clock::now() < until) ucp_worker_progress(worker);
}

// This worker's address, in hex: what a READ names as the asker's (the server answers on an
// endpoint it makes to it).
std::string OwnAddressHex() {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  if (ucp_worker_get_address(worker, &address, &length) != UCS_OK) return "";
  std::string hex;
  for (size_t i = 0; i < length; ++i) {
    char two[3];
    std::snprintf(two, sizeof(two), "%02x", reinterpret_cast<const unsigned char*>(address)[i]);
    hex += two;
  }
  ucp_worker_release_address(worker, address);
  return hex;
}

// A READ of `name` with a made-up grant, naming `address` as the asker's.
std::string ReadMessage(const std::string& name, int64_t ctime_ms, const std::string& address) {
  ReadHeader h{};
  RandomId(h.fetch);
  RandomId(h.grant);  // a grant nobody wrote
  RandomId(h.token);
  h.ctime_ms = ctime_ms;
  h.name_length = static_cast<uint32_t>(name.size());
  std::string node = "stranger";
  h.node_length = static_cast<uint32_t>(node.size());
  h.address_length = static_cast<uint32_t>(address.size());
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + name + node + address;
}

int Read(ucp_ep_h ep, const std::string& name, int64_t ctime_ms, const std::string& asker) {
  static const std::string none;
  if (!Send(ep, mcd::copy_wire::kReadId,
            ReadMessage(name, ctime_ms, asker.empty() ? OwnAddressHex() : asker), none,
            UCP_AM_SEND_FLAG_REPLY))
    return 3;
  auto until = Clock::now() + std::chrono::seconds(20);
  while (answers == 0 && Clock::now() < until) ucp_worker_progress(worker);
  ProgressFor(std::chrono::milliseconds(200));  // and whatever else the server sends
  return 0;
}

int Reads(ucp_ep_h ep, const std::string& name, int64_t ctime_ms, int count, int wanted) {
  std::string address = OwnAddressHex();
  for (int i = 0; i < count; ++i) {
    static const std::string none;
    if (!Send(ep, mcd::copy_wire::kReadId, ReadMessage(name, ctime_ms, address), none,
              UCP_AM_SEND_FLAG_REPLY))
      return 3;
  }
  auto until = Clock::now() + std::chrono::seconds(30);
  while (answers < wanted && Clock::now() < until) ucp_worker_progress(worker);
  ProgressFor(std::chrono::milliseconds(200));
  return 0;
}

// What the serve mode learnt of the READ it got.
struct Asked {
  bool got = false;
  std::string fetch;
  uint64_t piece_bytes = 0;
  ucp_ep_h reply_ep = nullptr;
} asked;

ucs_status_t OnRead(void*, const void* header, size_t header_length, void*, size_t,
                    const ucp_am_recv_param_t* param) {
  ReadHeader h{};
  if (header_length < sizeof(h) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
    return UCS_OK;
  }
  std::memcpy(&h, header, sizeof(h));
  asked.got = true;
  asked.fetch.assign(reinterpret_cast<const char*>(h.fetch), sizeof(h.fetch));
  asked.piece_bytes = h.piece_bytes;
  asked.reply_ep = param->reply_ep;
  return UCS_OK;
}

// A piece at `offset` of a tensor of `total` bytes.
std::string DataHeaderFor(const std::string& fetch, size_t total, uint64_t offset = 0) {
  DataHeader h{};
  std::memcpy(h.fetch, fetch.data(), sizeof(h.fetch));
  h.total = total;
  h.offset = offset;
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

// The asked server answering with a piece that does not fit: `how` is "offset" (not a piece's
// place), "total" (a tensor of another size) or "short" (a byte less than the piece).
int AnswerAmiss(const std::string& how, const std::string& bytes) {
  std::string header = how == "offset"  ? DataHeaderFor(asked.fetch, bytes.size(), 1)
                       : how == "total" ? DataHeaderFor(asked.fetch, bytes.size() + 1)
                                        : DataHeaderFor(asked.fetch, bytes.size());
  std::string data = how == "short" ? bytes.substr(1) : bytes;
  if (!Send(asked.reply_ep, mcd::copy_wire::kDataId, header, data, UCP_AM_SEND_FLAG_REPLY))
    return 3;
  ProgressFor(std::chrono::seconds(2));
  std::printf("answered amiss\n");
  return 0;
}

// The asked server sending the first piece and then nothing, with its connection kept open.
int AnswerThenStall(const std::string& bytes) {
  std::string header = DataHeaderFor(asked.fetch, bytes.size());
  std::string first = bytes.substr(0, asked.piece_bytes);
  if (!Send(asked.reply_ep, mcd::copy_wire::kDataId, header, first, UCP_AM_SEND_FLAG_REPLY))
    return 3;
  ProgressFor(std::chrono::seconds(10));
  std::printf("stalled\n");
  return 0;
}

int Serve(const std::string& asker_address, const std::string& file, const std::string& amiss) {
  std::FILE* in = std::fopen(file.c_str(), "rb");
  if (in == nullptr) return 2;
  std::string bytes;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), in)) > 0;) bytes.append(buf, n);
  std::fclose(in);
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
  hp.id = mcd::copy_wire::kReadId;
  hp.cb = OnRead;
  ucs_status_t s = ucp_worker_set_am_recv_handler(worker, &hp);
  if (s != UCS_OK) return Fail("ucp_worker_set_am_recv_handler", s);
  std::string hex = OwnAddressHex();
  if (hex.empty()) return Fail("ucp_worker_get_address", UCS_ERR_NO_MEMORY);
  std::printf("address %s\n", hex.c_str());
  std::fflush(stdout);
  auto until = Clock::now() + std::chrono::seconds(30);
  while (!asked.got && Clock::now() < until) ucp_worker_progress(worker);
  if (!asked.got) return 4;
  if (amiss == "stall") return AnswerThenStall(bytes);
  if (!amiss.empty()) return AnswerAmiss(amiss, bytes);
  // Another worker: to the asker, another peer that happens to know the fetch id.
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h other = nullptr;
  s = ucp_worker_create(context, &wp, &other);
  if (s != UCS_OK) return Fail("ucp_worker_create", s);
  std::string remote = FromHex(asker_address);
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(remote.data());
  ucp_ep_h forger = nullptr;
  s = ucp_ep_create(other, &ep_params, &forger);
  if (s != UCS_OK) return Fail("ucp_ep_create", s);
  std::string forged(bytes.size(), static_cast<char>(0xa5));
  std::string header = DataHeaderFor(asked.fetch, bytes.size());
  ucp_worker_h genuine = worker;
  worker = other;  // Send progresses `worker`
  for (uint32_t flags : {0u, static_cast<uint32_t>(UCP_AM_SEND_FLAG_REPLY)}) {
    if (!Send(forger, mcd::copy_wire::kDataId, header, forged, flags)) return 3;
  }
  auto forged_until = Clock::now() + std::chrono::seconds(1);
  while (Clock::now() < forged_until) {
    ucp_worker_progress(other);
    ucp_worker_progress(genuine);
  }
  worker = genuine;
  if (!Send(asked.reply_ep, mcd::copy_wire::kDataId, header, bytes, UCP_AM_SEND_FLAG_REPLY)) {
    return 3;
  }
  auto done_until = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < done_until) {
    ucp_worker_progress(other);
    ucp_worker_progress(genuine);
  }
  std::printf("answered\n");
  return 0;
}

int Flood(ucp_ep_h ep, size_t bytes, int seconds) {
  std::string data(bytes, static_cast<char>(0xa5));
  long sent = 0;
  auto until = Clock::now() + std::chrono::seconds(seconds);
  std::printf("flooding\n");
  std::fflush(stdout);
  for (uint64_t n = 0; Clock::now() < until; ++n) {
    DataHeader h{};
    if (n % 4 == 3) {
      RandomId(h.fetch);
    } else {
      uint64_t guess = 1 + n % 16;  // what a counter from 1 would have given
      std::memcpy(h.fetch, &guess, sizeof(guess));
    }
    h.total = bytes;
    std::string header(reinterpret_cast<const char*>(&h), sizeof(h));
    // Half of them with a reply endpoint: the stranger's own, which the asker never asked.
    if (!Send(ep, mcd::copy_wire::kDataId, header, data, n % 2 ? UCP_AM_SEND_FLAG_REPLY : 0)) break;
    ucp_worker_progress(worker);
    ++sent;
  }
  std::printf("sent %ld answers\n", sent);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool usage = args.empty() || (args[0] == "read"    ? args.size() != 4 && args.size() != 5
                                : args[0] == "flood" ? args.size() != 4
                                : args[0] == "reads" ? args.size() != 6
                                : args[0] == "serve" ? args.size() != 3 && args.size() != 4
                                                     : true);
  if (usage) {
    std::fprintf(
        stderr,
        "usage: ucx_peer read ADDRESS NAME CTIME_MS [ASKER] | reads ADDRESS NAME CTIME_MS COUNT "
        "ANSWERS | flood ADDRESS BYTES SECONDS | serve ADDRESS FILE [offset|total|short|stall]\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return Fail("ucp_config_read", s);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM;
  s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) return Fail("ucp_init", s);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(context, &wp, &worker);
  if (s != UCS_OK) return Fail("ucp_worker_create", s);
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
  hp.id = mcd::copy_wire::kDataId;
  hp.cb = OnAnswer;
  s = ucp_worker_set_am_recv_handler(worker, &hp);
  if (s != UCS_OK) return Fail("ucp_worker_set_am_recv_handler", s);
  if (args[0] == "serve") {
    int code = Serve(args[1], args[2], args.size() == 4 ? args[3] : "");
    std::fflush(stdout);
    _exit(code);
  }
  std::string address = FromHex(args[1]);
  ucp_ep_params_t ep_params{};
  // As a server connects (failure reporting on), so that the server answers on this connection.
  const char* unreported = std::getenv("UCX_PEER_UNREPORTED");
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep_params.err_mode = unreported != nullptr && std::strcmp(unreported, "1") == 0
                           ? UCP_ERR_HANDLING_MODE_NONE
                           : UCP_ERR_HANDLING_MODE_PEER;
  ucp_ep_h ep = nullptr;
  s = ucp_ep_create(worker, &ep_params, &ep);
  if (s != UCS_OK) return Fail("ucp_ep_create", s);
  int code = args[0] == "read"
                 ? Read(ep, args[2], std::stoll(args[3]), args.size() == 5 ? args[4] : "")
             : args[0] == "reads"
                 ? Reads(ep, args[2], std::stoll(args[3]), std::stoi(args[4]), std::stoi(args[5]))
                 : Flood(ep, std::stoul(args[2]), std::stoi(args[3]));
  // Without closing anything (a stranger owes the server nothing), nor a leak check of UCX's.
  std::fflush(stdout);
  _exit(code);
}
