// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The connections of the UCX copy service (server/copy_service_ucx.cpp) to other servers'
// workers: one endpoint per worker address, made on first use, with failure reporting; the
// take-over of a connection another worker made here, so that answers go on an endpoint of the
// service's own; the endpoints whose peer failed, kept until stop; and every endpoint closed at
// stop. The service's thread only. Private to the service.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "memcuda/status.h"

namespace mcd {

class UcxEndpoints {
 public:
  // `lost`: told, on the service's thread while UCX progresses, of an endpoint whose peer failed
  // (after it has left the endpoints in use).
  using Lost = std::function<void(ucp_ep_h ep, ucs_status_t status)>;

  UcxEndpoints() = default;
  UcxEndpoints(const UcxEndpoints&) = delete;
  UcxEndpoints& operator=(const UcxEndpoints&) = delete;
  void Bind(ucp_worker_h worker, Lost lost);

  // kUnsupported where UCX_TLS leaves no transport that reports a peer's failure.
  Status CheckFailureReporting(const ucp_address_t* own_address);
  // The endpoint to the worker at `address_hex`, made on first use. `unreachable`, where given,
  // says whether UCX found no way to the address (the endpoint taken over for a read, then, is
  // intact).
  Result<ucp_ep_h> To(const std::string& address_hex, bool* unreachable = nullptr);

  // What became of the connection a read came on (TakeOver): now the service's own endpoint,
  // which answers go on; another endpoint to the address the read named (the read is refused at
  // once); or given up by UCX (the read goes unanswered).
  enum class Connection { kTaken, kOther, kLost };
  Connection TakeOver(const std::string& asker_address_hex, ucp_ep_h reply_ep);

  // Every endpoint closed, while the worker progresses their closing; the endpoints lost
  // meanwhile too. Answers go on these endpoints alone, so closing them ends the sends under way.
  void CloseAll();
  // Closes `ep` at once, whatever it still sends, progressing the worker until it is closed.
  void CloseForcedAndWait(ucp_ep_h ep);

 private:
  ucs_status_ptr_t CloseForced(ucp_ep_h ep);
  void PeerLost(ucp_ep_h ep, ucs_status_t status);

  ucp_worker_h worker_ = nullptr;
  Lost lost_;
  std::map<std::string, ucp_ep_h> endpoints_;  // by the worker address they reach
  std::vector<ucp_ep_h> failed_;  // endpoints whose peer failed; all are closed at stop
};

}  // namespace mcd
