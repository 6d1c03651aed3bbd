// A stranger's raw UCX peer for copy_test: it speaks the copy service's messages
// (server/copy_wire.h) to a server's worker, whose address it was given, without any Redis.
//
//   ucx_peer read ADDRESS NAME CTIME_MS   a READ with a made-up grant; prints each answer,
//                                         "answer code=C bytes=N" (waits 20 s for the first)
//   ucx_peer flood ADDRESS BYTES SECONDS  DATA answers of BYTES bytes (0xa5) for guessed fetch
//                                         ids (counters from 1, and random ones), for SECONDS;
//                                         prints "sent N answers"
//
// Exit 0 when done, 2 on usage, 3 when UCX fails.
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

int Read(ucp_ep_h ep, const std::string& name, int64_t ctime_ms) {
  ReadHeader h{};
  RandomId(h.fetch);
  RandomId(h.grant);  // a grant nobody wrote
  RandomId(h.token);
  h.ctime_ms = ctime_ms;
  h.name_length = static_cast<uint32_t>(name.size());
  std::string node = "stranger";
  h.node_length = static_cast<uint32_t>(node.size());
  std::string header(reinterpret_cast<const char*>(&h), sizeof(h));
  static const std::string none;
  if (!Send(ep, mcd::copy_wire::kReadId, header + name + node, none, UCP_AM_SEND_FLAG_REPLY))
    return 3;
  auto until = Clock::now() + std::chrono::seconds(20);
  while (answers == 0 && Clock::now() < until) ucp_worker_progress(worker);
  ProgressFor(std::chrono::milliseconds(200));  // and whatever else the server sends
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
    h.bytes = bytes;
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
  if (args.size() != 4 || (args[0] != "read" && args[0] != "flood")) {
    std::fprintf(stderr,
                 "usage: ucx_peer read ADDRESS NAME CTIME_MS | flood ADDRESS BYTES SECONDS\n");
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
  std::string address = FromHex(args[1]);
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ucp_ep_h ep = nullptr;
  s = ucp_ep_create(worker, &ep_params, &ep);
  if (s != UCS_OK) return Fail("ucp_ep_create", s);
  int code = args[0] == "read" ? Read(ep, args[2], std::stoll(args[3]))
                               : Flood(ep, std::stoul(args[2]), std::stoi(args[3]));
  // Without closing anything (a stranger owes the server nothing), nor a leak check of UCX's.
  std::fflush(stdout);
  _exit(code);
}
