// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

/* A C program on the installed C ABI: the library it loaded, and a clear failure without a
 * server. Exit 0 when both are as expected. */
#include <memcuda/memcuda.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  mcd_client* client = NULL;
  int32_t rc;
  if (mcd_abi_version() != MCD_ABI_VERSION) return 1;
  printf("libmemcuda %s, ABI %d\n", mcd_version(), (int)mcd_abi_version());
  rc = mcd_connect("redis://127.0.0.1:1", "nowhere", 300, &client);
  printf("connect to a dead Redis: %s (%s)\n", mcd_error_name(rc), mcd_last_error(NULL));
  return rc == MCD_ERR_UNAVAILABLE && client == NULL && strlen(mcd_last_error(NULL)) > 0 ? 0 : 2;
}
