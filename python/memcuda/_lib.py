# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""libmemcuda's C ABI (memcuda.h) through ctypes: finding the library and declaring its calls."""

import ctypes
import ctypes.util
import os
import shutil
import struct

MAX_DIMS = 8
DEVICE_CPU = -1
ABI_VERSION = 2


class Tensor(ctypes.Structure):
    """struct mcd_tensor."""

    _fields_ = [
        ("name", ctypes.c_char * 201),
        ("dtype", ctypes.c_char * 8),
        ("device", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("bytes", ctypes.c_uint64),
        ("refcount", ctypes.c_int64),
        ("data", ctypes.c_void_p),
    ]


# struct mcd_tensor as a struct format in the machine's own layout (as the C compiler lays it out),
# for reading many records at once (records_at).
_RECORD = struct.Struct("@201s8sii%dqQqP" % MAX_DIMS)
if (_RECORD.size != ctypes.sizeof(Tensor) or
        struct.calcsize("@201s8sii%dqQq" % MAX_DIMS) != Tensor.data.offset):
    raise ImportError("memcuda: struct mcd_tensor is laid out here unlike its ctypes declaration")


def records_at(address, count):
    """The fields of the `count` records of an array of struct mcd_tensor at `address`, each as
    (name, dtype, device, shape, bytes, data): one copy of the array and one unpack a record,
    where a ctypes attribute read of each field costs more than all of that (a model's 291 set
    members: ~1 us a record against ~3)."""
    if count == 0:
        return []
    raw = ctypes.string_at(address, count * _RECORD.size)
    return [(f[0].partition(b"\0")[0].decode(), f[1].partition(b"\0")[0].decode(), f[2],
             f[4:4 + min(f[3], MAX_DIMS)], f[12], f[14] or None) for f in _RECORD.iter_unpack(raw)]


class CreateOptions(ctypes.Structure):
    """struct mcd_create_options."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("lifetime", ctypes.c_int32),
        ("no_init", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("owner_pid", ctypes.c_int64),
        ("data", ctypes.c_void_p),
        ("data_bytes", ctypes.c_uint64),
    ]


def _candidates():
    """Where libmemcuda may be, most specific first."""
    explicit = os.environ.get("MEMCUDA_LIBRARY")
    if explicit:
        yield explicit
        return
    # Beside the tools on PATH, as `cmake --install` lays them out (PREFIX/bin, PREFIX/lib).
    serve = shutil.which("mcd-serve")
    if serve:
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(serve)))
        for libdir in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu")):
            yield os.path.join(prefix, libdir, "libmemcuda.so")
    found = ctypes.util.find_library("memcuda")
    if found:
        yield found
    for prefix in ("/usr/local", "/usr"):
        yield os.path.join(prefix, "lib", "libmemcuda.so")


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "memcuda: libmemcuda not found (tried: %s); install memcuda, put mcd-serve on PATH, "
        "or set MEMCUDA_LIBRARY to the library's path" % ", ".join(tried) or "nothing")


lib = _load()


def _declare(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


_client = ctypes.c_void_p
_i32, _i64, _u64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64
_str = ctypes.c_char_p
_declare("mcd_version", _str)
_declare("mcd_abi_version", _i32)
_declare("mcd_connect", _i32, _str, _str, _i32, ctypes.POINTER(_client))
_declare("mcd_disconnect", None, _client)
_declare("mcd_create_ex", _i32, _client, _str, _str, ctypes.POINTER(_i64), _i32, _i32,
         ctypes.POINTER(CreateOptions), ctypes.POINTER(Tensor))
_declare("mcd_get", _i32, _client, _str, ctypes.POINTER(Tensor))
_declare("mcd_get_many", _i32, _client, ctypes.POINTER(_str), ctypes.c_size_t,
         ctypes.POINTER(Tensor))
class SetMember(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("ndim", ctypes.c_int32),
                ("data", ctypes.c_void_p), ("data_bytes", ctypes.c_uint64)]


_declare("mcd_create_set", _i32, _client, _str, ctypes.POINTER(SetMember), ctypes.c_size_t, _i32,
         ctypes.POINTER(CreateOptions))
_declare("mcd_release_many", _i32, _client, ctypes.POINTER(_str), ctypes.c_size_t)
_declare("mcd_get_set", _i32, _client, _str, ctypes.POINTER(ctypes.c_void_p),
         ctypes.POINTER(ctypes.c_size_t))
_declare("mcd_release_set", _i32, _client, ctypes.POINTER(Tensor), ctypes.c_size_t)
_declare("mcd_close_view", _i32, _client, ctypes.POINTER(Tensor))
_declare("mcd_release_references", _i32, _client, ctypes.POINTER(_str), ctypes.c_size_t)
_declare("mcd_view_to_host", _i32, _client, ctypes.POINTER(Tensor), ctypes.c_void_p,
         ctypes.c_uint64)
_declare("mcd_view_from_host", _i32, _client, ctypes.POINTER(Tensor), ctypes.c_void_p,
         ctypes.c_uint64)
_declare("mcd_load_safetensors", _i32, _client, _str, _str, _i32)
_declare("mcd_save_safetensors", _i32, _client, _str, _str)
_declare("mcd_open", _i32, _client, _str, ctypes.POINTER(Tensor))
_declare("mcd_release", _i32, _client, _str)
_declare("mcd_release_reference", _i32, _client, _str)
_declare("mcd_close", _i32, _client, _str)
_declare("mcd_copy_to_host", _i32, _client, _str, ctypes.c_void_p, _u64)
_declare("mcd_copy_from_host", _i32, _client, _str, ctypes.c_void_p, _u64)
_declare("mcd_stat_json", _i32, _client, _str, ctypes.POINTER(ctypes.c_void_p))
_declare("mcd_list_json", _i32, _client, _str, ctypes.POINTER(ctypes.c_void_p))
_declare("mcd_set_members_json", _i32, _client, _str, ctypes.POINTER(ctypes.c_void_p))
_declare("mcd_free", None, ctypes.c_void_p)
_declare("mcd_error_name", _str, _i32)
_declare("mcd_last_error", _str, _client)
if hasattr(lib, "mcd_dlpack_capsule_destructor"):  # else _dlpack says which library is too old
    _declare("mcd_dlpack_capsule_destructor", None, ctypes.c_void_p)

if lib.mcd_abi_version() != ABI_VERSION:
    raise ImportError("memcuda: libmemcuda has ABI %d, this package speaks ABI %d"
                      % (lib.mcd_abi_version(), ABI_VERSION))


def take_string(pointer):
    """A string the library handed out, freed."""
    try:
        return ctypes.string_at(pointer.value).decode()
    finally:
        lib.mcd_free(pointer)
