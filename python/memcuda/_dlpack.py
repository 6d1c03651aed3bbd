# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""DLPack capsules made in pure Python (ctypes), to the DLPack 0.8 ABI that every consumer
reads (PyTorch, CuPy, JAX, NumPy >= 1.22): a DLManagedTensor whose deleter drops the owner
object that keeps the memory mapped, in a capsule named "dltensor" whose destructor calls the
deleter when no consumer took it."""

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


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _Deleter),
]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

# Every DLManagedTensor handed out and not yet deleted, by its address: the ctypes objects it is
# made of, and the owner that keeps the memory mapped. The deleter removes it.
_live = {}


@_Deleter
def _delete(managed):
    _live.pop(ctypes.addressof(managed.contents), None)


# The capsule's destructor gets the capsule as it is being freed: a raw pointer, never a
# py_object (which would take a new reference to a dying object).
@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    if _api.PyCapsule_IsValid(capsule, b"dltensor"):  # not consumed: nobody will call the deleter
        address = _api.PyCapsule_GetPointer(capsule, b"dltensor")
        _live.pop(address, None)


# Made once: a capsule is made on every view, in the time a consumer waits for it.
_destructor_address = ctypes.cast(_capsule_destructor, ctypes.c_void_p)


def capsule(data, device_type, device_id, shape, dl_dtype, owner):
    """A "dltensor" capsule over `data` (a compact row-major array of `shape`), keeping `owner`
    alive until the consumer's array goes."""
    dims = (ctypes.c_int64 * len(shape))(*shape)
    # Strides NULL (compact row-major), byte_offset 0 and manager_ctx NULL are the zeroes the
    # structure starts with.
    managed = DLManagedTensor(DLTensor(data, DLDevice(device_type, device_id), len(shape),
                                       DLDataType(dl_dtype[0], dl_dtype[1], 1), dims),
                              None, _delete)
    address = ctypes.addressof(managed)
    _live[address] = (managed, dims, owner)
    return _api.PyCapsule_New(address, b"dltensor", _destructor_address)


def live_count():
    """DLManagedTensors handed out whose consumer has not deleted them yet (for tests)."""
    return len(_live)
