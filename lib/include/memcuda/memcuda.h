// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

/* memcuda.h: the plain C ABI of libmemcuda's client side, for C, Rust (cudarc), Python (ctypes)
 * and anything else that can call C. See memcuda(7) for the protocol underneath.
 *
 * Conventions: every function returns an int32_t code (0 = MCD_OK; names from mcd_error_name);
 * the detail of the last failure on a client is mcd_last_error(client). A client is used by one
 * thread at a time. Strings passed in are borrowed; strings handed out are freed with mcd_free.
 *
 * Stability: within one MCD_ABI_VERSION (mcd_abi_version() at run time), functions are only
 * added, never removed or changed; error codes keep their values and names; mcd_tensor keeps its
 * layout; option structs start with their own size and grow only at the end, so a program built
 * against an older header passes a smaller struct and gets the defaults for the rest. The JSON
 * of mcd_list_json and mcd_stat_json only gains keys. */
#ifndef MEMCUDA_MEMCUDA_H_
#define MEMCUDA_MEMCUDA_H_

#include <stddef.h>
#include <stdint.h>

#include "memcuda/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: the same values as mcd::ErrorCode. */
enum {
  MCD_OK = 0,
  MCD_ERR_INVALID_ARGUMENT = 1,
  MCD_ERR_NOT_FOUND = 2,
  MCD_ERR_ALREADY_EXISTS = 3,
  MCD_ERR_NOT_READY = 4,
  MCD_ERR_OUT_OF_MEMORY = 5,
  MCD_ERR_UNAVAILABLE = 6,
  MCD_ERR_NO_DEVICE = 7,
  MCD_ERR_TIMEOUT = 8,
  MCD_ERR_REDIS = 9,
  MCD_ERR_UNEXPECTED_REPLY = 10,
  MCD_ERR_AUTH_FAILED = 11,
  MCD_ERR_IO = 12,
  MCD_ERR_CUDA = 13,
  MCD_ERR_STOPPED = 14,
  MCD_ERR_WOULD_DEADLOCK = 15,
  MCD_ERR_INTERNAL = 16,
  MCD_ERR_PERMISSION_DENIED = 17,
  MCD_ERR_WRONG_NODE = 18,
  MCD_ERR_TOO_LARGE = 19,
  MCD_ERR_UNSUPPORTED = 20,
  MCD_ERR_TRY_AGAIN = 21,
  MCD_ERR_NOT_HELD = 22
};

#define MCD_DEVICE_CPU (-1)
#define MCD_MAX_DIMS 8
#define MCD_ABI_VERSION 2

/* The library's version ("0.1.0") and ABI version, of the library loaded, not of this header. */
MCD_API const char* mcd_version(void);
MCD_API int32_t mcd_abi_version(void);
/* One line for --version: "memcuda 0.1.0 (git 1a2b3c4; built with CUDA runtime 13.0; driver:
 * CUDA 13.0, NVIDIA 580.159.04)", the driver as found on this machine now ("no NVIDIA driver"
 * without one). Static storage. */
MCD_API const char* mcd_version_info(void);

typedef struct mcd_client mcd_client;

/* A tensor as seen by this process. `data` is set by mcd_get/mcd_open (device pointer for GPU
 * tensors, host pointer for device MCD_DEVICE_CPU) and NULL otherwise. */
typedef struct mcd_tensor {
  char name[201];
  char dtype[8];
  int32_t device;
  int32_t ndim;
  int64_t shape[MCD_MAX_DIMS];
  uint64_t bytes;
  int64_t refcount;
  void* data;
} mcd_tensor;

/* Connects. redis_url NULL: MCD_REDIS_URL, REDIS_URL, else the private socket of
 * `mcd-serve --spawn-redis`; with none, MCD_ERR_UNAVAILABLE at once (mcd_last_error(NULL) says
 * how to name a Redis; "redis://" names redis://127.0.0.1:6379). node NULL: MCD_NODE, else the host
 * name, or the node of the only live server when the host name has none.
 * timeout_ms <= 0: 5000. MCD_ERR_UNAVAILABLE when Redis or the node's mcd-serve is not there.
 * On failure *out is NULL. */
MCD_API int32_t mcd_connect(const char* redis_url, const char* node, int32_t timeout_ms,
                            mcd_client** out);
/* Closes the connection. Mappings opened stay valid until mcd_release/mcd_close or exit. */
MCD_API void mcd_disconnect(mcd_client* client);

