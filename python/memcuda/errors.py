# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""memcuda's errors as exceptions: one class per stable code name of memcuda(7) and the tools'
exit-code table. Each carries `code` (the name, e.g. "not_found") and `errno` (the C ABI's value);
classes also derive from the Python built-in that fits, so `except KeyError` catches not_found."""

import builtins
from typing import Dict, Optional, Type


class MemcudaError(Exception):
    """A call to mcd-serve or libmemcuda failed; `code` names why."""

    code = "internal"
    errno = 16

    def __init__(self, message: str, code: Optional[str] = None,
                 errno: Optional[int] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if errno is not None:
            self.errno = errno

    def __str__(self) -> str:
        return "%s (%s)" % (self.args[0], self.code)


# One class per C ABI value, written out (not made in a loop) so that type checkers see them.
# The table of memcuda.h: the value, the code's name, and the Python built-in that fits.
class InvalidArgument(MemcudaError, ValueError):
    """memcuda error "invalid_argument"."""

    code = "invalid_argument"
    errno = 1


class NotFound(MemcudaError, KeyError):
    """memcuda error "not_found"."""

    code = "not_found"
    errno = 2


class AlreadyExists(MemcudaError, FileExistsError):
    """memcuda error "already_exists"."""

    code = "already_exists"
    errno = 3


class NotReady(MemcudaError):
    """memcuda error "not_ready"."""

    code = "not_ready"
    errno = 4


class OutOfMemory(MemcudaError, MemoryError):
    """memcuda error "out_of_memory"."""

    code = "out_of_memory"
    errno = 5


class Unavailable(MemcudaError, ConnectionError):
    """memcuda error "unavailable"."""

    code = "unavailable"
    errno = 6


class NoDevice(MemcudaError):
    """memcuda error "no_device"."""

    code = "no_device"
    errno = 7


class Timeout(MemcudaError, TimeoutError):
    """memcuda error "timeout"."""

    code = "timeout"
    errno = 8


class RedisError(MemcudaError):
    """memcuda error "redis_error"."""

    code = "redis_error"
    errno = 9


class UnexpectedReply(MemcudaError):
    """memcuda error "unexpected_reply"."""

    code = "unexpected_reply"
    errno = 10


class AuthFailed(MemcudaError, PermissionError):
    """memcuda error "auth_failed"."""

    code = "auth_failed"
    errno = 11


class IOFailure(MemcudaError, OSError):
    """memcuda error "io_error"."""

    code = "io_error"
    errno = 12


class CudaError(MemcudaError):
    """memcuda error "cuda_error"."""

    code = "cuda_error"
    errno = 13


class Stopped(MemcudaError):
    """memcuda error "stopped"."""

    code = "stopped"
    errno = 14


class WouldDeadlock(MemcudaError):
    """memcuda error "would_deadlock"."""

    code = "would_deadlock"
    errno = 15


class Internal(MemcudaError):
    """memcuda error "internal"."""

    code = "internal"
    errno = 16


class PermissionDenied(MemcudaError, PermissionError):
    """memcuda error "permission_denied"."""

    code = "permission_denied"
    errno = 17


class WrongNode(MemcudaError):
    """memcuda error "wrong_node"."""

    code = "wrong_node"
    errno = 18


class TooLarge(MemcudaError, ValueError):
    """memcuda error "too_large"."""

    code = "too_large"
    errno = 19


class Unsupported(MemcudaError):
    """memcuda error "unsupported"."""

    code = "unsupported"
    errno = 20


class TryAgain(MemcudaError):
    """memcuda error "try_again"."""

    code = "try_again"
    errno = 21


class NotHeld(MemcudaError):
    """memcuda error "not_held"."""

    code = "not_held"
    errno = 22


# By C ABI value: every class above (Released, below, has none of the ABI's).
_BY_ERRNO: Dict[int, Type[MemcudaError]] = {cls.errno: cls for cls in MemcudaError.__subclasses__()}
__all__ = [  # a literal, for type checkers
    "MemcudaError", "Released", "error_for",
    "InvalidArgument", "NotFound", "AlreadyExists", "NotReady", "OutOfMemory", "Unavailable",
    "NoDevice", "Timeout", "RedisError", "UnexpectedReply", "AuthFailed", "IOFailure", "CudaError",
    "Stopped", "WouldDeadlock", "Internal", "PermissionDenied", "WrongNode", "TooLarge",
    "Unsupported", "TryAgain", "NotHeld",
]


class Released(MemcudaError, builtins.ValueError):
    """The tensor object was released: it exports no new array."""

    code = "released"
    errno = -1


def error_for(errno: int, message: str, code: Optional[str] = None) -> MemcudaError:
    """The exception for a C ABI code."""
    cls = _BY_ERRNO.get(errno, MemcudaError)
    return cls(message, code=code if cls is MemcudaError else None,
               errno=errno if cls is MemcudaError else None)
