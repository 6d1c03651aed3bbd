// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

/* mcd-example-c: the C ABI from plain C. Creates a host tensor, maps it twice (as two users
 * would), writes through one mapping, reads through a fresh one, and releases everything.
 *   mcd-example-c NAME [NODE]        (Redis from MCD_REDIS_URL as for the tools) */
#include <stdio.h>
#include <string.h>

#include "memcuda/memcuda.h"

static int Die(mcd_client* c, const char* what, int32_t rc) {
  fprintf(stderr, "mcd-example-c: %s: %s: %s\n", what, mcd_error_name(rc), mcd_last_error(c));
  return 1;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("%s\n", mcd_version_info());
    return 0;
  }
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf(
        "usage: mcd-example-c NAME [NODE]\n"
        "The C ABI from plain C: creates host tensor NAME (i32[4,4]) on NODE's server, maps it\n"
        "twice, writes through one mapping, reads through a fresh one, releases everything.\n"
        "Redis from MCD_REDIS_URL, as for the tools. See mcd-example-c(1).\n");
    return 0;
  }
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: mcd-example-c NAME [NODE]\n");
    return 64;
  }
  mcd_client* c = NULL;
  int32_t rc = mcd_connect(NULL, argc > 2 ? argv[2] : NULL, 5000, &c);
  if (rc != MCD_OK) return Die(NULL, "connect", rc);
  int64_t shape[2] = {4, 4};
  mcd_tensor t;
  if ((rc = mcd_create(c, argv[1], "i32", shape, 2, MCD_DEVICE_CPU, &t)) != MCD_OK)
    return Die(c, "create", rc);
  if ((rc = mcd_get(c, argv[1], &t)) != MCD_OK) return Die(c, "get", rc);
  int32_t* values = (int32_t*)t.data;
  for (int i = 0; i < 16; ++i) values[i] = i * i;
  if ((rc = mcd_close(c, argv[1])) != MCD_OK) return Die(c, "close", rc);
  mcd_tensor again;
  if ((rc = mcd_open(c, argv[1], &again)) != MCD_OK) return Die(c, "open", rc);
  int sum = 0;
  for (int i = 0; i < 16; ++i) sum += ((int32_t*)again.data)[i];
  char* list = NULL;
  if ((rc = mcd_list_json(c, argv[1], &list)) != MCD_OK) return Die(c, "list", rc);
  printf("%s refcount=%lld sum=%d listed=%d\n", again.name, (long long)again.refcount, sum,
         strstr(list, argv[1]) != NULL);
  mcd_free(list);
  if ((rc = mcd_release(c, argv[1])) != MCD_OK) return Die(c, "release", rc);
  if ((rc = mcd_release(c, argv[1])) != MCD_OK) return Die(c, "release", rc);
  rc = mcd_stat(c, argv[1], &t);
  printf("after release: %s\n", mcd_error_name(rc));
  mcd_disconnect(c);
  return rc == MCD_ERR_NOT_FOUND ? 0 : 1;
}