/* Creates a zeroed heap tensor (refcount 1). `out` may be NULL. */
MCD_API int32_t mcd_create(mcd_client* client, const char* name, const char* dtype,
                           const int64_t* shape, int32_t ndim, int32_t device, mcd_tensor* out);
enum { MCD_LIFETIME_HEAP = 0, MCD_LIFETIME_STACK = 1 };

/* Options of mcd_create_ex; zero-initialise, then set `size` to sizeof(mcd_create_options). */
typedef struct mcd_create_options {
  uint32_t size;    /* sizeof(mcd_create_options) as the caller was built */
  int32_t lifetime; /* MCD_LIFETIME_HEAP (lives until its last reference is given back) or
                       MCD_LIFETIME_STACK (also freed when its owner process exits) */
  int32_t no_init;  /* 0: zeroed; 1: contents left as they come (faster for large tensors) */
  int32_t reserved;
  int64_t owner_pid; /* stack tensors: the process it is bound to (0: the caller) */
  /* Host bytes to fill the tensor with, exactly its size (NULL: none). The tensor is "creating"
   * while this call writes them, and ready only once every byte is in: a get meanwhile answers
   * MCD_ERR_NOT_READY, and if the calling process dies first, the tensor goes. */
  const void* data;
  uint64_t data_bytes;
} mcd_create_options;

/* mcd_create with options (NULL: the defaults, as mcd_create). */
MCD_API int32_t mcd_create_ex(mcd_client* client, const char* name, const char* dtype,
                              const int64_t* shape, int32_t ndim, int32_t device,
                              const mcd_create_options* options, mcd_tensor* out);
/* Takes a reference (refcount+1) and maps the tensor into this process. */
MCD_API int32_t mcd_get(mcd_client* client, const char* name, mcd_tensor* out);
/* mcd_get of `count` tensors (distinct names) in one Redis round trip, all or nothing: on an
 * error no reference is kept, and mcd_last_error names the tensor that stopped it. More than 64
 * (MCD_GET_MANY_CHUNK) tensors are got 64 per round trip, not atomically, as Client::GetMany
 * says. `out` has room for `count` tensors, filled in the order of `names`. */
MCD_API int32_t mcd_get_many(mcd_client* client, const char* const* names, size_t count,
                             mcd_tensor* out);
/* mcd_release of `count` tensors (distinct names) in one Redis round trip, all or nothing. */
MCD_API int32_t mcd_release_many(mcd_client* client, const char* const* names, size_t count);
/* Tensor sets (memcuda(7), TENSOR SETS): tensors "SET/..." laid out in one allocation.
 * mcd_get_set: every member of set `set` still there, opened with one mapping, and one reference
 * for the whole set (of its member first by name, out[0]: the set's memory stays while any member
 * lives), in one Redis round trip, all or nothing; *out (free it with mcd_free) holds *count
 * tensors, sorted by name; each member's refcount is the leader's (the set's references), its
 * dtype, shape and bytes its own. Give it back with mcd_release_set, not mcd_release of the
 * members.
 * mcd_release_set: closes the mappings of the `count` members of one mcd_get_set (all of them,
 * as it handed them out, each once; each is found open here by its name and data) and gives back
 * its reference. */
MCD_API int32_t mcd_get_set(mcd_client* client, const char* set, mcd_tensor** out, size_t* count);
MCD_API int32_t mcd_release_set(mcd_client* client, const mcd_tensor* members, size_t count);
/* One member of a set for mcd_create_set: its full name ("SET/..."), dtype, shape, and host bytes
 * to fill it with (exactly its size; NULL for none, and then for every member). */
typedef struct mcd_set_member {
  const char* name;
  const char* dtype;
  const int64_t* shape;
  int32_t ndim;
  const void* data;
  uint64_t data_bytes;
} mcd_set_member;
/* Creates tensor set `set` of `count` members in one allocation, all or nothing; `options`
 * (NULL: defaults) says the lifetime and init as for mcd_create_ex (its data is not used). */
MCD_API int32_t mcd_create_set(mcd_client* client, const char* set, const mcd_set_member* members,
                               size_t count, int32_t device, const mcd_create_options* options);
/* Loads safetensors file `path` into a new set `set` on `device` (members "SET/<tensor name>"),
 * all of it or nothing. */
MCD_API int32_t mcd_load_safetensors(mcd_client* client, const char* path, const char* set,
                                     int32_t device);
