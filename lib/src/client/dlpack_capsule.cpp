// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The destructor of the DLPack capsules a language binding makes over libmemcuda's mappings (the
// Python package's _dlpack.py), in C rather than in the binding's language: a consumer that
// refuses a capsule (NumPy with a dtype it lacks) drops it with its own exception pending, and
// binding code run then loses that exception (the consumer fails with SystemError) and its own
// call of the deleter with it, leaking the reference and the mapping. Here the pending exception
// is set aside around the deleter, as DLPack's producers written in C do. The Python C API is
// looked up in the running process: this is only ever called by a Python capsule, and
// libmemcuda links no Python.
#include <dlfcn.h>

#include <cstdint>

#include "memcuda/memcuda.h"

namespace {

// DLPack's structures, as far as the deleter (dlpack.h of DLPack 1.0; its DLTensor is 48 bytes
// on every 64-bit ABI: data, device, ndim, dtype, shape, strides, byte_offset).
struct DLTensorLayout {
  void* data;
  int32_t device_type, device_id;
  int32_t ndim;
  uint8_t code, bits;
  uint16_t lanes;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {  // "dltensor" capsules (DLPack before 1.0)
  DLTensorLayout dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
struct DLManagedTensorVersioned {  // "dltensor_versioned" capsules (DLPack 1.0)
  uint32_t major, minor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensorLayout dl_tensor;
};

struct PythonApi {
  int (*is_valid)(void* capsule, const char* name);
  void* (*get_pointer)(void* capsule, const char* name);
  void (*fetch)(void** type, void** value, void** traceback);
  void (*restore)(void* type, void* value, void* traceback);
};

const PythonApi* Python() {
  static const PythonApi api = [] {
    PythonApi a{};
    a.is_valid = reinterpret_cast<decltype(a.is_valid)>(dlsym(RTLD_DEFAULT, "PyCapsule_IsValid"));
    a.get_pointer =
        reinterpret_cast<decltype(a.get_pointer)>(dlsym(RTLD_DEFAULT, "PyCapsule_GetPointer"));
    a.fetch = reinterpret_cast<decltype(a.fetch)>(dlsym(RTLD_DEFAULT, "PyErr_Fetch"));
    a.restore = reinterpret_cast<decltype(a.restore)>(dlsym(RTLD_DEFAULT, "PyErr_Restore"));
    return a;
  }();
  return api.is_valid && api.get_pointer && api.fetch && api.restore ? &api : nullptr;
}

}  // namespace

extern "C" void mcd_dlpack_capsule_destructor(void* capsule) {
  const PythonApi* py = Python();
  if (py == nullptr) return;  // not in a Python process: no capsule to destroy
  void *type = nullptr, *value = nullptr, *traceback = nullptr;
  py->fetch(&type, &value, &traceback);
  // A consumer that took the tensor renamed its capsule ("used_dltensor..."): it calls the
  // deleter itself, later.
  if (py->is_valid(capsule, "dltensor")) {
    auto* managed = static_cast<DLManagedTensor*>(py->get_pointer(capsule, "dltensor"));
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  } else if (py->is_valid(capsule, "dltensor_versioned")) {
    auto* managed =
        static_cast<DLManagedTensorVersioned*>(py->get_pointer(capsule, "dltensor_versioned"));
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  }
  py->restore(type, value, traceback);
}
