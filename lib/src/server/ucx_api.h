// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The UCX functions the copy service calls (server/copy_service_ucx.cpp). UCX 1.13 (Debian 12's
// libucx-dev) or later. libucp is opened at run time (dlopen), not linked: libmemcuda's clients
// never need it, a host without it gets a clear error, and a CUDA-aware UCX of the cluster's own
// (LD_LIBRARY_PATH) is used where installed.
#pragma once

#include <ucp/api/ucp.h>

#include <string>

#include "memcuda/status.h"

namespace mcd {

// The UCX functions used, looked up in libucp.so.0 once.
struct UcxApi {
  decltype(&::ucp_config_read) ucp_config_read = nullptr;
  decltype(&::ucp_config_release) ucp_config_release = nullptr;
  decltype(&::ucp_init_version) ucp_init_version = nullptr;
  decltype(&::ucp_cleanup) ucp_cleanup = nullptr;
  decltype(&::ucp_worker_create) ucp_worker_create = nullptr;
  decltype(&::ucp_worker_destroy) ucp_worker_destroy = nullptr;
  decltype(&::ucp_worker_get_address) ucp_worker_get_address = nullptr;
  decltype(&::ucp_worker_release_address) ucp_worker_release_address = nullptr;
  decltype(&::ucp_worker_set_am_recv_handler) ucp_worker_set_am_recv_handler = nullptr;
  decltype(&::ucp_worker_progress) ucp_worker_progress = nullptr;
  decltype(&::ucp_worker_arm) ucp_worker_arm = nullptr;
  decltype(&::ucp_worker_wait) ucp_worker_wait = nullptr;
  decltype(&::ucp_worker_signal) ucp_worker_signal = nullptr;
  decltype(&::ucp_ep_create) ucp_ep_create = nullptr;
  decltype(&::ucp_ep_close_nbx) ucp_ep_close_nbx = nullptr;
  decltype(&::ucp_request_check_status) ucp_request_check_status = nullptr;
  decltype(&::ucp_request_free) ucp_request_free = nullptr;
  decltype(&::ucp_am_send_nbx) ucp_am_send_nbx = nullptr;
  decltype(&::ucp_am_recv_data_nbx) ucp_am_recv_data_nbx = nullptr;
  decltype(&::ucp_am_data_release) ucp_am_data_release = nullptr;
  decltype(&::ucs_status_string) ucs_status_string = nullptr;
  decltype(&::ucp_context_query) ucp_context_query = nullptr;
  decltype(&::ucp_get_version_string) ucp_get_version_string = nullptr;
};

// The functions, set by a LoadUcx that succeeded; null before.
extern const UcxApi* ucx;

// Opens libucp.so.0 and looks the functions up, once (kUnsupported when UCX is missing or older
// than 1.13); later calls answer the same.
Status LoadUcx();

// kUnavailable, "`what`: UCX's words for `status`".
Status UcxError(const std::string& what, ucs_status_t status);

}  // namespace mcd
