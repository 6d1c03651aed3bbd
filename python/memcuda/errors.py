# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""memcuda's errors as exceptions: one class per stable code name of memcuda(7) and the tools'
exit-code table. Each carries `code` (the name, e.g. "not_found") and `errno` (the C ABI's value);
classes also derive from the Python built-in that fits, so `except KeyError` catches not_found."""

import builtins


class MemcudaError(Exception):
    """A call to mcd-serve or libmemcuda failed; `code` names why."""

    code = "internal"
    errno = 16

    def __init__(self, message, code=None, errno=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        if errno is not None:
            self.errno = errno

    def __str__(self):
        return "%s (%s)" % (self.args[0], self.code)


# (C ABI value, code name, class name, extra built-in base)
_TABLE = [
    (1, "invalid_argument", "InvalidArgument", ValueError),
    (2, "not_found", "NotFound", KeyError),
    (3, "already_exists", "AlreadyExists", FileExistsError),
    (4, "not_ready", "NotReady", None),
    (5, "out_of_memory", "OutOfMemory", MemoryError),
    (6, "unavailable", "Unavailable", ConnectionError),
    (7, "no_device", "NoDevice", None),
    (8, "timeout", "Timeout", TimeoutError),
    (9, "redis_error", "RedisError", None),
    (10, "unexpected_reply", "UnexpectedReply", None),
    (11, "auth_failed", "AuthFailed", PermissionError),
    (12, "io_error", "IOFailure", OSError),
    (13, "cuda_error", "CudaError", None),
    (14, "stopped", "Stopped", None),
    (15, "would_deadlock", "WouldDeadlock", None),
    (16, "internal", "Internal", None),
    (17, "permission_denied", "PermissionDenied", PermissionError),
    (18, "wrong_node", "WrongNode", None),
    (19, "too_large", "TooLarge", ValueError),
    (20, "unsupported", "Unsupported", None),
    (21, "try_again", "TryAgain", None),
    (22, "not_held", "NotHeld", None),
]

_BY_ERRNO = {}
__all__ = ["MemcudaError", "Released", "error_for"]
for _errno, _code, _name, _base in _TABLE:
    _bases = (MemcudaError,) if _base is None else (MemcudaError, _base)
    _cls = type(_name, _bases, {"code": _code, "errno": _errno, "__module__": __name__,
                                "__str__": MemcudaError.__str__,
                                "__doc__": "memcuda error %r." % _code})
    globals()[_name] = _cls
    _BY_ERRNO[_errno] = _cls
    __all__.append(_name)


class Released(MemcudaError, builtins.ValueError):
    """The tensor object was released: it exports no new array."""

    code = "released"
    errno = -1


def error_for(errno, message, code=None):
    """The exception for a C ABI code."""
    cls = _BY_ERRNO.get(errno, MemcudaError)
    return cls(message, code=code if cls is MemcudaError else None,
               errno=errno if cls is MemcudaError else None)