/* Writes every member of set `set` to safetensors file `path` (whole or not at all). */
MCD_API int32_t mcd_save_safetensors(mcd_client* client, const char* set, const char* path);
/* Maps the tensor without taking a reference. */
MCD_API int32_t mcd_open(mcd_client* client, const char* name, mcd_tensor* out);
/* Unmaps (if mapped here) and gives one reference back (refcount-1; freed at 0). GPU work of
 * this process that uses the tensor must have finished before: the unmap does not wait for it. */
MCD_API int32_t mcd_release(mcd_client* client, const char* name);
/* Unmaps without touching the refcount. */
MCD_API int32_t mcd_close(mcd_client* client, const char* name);
/* Gives one reference back (refcount-1; freed at 0) and leaves this process's mapping alone:
 * for a process that still uses the memory through another reference of its own. */
MCD_API int32_t mcd_release_reference(mcd_client* client, const char* name);
/* mcd_release_reference of `count` tensors (distinct names) in one Redis round trip, all or
 * nothing, as mcd_release_many but leaving the mappings alone. */
MCD_API int32_t mcd_release_references(mcd_client* client, const char* const* names, size_t count);
/* Copies `bytes` (at most the tensor's) between the tensor and host memory, mapping the tensor
 * here for the copy. Any device: a GPU tensor is copied by this process's worker for that
 * device, and the copy is complete on return. A copy to host takes no reference, and answers
 * MCD_ERR_NOT_FOUND (nothing to trust in dst) if the tensor was removed while it copied; a
 * copy from host holds a reference of its own while it writes (refcount+1, then -1), except
 * in a client whose references would be bound to init (pid 1), which takes none. */
MCD_API int32_t mcd_copy_to_host(mcd_client* client, const char* name, void* dst, uint64_t bytes);
MCD_API int32_t mcd_copy_from_host(mcd_client* client, const char* name, const void* src,
                                   uint64_t bytes);
/* The same through a view whose reference this process holds (from mcd_get or mcd_get_set; found
 * open here by its name and data, which may not be NULL): its own mapping, whatever tensor its
 * name names now, without a check afterwards. */
MCD_API int32_t mcd_view_to_host(mcd_client* client, const mcd_tensor* view, void* dst,
                                 uint64_t bytes);
MCD_API int32_t mcd_view_from_host(mcd_client* client, const mcd_tensor* view, const void* src,
                                   uint64_t bytes);
/* mcd_close of that view's own mapping. */
MCD_API int32_t mcd_close_view(mcd_client* client, const mcd_tensor* view);
/* The whole record as a JSON object (the keys of mcd-ls --json). Free *json_out with mcd_free. */
MCD_API int32_t mcd_stat_json(mcd_client* client, const char* name, char** json_out);
/* Reads the record; data is NULL. */
MCD_API int32_t mcd_stat(mcd_client* client, const char* name, mcd_tensor* out);
/* A JSON array of the records whose names match `glob` (NULL: all). Free *json_out with mcd_free.
 */
MCD_API int32_t mcd_list_json(mcd_client* client, const char* glob, char** json_out);
/* A JSON array of the names of tensor set `set`'s members still there, sorted ([]: no such set).
 * Free *json_out with mcd_free. */
MCD_API int32_t mcd_set_members_json(mcd_client* client, const char* set, char** json_out);

MCD_API void mcd_free(void* p);

/* For language bindings that make DLPack capsules over mapped tensors in their own language (the
 * Python package): the destructor to give PyCapsule_New for a "dltensor" or
 * "dltensor_versioned" capsule. When no consumer took the capsule, it calls the managed tensor's
 * deleter, with any Python exception pending set aside meanwhile and put back after (a consumer
 * that refuses a capsule drops it with its exception set). Only ever call it from a Python
 * process: it finds the Python C API there. */
MCD_API void mcd_dlpack_capsule_destructor(void* capsule);
/* "ok", "not_found", ...; "unknown" for other values. Static storage. */
MCD_API const char* mcd_error_name(int32_t code);
/* The detail message of the last failed call on `client` ("" when none). Valid until the next
 * call on that client. NULL client: the last mcd_connect failure of this thread. */
MCD_API const char* mcd_last_error(const mcd_client* client);

#ifdef __cplusplus
}
#endif

#endif /* MEMCUDA_MEMCUDA_H_ */
