// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/copy_endpoints_ucx.h"

#include <cstdlib>
#include <utility>

#include "common/hex.h"
#include "server/ucx_api.h"

namespace mcd {

namespace {

// Endpoints to other workers kept at most for reads that named them: one per server of the
// fleet, and those strangers named.
constexpr size_t kMaxEndpoints = 1024;

}  // namespace

void UcxEndpoints::Bind(ucp_worker_h worker, Lost lost) {
  worker_ = worker;
  lost_ = std::move(lost);
}

Status UcxEndpoints::CheckFailureReporting(const ucp_address_t* own_address) {
  // A connection to this worker itself, asking for failure reporting as every copy's does:
  // where UCX_TLS leaves no transport that reports a peer's failure (UCX 1.13's shared-memory
  // ones cannot), UCX refuses it as it would every copy's, and copies are off here, said once,
  // rather than refused one by one. A connection without it takes this process down with a peer
  // that dies mid-copy (UCX treats the failed read of its memory as fatal), so none is made.
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = own_address;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ucp_ep_h ep = nullptr;
  ucs_status_t s = ucx->ucp_ep_create(worker_, &params, &ep);
  if (s == UCS_ERR_UNREACHABLE) {
    const char* tls = std::getenv("UCX_TLS");
    return Status(ErrorCode::kUnsupported,
                  std::string("UCX has no transport") +
                      (tls != nullptr ? std::string(" in UCX_TLS=") + tls : std::string()) +
                      " that reports a peer's failure (shared memory alone cannot), and a copy "
                      "over one could take this server down with its peer: keep tcp in UCX_TLS");
  }
  if (s != UCS_OK) return Status::Ok();  // the probe tells nothing; a copy will say what fails
  CloseForcedAndWait(ep);
  return Status::Ok();
}

Result<ucp_ep_h> UcxEndpoints::To(const std::string& address_hex, bool* unreachable) {
  auto found = endpoints_.find(address_hex);
  if (found != endpoints_.end()) return found->second;
  Result<std::string> address = HexDecode(address_hex);
  if (!address.ok()) {
    return Status(ErrorCode::kUnexpectedReply, "the other server's ucx_address is not hex");
  }
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address->data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.arg = this;
  params.err_handler.cb = [](void* arg, ucp_ep_h ep, ucs_status_t status) {
    static_cast<UcxEndpoints*>(arg)->PeerLost(ep, status);
  };
  ucp_ep_h ep = nullptr;
  ucs_status_t s = ucx->ucp_ep_create(worker_, &params, &ep);
  if (unreachable != nullptr) *unreachable = s == UCS_ERR_UNREACHABLE;
  if (s == UCS_ERR_UNREACHABLE) {
    // This worker reaches itself with failure reporting (CheckFailureReporting): the other one
    // is not there, or not on these transports.
    return Status(ErrorCode::kUnavailable,
                  "the other server cannot be reached over UCX (it may have stopped, or shares "
                  "no transport in UCX_TLS with this one)");
  }
  if (s != UCS_OK) return UcxError("connecting to the other server (ucp_ep_create)", s);
  endpoints_[address_hex] = ep;
  return ep;
}

UcxEndpoints::Connection UcxEndpoints::TakeOver(const std::string& asker_address_hex,
                                                ucp_ep_h reply_ep) {
  // UCX destroys an endpoint that another worker's connection made here (a reply endpoint) as
  // soon as that worker fails, unless the user has made it its own: held past the read's
  // callback, it may be gone when an answer goes, and the send crashes. Making this service's
  // endpoint to the asker's address takes that very connection over, with the failure handler
  // of the others: UCX matches this worker's i-th endpoint to the asker with the asker's i-th
  // one to this worker. A UCX listener, whose accepted endpoints are the user's from the start,
  // would need an address and port of its own on each node; a worker address needs neither.
  // The address is the asker's word, unpacked by UCX as those in its own connection messages.
  if (asker_address_hex.empty() || !HexDecode(asker_address_hex).ok()) return Connection::kOther;
  bool known = endpoints_.count(asker_address_hex) > 0;
  bool unreachable = false;
  Result<ucp_ep_h> ep = To(asker_address_hex, &unreachable);
  // No way to the address: nothing was taken over. Otherwise a take-over that failed may have
  // destroyed the reply endpoint with it (an asker that connected without failure reporting,
  // as no server of this build does).
  if (!ep.ok()) return unreachable ? Connection::kOther : Connection::kLost;
  if (*ep == reply_ep) return Connection::kTaken;
  // A new connection to whatever the address names (a read that named another worker's): kept
  // as this service's endpoint there, which keeps the two sides' counts of endpoints in step
  // (the named worker's next endpoint here matches it), up to kMaxEndpoints; past them, closed.
  if (!known && endpoints_.size() > kMaxEndpoints) {
    endpoints_.erase(asker_address_hex);
    ucs_status_ptr_t closing = CloseForced(*ep);
    if (UCS_PTR_IS_PTR(closing)) ucx->ucp_request_free(closing);  // released once closed
  }
  return Connection::kOther;
}

void UcxEndpoints::CloseAll() {
  // Taken out first: progress while closing may report another endpoint lost (PeerLost).
  std::vector<ucp_ep_h> closing_all = std::move(failed_);
  for (auto& [address, ep] : endpoints_) closing_all.push_back(ep);
  endpoints_.clear();
  failed_.clear();
  for (ucp_ep_h ep : closing_all) CloseForcedAndWait(ep);
}

ucs_status_ptr_t UcxEndpoints::CloseForced(ucp_ep_h ep) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  return ucx->ucp_ep_close_nbx(ep, &param);
}

void UcxEndpoints::CloseForcedAndWait(ucp_ep_h ep) {
  ucs_status_ptr_t closing = CloseForced(ep);
  if (!UCS_PTR_IS_PTR(closing)) return;
  while (ucx->ucp_request_check_status(closing) == UCS_INPROGRESS)
    ucx->ucp_worker_progress(worker_);
  ucx->ucp_request_free(closing);
}

void UcxEndpoints::PeerLost(ucp_ep_h ep, ucs_status_t status) {
  // Forgotten, so that the next fetch makes a new one; not closed yet: reads waiting for their
  // answer may name it, which then fails to send.
  for (auto it = endpoints_.begin(); it != endpoints_.end(); ++it) {
    if (it->second == ep) {
      endpoints_.erase(it);
      failed_.push_back(ep);
      break;
    }
  }
  if (lost_) lost_(ep, status);
}

}  // namespace mcd
