# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""memcuda dtypes and what NumPy, the array interfaces and DLPack call them."""

from .errors import InvalidArgument

# name: (bytes, NumPy typestr or None, DLPack (code, bits))
# DLPack codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool.
DTYPES = {
    "f16": (2, "<f2", (2, 16)),
    "bf16": (2, None, (4, 16)),
    "f32": (4, "<f4", (2, 32)),
    "f64": (8, "<f8", (2, 64)),
    "i8": (1, "|i1", (0, 8)),
    "i16": (2, "<i2", (0, 16)),
    "i32": (4, "<i4", (0, 32)),
    "i64": (8, "<i8", (0, 64)),
    "u8": (1, "|u1", (1, 8)),
    "u16": (2, "<u2", (1, 16)),
    "u32": (4, "<u4", (1, 32)),
    "u64": (8, "<u8", (1, 64)),
    "bool": (1, "|b1", (6, 8)),
}

_ALIASES = {
    "float16": "f16", "half": "f16", "bfloat16": "bf16", "float32": "f32", "float": "f32",
    "float64": "f64", "double": "f64", "int8": "i8", "int16": "i16", "int32": "i32",
    "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "bool_": "bool", "b1": "bool",
}


def dtype_name(dtype):
    """memcuda's name for `dtype`: a name ("f32", "float32"), a NumPy dtype or type, or a
    torch.dtype."""
    if dtype is float or dtype is int or dtype is bool:
        # Python's own types, as NumPy reads them: float is float64, int int64.
        name = {float: "f64", int: "i64", bool: "bool"}[dtype]
    elif getattr(dtype, "byteorder", "=") == ">":
        raise InvalidArgument("dtype %r is big-endian; tensors are little-endian" % (dtype,))
    elif isinstance(dtype, str):
        name = dtype
    else:
        # torch.float32 -> "float32"; numpy.dtype('float32').name / numpy.float32.__name__
        name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or str(dtype)
        name = name.replace("torch.", "")
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise InvalidArgument("unknown dtype %r (expected one of %s)" % (dtype, " ".join(DTYPES)))
    return name
