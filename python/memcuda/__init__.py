# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""memcuda for Python: named tensors that live in mcd-serve, opened in place as NumPy, PyTorch,
CuPy and JAX arrays.

    import memcuda, torch
    mc = memcuda.connect()                         # MCD_REDIS_URL, the private Redis, ...
    t = mc.create("weights", (1024, 1024), "f32")  # on GPU 0, zeroed; device="cpu" for host memory
    torch.from_dlpack(t).normal_()                 # written in place
    w = mc.get("weights")                          # in any other process of the machine
    x = torch.from_dlpack(w)                       # the same memory, no copy

A Tensor holds one reference to the named tensor for this process (the Tensors of one get_set:
the set's one reference, together), and its mapping. It gives
both back when the last array that views the memory is garbage-collected, or at release() (or
the end of a `with` block) if none does by then; an array that still views the memory after
release() keeps it mapped until it goes, so a view can never outlive its memory. See
docs/python.md.
"""

from __future__ import annotations

import collections
import collections.abc
import ctypes
import gc
import json
import numbers
import operator
import os
import re
import threading
import weakref
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _dlpack
from ._dtypes import DTYPES, dtype_name
from . import _lib
from ._lib import DEVICE_CPU, CreateOptions, Tensor as _CTensor, lib as _clib, take_string
from .errors import *  # noqa: F401,F403  (the exception classes are part of the API)
from . import errors
from .errors import InvalidArgument, NotFound, Released, error_for

_dlpack.use_destructor_of(_clib)

__all__ = ["connect", "Client", "Tensor", "as_torch", "version"] + errors.__all__
__version__ = "0.1.0"

# What the calls take: a shape as dimensions or one int; a dtype by memcuda's name ("f32"), NumPy's
# ("float32", numpy.float32) or torch's (torch.float32); a device as a GPU ordinal, "cuda:N" or
# "cpu"; a path as str or os.PathLike.
Shape = Union[int, Sequence[int]]
DType = Any
Device = Union[int, str]
PathLike = Union[str, "os.PathLike[str]"]


def version() -> str:
    """The version of the libmemcuda this package runs on."""
    return _clib.mcd_version().decode()


def connect(redis_url: Optional[str] = None, node: Optional[str] = None,
            timeout: float = 5.0) -> "Client":
    """A client of the node's mcd-serve. `redis_url` as the tools take it (None: MCD_REDIS_URL,
    REDIS_URL, else the private Redis of `mcd-serve --spawn-redis` (none: memcuda.Unavailable); the
    password may come from MCD_REDIS_PASSWORD or MCD_REDIS_PASSWORD_FILE); `node` None:
    MCD_NODE, else the host name, or the node of the only live server when the host name has
    none; `timeout` in seconds, per request."""
    return Client(redis_url, node, timeout)


# How many tensors a Client remembers having created (Client._created).
_CREATED_TRACKED = 1 << 16


class Client:
    """One connection to Redis and the node's server. Thread-safe: calls are serialised."""

    def __init__(self, redis_url: Optional[str] = None, node: Optional[str] = None,
                 timeout: float = 5.0) -> None:
        handle = ctypes.c_void_p()
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or \
                not 0.001 <= timeout <= 2**31 / 1000:
            raise InvalidArgument("timeout must be 0.001 to %d seconds, not %r"
                                  % (2**31 // 1000, timeout))
        rc = _clib.mcd_connect(_bytes(redis_url, "Redis URL"), _bytes(node, "node"),
                               int(timeout * 1000),
                              ctypes.byref(handle))
        if rc != 0:
            raise error_for(rc, _clib.mcd_last_error(None).decode())
        self._handle = handle
        self._lock = threading.RLock()
        # By name: the mappings of this client alive here (each with the reference it took),
        # and how many of their references rm() gave back already. A mapping whose reference
        # rm() took gives back none when it goes, only its mapping: otherwise, holding none
        # any more, this process would give back one bound to no process (the creator's).
        self._live = collections.Counter()
        self._given = collections.Counter()
        # By name: the leaders of this client's get_set holds alive here, whose reference rm()
        # must not give back (it would unprotect every member's views).
        self._held_sets = collections.Counter()
        # By name: the creator's references of the tensors this client created (create()) and
        # rm() has not given back yet: rm() of one gives that back, and a Tensor of it alive here
        # still gives back its own when it goes. Bounded, as libmemcuda's own book: past the
        # bound, rm() of a tensor created here is as mcd-rm's.
        self._created = collections.Counter()
        # While release_many runs: the names whose references its Tensors' mappings give back,
        # sent together at its end.
        self._batch = None

    # -- the lifecycle -----------------------------------------------------------------------

    def create(self, name: str, shape: Shape, dtype: DType = "f32", device: Device = 0,
               lifetime: str = "heap", init: str = "zero", owner_pid: Optional[int] = None,
               data: Any = None) -> "Tensor":
        """Creates tensor `name` and returns it, to be opened here on first use. `device`: a GPU
        ordinal or "cpu"; `lifetime`: "heap" (lives until its last reference is given back: see
        rm) or "stack" (also freed when `owner_pid`, default this process, exits); `init`:
        "zero" or "none". The creator's reference is bound to no process, as mcd-create's: the
        tensor outlives this process until rm() (a heap tensor).

        `data`: host bytes to fill it with (any object with the buffer protocol, C-contiguous,
        exactly the tensor's size: a NumPy array, bytes). The tensor is then ready only once
        every byte is in: other processes' gets answer NotReady until then (`mcd-get --wait`
        waits through it), and if this process dies first, the tensor goes."""
        shape = _shape(shape)
        options = CreateOptions()
        options.size = ctypes.sizeof(CreateOptions)
        if lifetime not in ("heap", "stack"):
            raise InvalidArgument("lifetime must be 'heap' or 'stack', not %r" % (lifetime,))
        if init not in ("zero", "none"):
            raise InvalidArgument("init must be 'zero' or 'none', not %r" % (init,))
        options.lifetime = 1 if lifetime == "stack" else 0
        options.no_init = 1 if init == "none" else 0
        options.owner_pid = 0 if owner_pid is None else _whole(owner_pid, "owner_pid", 0, 2**31 - 1)
        keep = None  # what options.data points into, alive until the call returns
        if data is not None:
            keep, options.data, options.data_bytes = _host_buffer(data)
        dims = (ctypes.c_int64 * len(shape))(*shape)
        out = _CTensor()
        with self._lock:
            self._call(_clib.mcd_create_ex, _bytes(name), dtype_name(dtype).encode(), dims,
                       len(shape), _device(device), ctypes.byref(options), ctypes.byref(out))
            if len(self._created) < _CREATED_TRACKED:
                self._created[name] += 1
        return Tensor(self, None, _Record.of(out))

    def get(self, name: str) -> "Tensor":
        """Takes a reference to tensor `name` for this process and opens it here."""
        out = _CTensor()
        with self._lock:  # the reference and its count at once: rm() never sees one alone
            self._call(_clib.mcd_get, _bytes(name), ctypes.byref(out))
            record = _Record.of(out)
            mapping = _Mapping(self, record)
        return Tensor(self, mapping, record)

    def get_many(self, names: Iterable[str]) -> List["Tensor"]:
        """get() for every tensor of `names` (distinct) in one Redis round trip (64 tensors
        per round trip for more, each 64 opened while the next are got), all or nothing: on an
        error no reference is kept, and the error names the tensor that stopped it. Tensors that
        share an allocation (a tensor set's members) are mapped once. A list of Tensors in the
        order of `names` (none for none)."""
        if isinstance(names, (str, bytes)):
            raise InvalidArgument("get_many takes a list of names, not one name")
        names = [_str(name) for name in names]
        if not names:
            return []  # as release_many of none
        array = (ctypes.c_char_p * len(names))(*[name.encode() for name in names])
        out = (_CTensor * len(names))()
        with self._lock:
            self._call(_clib.mcd_get_many, array, len(names), out)
            records = _Record.many(ctypes.addressof(out), len(names))
            return [Tensor(self, _Mapping(self, record), record) for record in records]

    def create_set(self, name: str, members: Sequence[tuple], device: Device = 0,
                   init: str = "zero") -> Dict[str, "Tensor"]:
        """Creates tensor set `name`: `members` is a list of (member name, shape, dtype) or
        (member name, shape, dtype, data), each named without the "name/" prefix, all laid out
        in one allocation, all made or none (data: host bytes as create() takes them, for every
        member or none; the set is ready only once every byte is in). Returns get_set(name)."""
        name = _str(name).rstrip("/")
        if init not in ("zero", "none"):
            raise InvalidArgument("init must be 'zero' or 'none', not %r" % (init,))
        if isinstance(members, (str, bytes)) or not isinstance(members, Sequence):
            raise InvalidArgument("members must be a list of (name, shape, dtype[, data]), not %s"
                                  % type(members).__name__)
        array = (_lib.SetMember * len(members))()
        keep = []  # what the structs point into, alive until the call returns
        for i, member in enumerate(members):
            if not isinstance(member, (tuple, list)) or len(member) not in (3, 4):
                raise InvalidArgument("set member %r is not (name, shape, dtype[, data])"
                                      % (member,))
            member_name, shape, dtype = member[0], _shape(member[1]), member[2]
            dims = (ctypes.c_int64 * len(shape))(*shape)
            full = ("%s/%s" % (name, _str(member_name, "member name"))).encode()
            keep += [dims, full]
            array[i].name, array[i].dtype = full, dtype_name(dtype).encode()
            array[i].shape, array[i].ndim = dims, len(shape)
            if len(member) > 3 and member[3] is not None:
                held, array[i].data, array[i].data_bytes = _host_buffer(member[3])
                keep.append(held)
        options = CreateOptions()
        options.size = ctypes.sizeof(CreateOptions)
        options.no_init = 1 if init == "none" else 0
        self._call(_clib.mcd_create_set, _bytes(name), array, len(members), _device(device),
                   ctypes.byref(options))
        return self.get_set(name)

    def get_set(self, name: str) -> Dict[str, "Tensor"]:
        """Every member of tensor set `name` still there, opened with one mapping of the set's
        allocation, and one reference for the whole set, all in one Redis round trip: a dict of
        Tensors by member name without the "name/" prefix (as the set's safetensors file names
        them), sorted. The reference (counted on the member first by name: the set's memory
        stays while any member lives) is given back when the last of these Tensors and their
        arrays is gone, or at their release() (release_many of them: in a call of its own)."""
        name = _str(name).rstrip("/")
        array = ctypes.c_void_p()
        count = ctypes.c_size_t()
        with self._lock:
            self._call(_clib.mcd_get_set, _bytes(name), ctypes.byref(array), ctypes.byref(count))
            try:
                members = _Record.many(array.value, count.value)
                hold = _SetHold(self, [(record.name, record.data) for record in members])
                cut = len(name) + 1
                return {record.name[cut:]: Tensor(self, _Mapping(self, record, hold), record)
                        for record in members}
            finally:
                _clib.mcd_free(array)

    def load_safetensors(self, path: PathLike, name: str, device: Device = 0) -> List[str]:
        """Loads safetensors file `path` into a new tensor set `name` on `device`: each tensor of
        the file a member "name/<its name>", all in one allocation, all of them or none. Returns
        the members' names."""
        name = _str(name).rstrip("/")
        self._call(_clib.mcd_load_safetensors, _bytes(os.fspath(path), "path"), _bytes(name),
                   _device(device))
        return [record["name"] for record in self.ls(name + "/*")]

    def save_safetensors(self, name: str, path: PathLike) -> None:
        """Writes every member of tensor set `name` to safetensors file `path`."""
        self._call(_clib.mcd_save_safetensors, _bytes(_str(name).rstrip("/")),
                   _bytes(os.fspath(path), "path"))

    def release_many(self, tensors: Iterable["Tensor"]) -> None:
        """Tensor.release() of each of `tensors`, the references of those no exported array
        views any more given back in one Redis round trip (the others go with their last array,
        as release() says). Where that one call is refused, each is given back on its own, so
        that none is kept."""
        try:
            tensors = list(tensors)
        except TypeError:
            raise InvalidArgument("release_many takes Tensors, not %s"
                                  % type(tensors).__name__) from None
        for t in tensors:
            if not isinstance(t, Tensor):
                raise InvalidArgument("release_many takes Tensors, not %s" % type(t).__name__)
        with self._lock:
            self._batch = []
            try:
                for t in tensors:
                    t.release()
                gc.collect()  # mappings held in cycles go now too, inside the batch
            finally:
                names, self._batch = self._batch, None
            if not names:
                return
            # Their mappings are closed already, each as itself: the references alone go.
            array = (ctypes.c_char_p * len(names))(*[name.encode() for name in names])
            if _clib.mcd_release_references(self._handle, array, len(names)) != 0:
                for name in names:
                    _clib.mcd_release_reference(self._handle, name.encode())

    def stat(self, name: str) -> Dict[str, Any]:
        """The tensor's record as a dict (the keys of `mcd-ls --json`)."""
        text = ctypes.c_void_p()
        self._call(_clib.mcd_stat_json, _bytes(name), ctypes.byref(text))
        return json.loads(take_string(text))

    def ls(self, glob: str = "*") -> List[Dict[str, Any]]:
        """The records of the tensors whose names match `glob` (a Redis glob; "SET/": the members
        of tensor set SET), sorted by name."""
        text = ctypes.c_void_p()
        self._call(_clib.mcd_list_json, _bytes(glob), ctypes.byref(text))
        return json.loads(take_string(text))

    def rm(self, name: str) -> None:
        """Gives one reference to tensor `name` back: of a tensor this Client created, its
        creator's (the first rm() after create(); a Tensor of it alive here still gives back its
        own when it goes); else, as mcd-rm does, this process's own if it holds one, else one
        bound to no process; the tensor is freed at 0. Arrays of this process that view it stay
        valid: their mapping stays until its Tensor and arrays are gone, and when rm() gave back
        the reference a Tensor here held, that Tensor then gives back none of its own. Counted per Client: a Tensor of another Client
        of this process is not known here. Refused (InvalidArgument) for the member that holds
        the reference of a get_set of this Client still alive: it would give that back.

        "set/" stands for every member of tensor set "set", as for mcd-rm: one reference of each
        given back in one call, all or none (NotFound when no member is left)."""
        name = _str(name)
        of_set = len(name) > 1 and name.endswith("/")
        with self._lock:
            if of_set:
                text = ctypes.c_void_p()
                self._call(_clib.mcd_set_members_json, _bytes(name[:-1]), ctypes.byref(text))
                names = json.loads(take_string(text))
                if not names:
                    raise NotFound("no tensor set named %r" % name[:-1])
            else:
                names = [name]
            for member in names:
                if self._held_sets[member] > 0:
                    raise InvalidArgument(
                        "tensor %r holds the reference of a get_set of this Client (the set's "
                        "member first by name): give it back with that set's Tensors, or remove "
                        "it from another process (mcd-rm)" % member)
            # Booked before the call: a finalizer that runs inside it on this thread (the lock
            # is re-entrant) then closes its mapping only. Undone where the call fails (all or
            # none: it gave back none).
            creators = [member for member in names if self._created[member] > 0]
            for member in creators:
                self._drop(self._created, member)
            booked = [member for member in names
                      if member not in creators and self._live[member] > self._given[member]]
            for member in booked:
                self._given[member] += 1
            try:
                if not of_set:
                    self._call(_clib.mcd_release_reference, _bytes(name))
                else:
                    array = (ctypes.c_char_p * len(names))(*[m.encode() for m in names])
                    self._call(_clib.mcd_release_references, array, len(names))
            except BaseException:
                for member in booked:
                    if self._given[member] > 0:
                        self._drop(self._given, member)
                for member in creators:
                    self._created[member] += 1
                raise

    def close(self) -> None:
        """Nothing to do at once: the connection closes when the client and every Tensor of it
        are gone (a Tensor keeps the connection its release needs)."""

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle and _clib is not None:  # not during the interpreter's teardown of modules
            _clib.mcd_disconnect(handle)
            self._handle = None

    # -- calls into libmemcuda ---------------------------------------------------------------

    def _call(self, fn, *args):
        with self._lock:
            rc = fn(self._handle, *args)
            error = None if rc == 0 else _clib.mcd_last_error(self._handle).decode()
        if rc != 0:
            raise error_for(rc, error)

    def _opened(self, name):
        with self._lock:
            self._live[name] += 1

    @staticmethod
    def _drop(counter, name):
        counter[name] -= 1
        if counter[name] <= 0:
            del counter[name]  # no entry kept per name ever touched

    def _give_back_set(self, members):
        """The reference of a get_set and its members' mappings, given back when the last of
        its Tensors went: `members` (name, address) sorted by name, the reference counted as the
        first's (the leader's), as rm() sees it. Each mapping is closed as itself, not by name
        (a member freed since may share its name with a tensor opened here later). Called from
        a finalizer, as _give_back."""
        leader = members[0][0]
        views = (_CTensor * len(members))()
        for view, (name, data) in zip(views, members):
            view.name, view.data = name.encode(), data
        with self._lock:
            self._drop(self._live, leader)
            self._drop(self._held_sets, leader)
            if not self._handle:
                return
            if self._given[leader] > 0:  # rm() gave the reference back: the mappings only
                self._drop(self._given, leader)
                for view in views:
                    _clib.mcd_close_view(self._handle, ctypes.byref(view))
            else:
                _clib.mcd_release_set(self._handle, views, len(members))

    def _give_back(self, name, data):
        """A Tensor's reference and mapping (at `data`), given back when its last view went (its
        mapping only, when rm() gave its reference back). The mapping is closed as itself, not
        by name: a set held here may map a freed member of that name. Called from a finalizer,
        so maybe by the garbage collector of a thread that holds the lock already: the lock is
        re-entrant, and that thread is then between two calls into libmemcuda (which never calls
        back into Python), where a third one is safe."""
        view = _CTensor()
        view.name, view.data = name.encode(), data
        with self._lock:
            self._drop(self._live, name)
            if not self._handle:
                return
            _clib.mcd_close_view(self._handle, ctypes.byref(view))
            if self._given[name] > 0:
                self._drop(self._given, name)
            elif self._batch is not None and name not in self._batch:
                self._batch.append(name)  # release_many gives it back with the others
            else:
                _clib.mcd_release_reference(self._handle, name.encode())


class _Record:
    """What a C record (struct mcd_tensor) says, read out of it once: ctypes reads each field
    anew on every access, and a get_set of a model's 291 members read each several times."""

    __slots__ = ("name", "dtype", "device", "shape", "nbytes", "data")

    def __init__(self, name, dtype, device, shape, nbytes, data):
        self.name, self.dtype, self.device = name, dtype, device
        self.shape, self.nbytes, self.data = shape, nbytes, data

    @classmethod
    def of(cls, c):
        """The record of one struct mcd_tensor (a _CTensor)."""
        return cls.many(ctypes.addressof(c), 1)[0]

    @classmethod
    def many(cls, address, count):
        """The records of an array of `count` struct mcd_tensor at `address`."""
        return [cls(*fields) for fields in _lib.records_at(address, count)]


class _SetHold:
    """The one reference of a get_set and its members' mappings, given back when this object is
    garbage-collected: it is held by the _Mapping of every member it opened. `members`: their
    (name, address), in any order; the first by name holds the count."""

    def __init__(self, client, members):
        members = sorted(members)
        with client._lock:
            client._opened(members[0][0])
            client._held_sets[members[0][0]] += 1
        weakref.finalize(self, client._give_back_set, members)


class _Mapping:
    """One reference to a tensor and its mapping in this process, given back when this object
    is garbage-collected: it is held by the Tensor until release(), and by every array exported
    from it (a DLPack capsule's deleter drops its hold). A member of a get_set has neither of
    its own: it holds the set's _SetHold instead, which gives both back with the last member."""

    __slots__ = ("client", "name", "dtype", "device", "shape", "nbytes", "data", "hold",
                 "__weakref__")

    def __init__(self, client, record, hold=None):
        self.client = client  # a mapping keeps its client, which gives it back
        self.name = record.name
        self.dtype = record.dtype
        self.device = record.device
        self.shape = record.shape
        self.nbytes = record.nbytes
        self.data = record.data
        self.hold = hold
        if hold is None:
            client._opened(self.name)
            weakref.finalize(self, client._give_back, self.name, self.data)

    def view(self):
        """This mapping as the C ABI names a view: its name and address."""
        view = _CTensor()
        view.name, view.device, view.bytes, view.data = (self.name.encode(), self.device,
                                                         self.nbytes, self.data)
        return view


class Tensor:
    """A named tensor opened in this process. Exports __dlpack__/__dlpack_device__ (GPU and
    host), __cuda_array_interface__ (version 3, GPU) and __array_interface__ (host), all views of
    the same memory, never copies."""

    def __init__(self, client, mapping, record):
        self._client = client
        self._mapping = mapping  # None until first use for a Tensor from create()
        self.name: str = record.name
        self.dtype: str = record.dtype  # memcuda's name: "f32", "bf16", ...
        self.shape: Tuple[int, ...] = record.shape
        self.nbytes: int = record.nbytes
        self.device: Union[int, str] = "cpu" if record.device == DEVICE_CPU else record.device
        self._released = False
        self._interface_exported = False

    def __repr__(self):
        state = "released" if self.released else "open"
        return "memcuda.Tensor(%r, shape=%r, dtype=%r, device=%r, %s)" % (
            self.name, self.shape, self.dtype, self.device, state)

    @property
    def released(self) -> bool:
        return self._released

    @property
    def data_ptr(self) -> int:
        """The address of the memory in this process (a device pointer on a GPU)."""
        return self._live().data

    def release(self) -> None:
        """Gives this Tensor's reference back and unmaps the memory, at once when no array
        exported from it views the memory any more, else when the last such array is
        garbage-collected: a view stays usable until then. Arrays made through
        __cuda_array_interface__ (cupy.asarray) hold this Tensor itself, so after one of those
        the reference goes with this object. Exports nothing after. Idempotent."""
        if self._released:
            return
        self._released = True
        # An array made through __cuda_array_interface__ holds this object itself: the mapping
        # then goes with it, not before.
        if not self._interface_exported:
            self._mapping = None

    def __enter__(self) -> "Tensor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- copies through host memory --------------------------------------------------------

    def tobytes(self) -> bytes:
        """A copy of the tensor's bytes in host memory."""
        buf = ctypes.create_string_buffer(self.nbytes)
        mapping = self._live()  # held through the copy: its own memory, whatever the name is now
        if self._client._given[self.name] > 0:
            # rm() gave a reference of this name back: the memory may no longer be held, and the
            # copy by name checks afterwards that the tensor is still there.
            self._client._call(_clib.mcd_copy_to_host, self.name.encode(), buf, self.nbytes)
        else:
            self._client._call(_clib.mcd_view_to_host, ctypes.byref(mapping.view()), buf,
                               self.nbytes)
        return buf.raw

    def write(self, data: Any) -> None:
        """Copies `data` (any object with the buffer protocol, at most the tensor's size, e.g. a
        NumPy array or bytes) into the tensor, from its start."""
        src, _, nbytes = _host_buffer(data)
        if nbytes > self.nbytes:
            raise InvalidArgument("%d bytes do not fit tensor %r of %d bytes"
                                  % (nbytes, self.name, self.nbytes))
        mapping = self._live()
        if self._client._given[self.name] > 0:  # as in tobytes: by name, holding a reference
            self._client._call(_clib.mcd_copy_from_host, self.name.encode(), src, nbytes)
        else:
            self._client._call(_clib.mcd_view_from_host, ctypes.byref(mapping.view()), src,
                               nbytes)

    # -- zero-copy exports -----------------------------------------------------------------

    def __dlpack_device__(self) -> Tuple[int, int]:
        if self.device == "cpu":
            return (_dlpack.KDL_CPU, 0)
        return (_dlpack.KDL_CUDA, int(self.device))

    def __dlpack__(self, stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> Any:
        """A DLPack capsule of the memory: DLPack 1.0's "dltensor_versioned" when the consumer
        says it reads it (max_version of 1.0 or later), else "dltensor". For a GPU tensor,
        `stream` is accepted and needs no synchronisation: this process has queued no work on
        the memory, and the process that wrote it finished its work before handing the tensor
        over (memcuda(7), SYNCHRONIZATION); a host tensor takes none (BufferError), as DLPack
        says of host memory."""
        mapping = self._live()
        if copy:
            raise BufferError("memcuda exports views only (copy=True asked); use tobytes()")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("tensor %r is on %r, not on %r" % (self.name, self.device, dl_device))
        if stream is not None and self.device == "cpu":
            raise BufferError("tensor %r is in host memory, which has no stream (stream=%r)"
                              % (self.name, stream))
        device_type, device_id = self.__dlpack_device__()
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return _dlpack.capsule(mapping.data, device_type, device_id, self.shape,
                               DTYPES[self.dtype][2], mapping, versioned)

    def memoryview(self) -> memoryview:
        """A writable memoryview of a host tensor's bytes, in place, without NumPy (format "B",
        one dimension); it keeps the mapping alive as an exported array does. (Not
        memoryview(tensor): a Tensor that had the buffer protocol would be read by NumPy as its
        bytes rather than through __array_interface__, with its shape and dtype.)"""
        if self.device != "cpu":
            raise BufferError("tensor %r is on GPU %d: the buffer protocol is for host memory"
                              % (self.name, self.device))
        mapping = self._live()
        buffer = (ctypes.c_char * self.nbytes).from_address(mapping.data)
        buffer._owner = mapping
        return memoryview(buffer).cast("B")


    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        if self.device == "cpu":
            raise AttributeError("tensor %r is in host memory: use __array_interface__" % self.name)
        return self._interface(stream=True)

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        if self.device != "cpu":
            raise AttributeError("tensor %r is on GPU %d: use __cuda_array_interface__ or DLPack"
                                 % (self.name, self.device))
        return self._interface(stream=False)

    def _interface(self, stream):
        mapping = self._live()
        typestr = DTYPES[self.dtype][1]
        if typestr is None:
            raise TypeError("the array interfaces have no %s; use DLPack (torch.from_dlpack)"
                            % self.dtype)
        interface = {"shape": self.shape, "typestr": typestr, "strides": None, "version": 3}
        if stream:
            # CuPy and Numba keep the object they read this from (this Tensor) as the owner of
            # the memory: the mapping then lives as long as this object (see release()).
            self._interface_exported = True
            interface["data"] = (mapping.data, False)
            interface["stream"] = None  # no synchronisation needed (see __dlpack__)
        else:
            # NumPy takes a buffer object as the array's base: one that holds the mapping, so
            # that the array keeps exactly what it views alive, not this Tensor.
            buffer = (ctypes.c_char * self.nbytes).from_address(mapping.data)
            buffer._owner = mapping
            interface["data"] = buffer
        return interface

    def _live(self):
        if self._released:
            raise Released("tensor %r was released: get it again" % self.name)
        if self._mapping is None:
            self._mapping = self._open_created()
        return self._mapping

    def _open_created(self):
        """The first use of a Tensor from create(): its own reference and mapping, taken now
        rather than in create(), so that a producer that only hands a tensor over pays for no
        mapping of its own (a create then costs one request)."""
        out = _CTensor()
        with self._client._lock:  # as in Client.get
            self._client._call(_clib.mcd_get, self.name.encode(), ctypes.byref(out))
            return _Mapping(self._client, _Record.of(out))


def as_torch(tensors: Union["Tensor", Dict[str, "Tensor"], Sequence["Tensor"]]) -> Any:
    """torch.Tensor views, in place, of a Tensor (a torch.Tensor), of a dict of Tensors (a dict
    by the same keys) or of a list of them (a list, in the same order). For the members of a
    get_set on a GPU: one DLPack export of the set's allocation (from its first member's address
    to its last one's end) and a strided view of it per member (291 members of a model in
    ~0.6 ms in one process on an H200, where torch.from_dlpack of each took ~3 ms). Any other
    Tensor, and a host set's members (each mapped on its own): its own DLPack capsule handed to
    torch.from_dlpack, which then skips the stream handshake it makes with an object that
    exports __dlpack__ (a memcuda tensor needs no synchronisation: see __dlpack__), ~10 us a
    view against ~30 in one process on an H200. The views keep the reference and mapping as a
    from_dlpack view does. A set's views share one storage, as slices of one tensor do: what
    acts on the storage (torch.save of a view, untyped_storage()) sees the whole span. Every
    Tensor is checked (InvalidArgument, Released) before torch is imported; Unsupported where
    it cannot be."""
    if isinstance(tensors, Tensor):
        return as_torch({None: tensors})[None]
    if not isinstance(tensors, collections.abc.Mapping):
        if isinstance(tensors, (str, bytes)) or not isinstance(tensors, Sequence):
            raise InvalidArgument("as_torch takes a Tensor, a dict or a list of Tensors, not %s"
                                  % type(tensors).__name__)
        views = as_torch(dict(enumerate(tensors)))
        return [views[i] for i in range(len(tensors))]
    # Every Tensor checked, and mapped, before torch is imported: what is wrong is said first.
    plain: Dict[Any, "Tensor"] = {}
    sets: Dict[int, List[Tuple[Any, "Tensor", Any]]] = {}
    for key, tensor in tensors.items():
        if not isinstance(tensor, Tensor):
            raise InvalidArgument("as_torch: %s is a %s, not a memcuda.Tensor"
                                  % ("item %d" % key if isinstance(key, int) else repr(key),
                                     type(tensor).__name__))
        mapping = tensor._live()
        if mapping.hold is None or tensor.device == "cpu":
            plain[key] = tensor
        else:
            sets.setdefault(id(mapping.hold), []).append((key, tensor, mapping))
    if not tensors:
        return {}
    try:
        import torch
        from torch.utils.dlpack import from_dlpack
    except ImportError as e:
        raise errors.Unsupported("as_torch needs PyTorch, which this Python cannot import (%s)"
                                 % e) from None

    out: Dict[Any, Any] = {key: from_dlpack(tensor.__dlpack__()) for key, tensor in plain.items()}
    for members in sets.values():
        out.update(_set_views(members, torch, from_dlpack))
    return {key: out[key] for key in tensors}


def _set_views(members, torch, from_dlpack):
    """as_torch for the members of one get_set, (key, Tensor, _Mapping) each: one view of the
    bytes from the first member to the end of the last, typed once per dtype, then each member
    a strided view of that at its own offset."""
    base = min(m.data for _, _, m in members)
    end = max(m.data + m.nbytes for _, _, m in members)
    first = members[0][1]
    device_type, device_id = first.__dlpack_device__()
    whole = from_dlpack(_dlpack.capsule(base, device_type, device_id, (end - base,),
                                        DTYPES["u8"][2], members[0][2].hold))
    typed: Dict[str, Any] = {}
    strides_of: Dict[Tuple[int, ...], Tuple[int, ...]] = {}  # a model repeats a few shapes
    as_strided = torch.as_strided
    views = {}
    for key, tensor, mapping in members:
        of_dtype = typed.get(tensor.dtype)
        if of_dtype is None:
            dtype = from_dlpack(tensor.__dlpack__()).dtype  # torch's own reading of the dtype
            size = DTYPES[tensor.dtype][0]
            of_dtype = typed[tensor.dtype] = (whole[:(end - base) // size * size].view(dtype),
                                              size)
        of_dtype, size = of_dtype
        offset = mapping.data - base
        if offset % size:  # a member out of its dtype's alignment (set layouts never are)
            views[key] = from_dlpack(tensor.__dlpack__())
            continue
        shape = tensor.shape
        strides = strides_of.get(shape)
        if strides is None:
            strides = strides_of[shape] = _row_major_strides(shape)
        views[key] = as_strided(of_dtype, shape, strides, offset // size)
    return views


def _row_major_strides(shape):
    """The strides, in elements, of a compact row-major array of `shape`."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def _host_buffer(data):
    """(a ctypes array over `data`'s bytes, its address, its size): in place where the buffer is
    writable, else a copy (ctypes maps only writable buffers)."""
    try:
        view = memoryview(data)
    except TypeError:
        raise InvalidArgument("data must be a bytes-like object (the buffer protocol: bytes, a "
                              "NumPy array), not %s" % type(data).__name__) from None
    if not view.c_contiguous:
        raise InvalidArgument("data must be C-contiguous")
    if view.format[:1] in (">", "!"):
        raise InvalidArgument("data is big-endian (format %r); tensors are little-endian: "
                              "convert it first (numpy: a.astype(a.dtype.newbyteorder('<')))"
                              % view.format)
    view = view.cast("B")
    src = (ctypes.c_char * view.nbytes).from_buffer_copy(view) if view.readonly else \
        (ctypes.c_char * view.nbytes).from_buffer(view)
    return src, ctypes.addressof(src), view.nbytes


def _str(text, what="name"):
    """`text` checked for the C ABI: a str (nothing else is taken for one), without NUL (a C
    string ends at the first, so "a\\0b" would name "a"), encodable as UTF-8."""
    if not isinstance(text, str):
        raise InvalidArgument("the %s must be a str, not %s" % (what, type(text).__name__))
    if "\0" in text:
        raise InvalidArgument("the %s %r holds a NUL character" % (what, text))
    try:
        text.encode()
    except UnicodeEncodeError:
        raise InvalidArgument("the %s %r is not valid UTF-8 text" % (what, text)) from None
    return text


def _bytes(text, what="name"):
    return None if text is None else _str(text, what).encode()


def _whole(value, what, low, high):
    """`value` as an int in [low, high]: an int or NumPy integer, never a float rounded down nor
    a number the C ABI's field would wrap."""
    if isinstance(value, bool):
        raise InvalidArgument("%s %r is not a whole number" % (what, value))
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgument("%s %r is not a whole number" % (what, value)) from None
    if not low <= number <= high:
        raise InvalidArgument("%s %d is out of range (%d to %d)" % (what, number, low, high))
    return number


def _shape(shape):
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise InvalidArgument("shape %r is not a sequence of whole numbers" % (shape,)) from None
    if not 1 <= len(dims) <= 8:
        raise InvalidArgument("shape needs 1 to 8 dimensions, not %d" % len(dims))
    return tuple(_whole(d, "dimension", 1, 2**63 - 1) for d in dims)


def _device(device):
    if device in ("cpu", DEVICE_CPU):
        return DEVICE_CPU
    if isinstance(device, str):
        match = re.fullmatch(r"cuda(?::([0-9]+))?", device)
        if match is None:
            raise InvalidArgument("device %r is none of a GPU ordinal, \"cuda:N\" or \"cpu\""
                                  % (device,))
        device = int(match.group(1) or 0)
    return _whole(device, "device", 0, 2**31 - 1)
