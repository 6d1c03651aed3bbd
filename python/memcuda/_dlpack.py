# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""DLPack capsules made in pure Python (ctypes) over a tensor's mapping: "dltensor" capsules of
DLPack 0.8, which every consumer reads (PyTorch, CuPy, JAX, NumPy >= 1.22), and
"dltensor_versioned" capsules of DLPack 1.0 for a consumer that asks for them (max_version).
The managed tensor's deleter drops the owner object that keeps the memory mapped. The capsule's
destructor, which calls that deleter when no consumer took the capsule, is libmemcuda's
mcd_dlpack_capsule_destructor, in C: a consumer that refuses a capsule drops it with its
exception pending, which Python code run then would lose (and the deleter's call with it)."""

import ctypes

KDL_CPU = 1
KDL_CUDA = 2


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _Deleter),
]
_DeleterVersioned = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DeleterVersioned),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

# Every managed tensor handed out and not yet deleted, by its address: the ctypes objects it is
# made of, and the owner that keeps the memory mapped. The deleter removes it.
_live = {}


@_Deleter
def _delete(managed):
    _live.pop(ctypes.addressof(managed.contents), None)


@_DeleterVersioned
def _delete_versioned(managed):
    _live.pop(ctypes.addressof(managed.contents), None)


_destructor_address = None  # libmemcuda's, set by use_destructor_of


def use_destructor_of(lib):
    """Takes the capsule destructor from libmemcuda (`lib`, a ctypes.CDLL)."""
    global _destructor_address
    if not hasattr(lib, "mcd_dlpack_capsule_destructor"):
        raise ImportError("memcuda: this libmemcuda is older than the package (it has no "
                          "mcd_dlpack_capsule_destructor): install the two from one release")
    _destructor_address = ctypes.cast(lib.mcd_dlpack_capsule_destructor, ctypes.c_void_p)


def capsule(data, device_type, device_id, shape, dl_dtype, owner, versioned=False):
    """A capsule over `data` (a compact row-major array of `shape`), keeping `owner` alive until
    the consumer's array goes: "dltensor_versioned" (DLPack 1.0, writable) when `versioned`,
    else "dltensor"."""
    dims = (ctypes.c_int64 * len(shape))(*shape)
    # Strides NULL (compact row-major), byte_offset 0, manager_ctx NULL and flags 0 (writable,
    # not a copy) are the zeroes the structures start with.
    tensor = DLTensor(data, DLDevice(device_type, device_id), len(shape),
                      DLDataType(dl_dtype[0], dl_dtype[1], 1), dims)
    if versioned:
        managed = DLManagedTensorVersioned(DLPackVersion(1, 0), None, _delete_versioned, 0, tensor)
        name = b"dltensor_versioned"
    else:
        managed = DLManagedTensor(tensor, None, _delete)
        name = b"dltensor"
    address = ctypes.addressof(managed)
    _live[address] = (managed, dims, owner)
    return _api.PyCapsule_New(address, name, _destructor_address)


def live_count():
    """Managed tensors handed out whose consumer has not deleted them yet (for tests)."""
    return len(_live)
