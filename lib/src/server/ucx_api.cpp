// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/ucx_api.h"

#include <dlfcn.h>

namespace mcd {

const UcxApi* ucx = nullptr;

Status LoadUcx() {
  static UcxApi api;
  static Status loaded = [] {
    void* lib = dlopen("libucp.so.0", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      return Status(ErrorCode::kUnsupported, std::string("UCX is not installed (") + dlerror() +
                                                 "): install libucx0 to copy between nodes");
    }
    bool all = true;
#define MCD_UCX_SYMBOL(name)                                          \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(lib, #name)); \
  all = all && api.name != nullptr;
    MCD_UCX_SYMBOL(ucp_config_read)
    MCD_UCX_SYMBOL(ucp_config_release)
    MCD_UCX_SYMBOL(ucp_init_version)
    MCD_UCX_SYMBOL(ucp_cleanup)
    MCD_UCX_SYMBOL(ucp_worker_create)
    MCD_UCX_SYMBOL(ucp_worker_destroy)
    MCD_UCX_SYMBOL(ucp_worker_get_address)
    MCD_UCX_SYMBOL(ucp_worker_release_address)
    MCD_UCX_SYMBOL(ucp_worker_set_am_recv_handler)
    MCD_UCX_SYMBOL(ucp_worker_progress)
    MCD_UCX_SYMBOL(ucp_worker_arm)
    MCD_UCX_SYMBOL(ucp_worker_wait)
    MCD_UCX_SYMBOL(ucp_worker_signal)
    MCD_UCX_SYMBOL(ucp_ep_create)
    MCD_UCX_SYMBOL(ucp_ep_close_nbx)
    MCD_UCX_SYMBOL(ucp_request_check_status)
    MCD_UCX_SYMBOL(ucp_request_free)
    MCD_UCX_SYMBOL(ucp_am_send_nbx)
    MCD_UCX_SYMBOL(ucp_am_recv_data_nbx)
    MCD_UCX_SYMBOL(ucp_am_data_release)
    MCD_UCX_SYMBOL(ucs_status_string)
    MCD_UCX_SYMBOL(ucp_context_query)
    MCD_UCX_SYMBOL(ucp_get_version_string)
#undef MCD_UCX_SYMBOL
    if (!all) return Status(ErrorCode::kUnsupported, "the UCX found is older than 1.13");
    return Status::Ok();
  }();
  if (loaded.ok()) ucx = &api;
  return loaded;
}

Status UcxError(const std::string& what, ucs_status_t status) {
  return Status(ErrorCode::kUnavailable, what + ": " + ucx->ucs_status_string(status));
}

}  // namespace mcd
