# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""The memcuda package against a real mcd-serve, on host tensors (any machine)."""

import ctypes
import gc
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import memcuda
from memcuda import _dlpack, _lib
from conftest import tool


def refcount(mc, name):
    return mc.stat(name)["refcount"]



def test_create_get_release_rm_keep_exact_refcounts(mc):
    t = mc.create("a", (2, 3), "f32", device="cpu")
    assert (t.name, t.shape, t.dtype, t.device) == ("a", (2, 3), "f32", "cpu")
    assert refcount(mc, "a") == 1  # the creator's; this Tensor takes its own on first use
    assert t.data_ptr
    assert refcount(mc, "a") == 2
    u = mc.get("a")
    assert refcount(mc, "a") == 3
    u.release()
    u.release()  # idempotent
    assert refcount(mc, "a") == 2
    t.release()
    assert refcount(mc, "a") == 1
    unused = mc.create("b", 1, "u8", device="cpu")
    unused.release()  # never used here: nothing of its own to give back
    assert refcount(mc, "b") == 1
    mc.rm("b")
    assert [r["name"] for r in mc.ls()] == ["a"]
    assert mc.ls("b*") == []
    mc.rm("a")
    assert mc.ls() == []


def test_rm_of_a_tensor_held_here_then_its_release_give_back_one_reference_each(node, mc):
    node.run("mcd-create", "k", "--dtype", "u8", "--shape", "64", "--device", "cpu")
    assert refcount(mc, "k") == 1  # the creator's, bound to no process
    w = mc.get("k")
    v = np.asarray(w)
    assert refcount(mc, "k") == 2
    mc.rm("k")  # this process's own: the one w holds
    assert refcount(mc, "k") == 1
    v[:] = 7  # the mapping stays until w and its arrays are gone
    del v
    w.release()
    gc.collect()
    assert refcount(mc, "k") == 1, "w's release gave back the creator's reference too"
    with mc.get("k") as again:
        assert np.asarray(again).tolist() == [7] * 64
    node.run("mcd-rm", "k")
    assert mc.ls() == []


def test_a_release_after_another_party_gave_this_processs_reference_back_keeps_the_tensor(
        node, mc):
    node.run("mcd-create", "c", "--dtype", "u8", "--shape", "64", "--device", "cpu")
    for other_party in ("mcd-rm", "another connection"):
        w = mc.get("c")
        v = np.asarray(w)
        v[:] = 5
        assert refcount(mc, "c") == 2
        if other_party == "mcd-rm":
            node.run("mcd-rm", "c")  # bound to its parent, this process: w's reference goes
        else:
            memcuda.connect(node=node.node).rm("c")  # this process's own, again w's
        assert refcount(mc, "c") == 1
        del v
        w.release()
        gc.collect()
        assert refcount(mc, "c") == 1, "w's release gave back the creator's reference"
        with mc.get("c") as again:
            assert np.asarray(again).tolist() == [5] * 64
    # A release refused keeps what it would have given back: retried, alone or after a batch
    # refused as a whole, it is of the same kind, and the creator's stays.
    node.run("mcd-create", "d", "--dtype", "u8", "--shape", "8", "--device", "cpu")
    w = mc.get("c")
    node.run("mcd-rm", "c")
    with pytest.raises(memcuda.NotHeld):
        mc.rm("c")
    w.release()
    gc.collect()
    assert refcount(mc, "c") == 1, "a refused rm() made w's release take the creator's"
    w, x = mc.get("c"), mc.get("d")
    node.run("mcd-rm", "c")
    mc.release_many([w, x])  # refused for c as a whole, then each alone
    gc.collect()
    assert refcount(mc, "c") == 1 and refcount(mc, "d") == 1
    node.run("mcd-rm", "c", "d")
    assert mc.ls() == []


def test_a_creators_rm_and_its_tensors_release_free_the_tensor_in_either_order(node, mc):
    data = np.random.default_rng(5).integers(0, 256, size=16, dtype=np.uint8)
    for rm_first in (True, False):
        t = mc.create("made", (16,), "u8", device="cpu", data=data.tobytes())
        assert t.tobytes() == data.tobytes()  # its first use: the Tensor's own reference
        assert refcount(mc, "made") == 2
        if rm_first:
            mc.rm("made")  # the creator's
            assert refcount(mc, "made") == 1
            assert t.tobytes() == data.tobytes()
            t.release()
        else:
            t.release()
            assert refcount(mc, "made") == 1
            mc.rm("made")
        gc.collect()
        assert mc.ls("made") == [], "rm_first=%s" % rm_first
    # Another connection's get stays its own, whatever the creator gives back.
    t = mc.create("made", (16,), "u8", device="cpu", data=data.tobytes())
    t.tobytes()
    other = memcuda.connect(node=node.node)
    held = other.get("made")
    mc.rm("made")
    t.release()
    gc.collect()
    assert refcount(mc, "made") == 1
    assert held.tobytes() == data.tobytes()
    held.release()
    gc.collect()
    assert mc.ls("made") == []


def test_numpy_views_the_memory_in_place_across_processes(node, mc):
    t = mc.create("shared", (4,), "i32", device="cpu")
    a = np.asarray(t)
    assert a.dtype == np.int32 and a.shape == (4,) and not a.any()  # zeroed
    a[:] = [1, 2, 3, 4]
    # Another process sees the bytes and writes back into the same memory.
    node.python("w = np.asarray(mc.get('shared')); assert list(w) == [1, 2, 3, 4]; w *= 10")
    assert list(a) == [10, 20, 30, 40]
    assert np.frombuffer(t.tobytes(), dtype=np.int32).tolist() == [10, 20, 30, 40]
    del a
    t.release()
    mc.rm("shared")


def test_get_many_takes_every_reference_at_once_or_none(node, mc):
    rng = np.random.default_rng(5)
    data = {"m.%d" % i: rng.integers(0, 2**31, size=100 + i, dtype=np.int32) for i in range(12)}
    for name, values in data.items():
        mc.create(name, values.shape, "i32", device="cpu", data=values)
    names = sorted(data, reverse=True)
    with pytest.raises(memcuda.NotFound, match="'absent'"):
        mc.get_many(names[:3] + ["absent"])
    assert all(refcount(mc, name) == 1 for name in names)
    with pytest.raises(memcuda.InvalidArgument):
        mc.get_many([names[0], names[0]])
    # Another process gets them all in one call and reads each one's own bytes.
    node.python("rng = np.random.default_rng(5); "
                "data = {'m.%%d' %% i: rng.integers(0, 2**31, size=100 + i, dtype=np.int32) "
                "for i in range(12)}; ts = mc.get_many(%r); "
                "assert all(np.array_equal(np.asarray(t), data[t.name]) for t in ts)" % names)
    got = mc.get_many(names)
    assert [t.name for t in got] == names
    for t in got:
        assert np.array_equal(np.asarray(t), data[t.name]), t.name
    assert all(refcount(mc, name) == 2 for name in names)
    held = np.asarray(got[0])  # a view: its reference goes with it, not with release_many
    mc.release_many(got)
    assert all(t.released for t in got)
    assert refcount(mc, names[0]) == 2 and all(refcount(mc, name) == 1 for name in names[1:])
    assert np.array_equal(held, data[names[0]])
    del held, got, t
    gc.collect()
    assert refcount(mc, names[0]) == 1
    for name in names:
        mc.rm(name)
    assert mc.ls() == []


def test_as_torch_refuses_what_is_no_tensor_and_a_released_one_before_importing_torch(mc):
    t = mc.create("v", (4,), "f32", device="cpu")
    with pytest.raises(memcuda.InvalidArgument, match="item 1 is a int"):
        memcuda.as_torch([t, 3])
    with pytest.raises(memcuda.InvalidArgument, match="not str"):
        memcuda.as_torch("v")
    t.release()
    with pytest.raises(memcuda.Released):
        memcuda.as_torch({"v": t})
    assert memcuda.as_torch({}) == {} and memcuda.as_torch([]) == []  # nothing to view
    assert mc.get_many([]) == []  # as release_many of none
    assert refcount(mc, "v") == 1
    mc.rm("v")
    assert mc.ls() == []


def _safetensors_file(path, tensors):
    """A safetensors file written by hand: {name: numpy array}, data back to back (so unaligned
    after a tensor of an odd size), as the format asks."""
    import json as _json
    import struct
    names = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.int64): "I64",
             np.dtype(np.uint8): "U8"}
    header, data = {}, b""
    for name, array in tensors.items():
        raw = array.tobytes()
        header[name] = {"dtype": names[array.dtype], "shape": list(array.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = _json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def test_a_safetensors_checkpoint_loads_into_a_set_that_any_process_views_in_place(
        node, mc, tmp_path):
    rng = np.random.default_rng(11)
    tensors = {"embed.weight": rng.standard_normal((32, 8)).astype(np.float16),
               "layers.0.bias": rng.standard_normal(17).astype(np.float32),
               "ids": rng.integers(-2**40, 2**40, size=(3, 5), dtype=np.int64),
               "mask": rng.integers(0, 255, size=9, dtype=np.uint8)}
    path = tmp_path / "model.safetensors"
    _safetensors_file(path, tensors)
    names = mc.load_safetensors(path, "net", device="cpu")
    assert sorted(names) == sorted("net/" + name for name in tensors)
    # "net/" lists the set's members, as mcd-ls does; a tensor named under one is none of them.
    mc.create("net/ids/under", (2,), "u8", device="cpu")
    assert [r["name"] for r in mc.ls("net/")] == sorted(names)
    assert len(mc.ls("net/*")) == len(names) + 1
    mc.rm("net/ids/under")
    got = mc.get_set("net")
    assert sorted(got) == sorted(tensors)
    for name, array in tensors.items():
        view = np.asarray(got[name])
        assert view.dtype == array.dtype and view.shape == array.shape
        assert np.array_equal(view, array), name
    # One reference for the whole set, counted on its member first by name.
    leader = min(tensors)
    assert {name: refcount(mc, "net/" + name) for name in tensors} == \
        {name: 2 if name == leader else 1 for name in tensors}
    node.python("rng = np.random.default_rng(11); got = mc.get_set('net'); "
                "assert np.array_equal(np.asarray(got['embed.weight']), "
                "rng.standard_normal((32, 8)).astype(np.float16))")
    mc.save_safetensors("net", tmp_path / "out.safetensors")
    del got, view
    gc.collect()
    assert all(refcount(mc, "net/" + name) == 1 for name in tensors)
    with pytest.raises(memcuda.NotFound):
        mc.get_set("nope")
    for name in names:
        mc.rm(name)
    assert mc.ls() == []
    # What was written back reads the same, here by hand.
    import json as _json
    import struct
    raw = (tmp_path / "out.safetensors").read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = _json.loads(raw[8:8 + size])
    for name, array in tensors.items():
        begin, end = header[name]["data_offsets"]
        assert raw[8 + size + begin:8 + size + end] == array.tobytes(), name


def test_create_set_makes_every_member_or_none(mc):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.integers(0, 255, size=13, dtype=np.uint8)
    got = mc.create_set("s", [("a", a.shape, "f32", a), ("b", b.shape, "u8", b)], device="cpu")
    assert sorted(got) == ["a", "b"]
    assert np.array_equal(np.asarray(got["a"]), a) and np.array_equal(np.asarray(got["b"]), b)
    assert mc.stat("s/a")["set"] == "s"
    with pytest.raises(memcuda.AlreadyExists):
        mc.create_set("s", [("c", (2,), "f32")], device="cpu")
    with pytest.raises(memcuda.InvalidArgument):
        mc.create_set("t", [("c", (2,), "f32"), ("c", (3,), "f32")], device="cpu")
    assert [r["name"] for r in mc.ls()] == ["s/a", "s/b"]
    del got
    gc.collect()
    mc.rm("s/a")
    mc.rm("s/b")
    assert mc.ls() == []


def test_a_view_outlives_release_and_its_reference_goes_with_it(mc):
    t = mc.create("v", (8,), "f64", device="cpu")
    a = np.asarray(t)
    d = np.from_dlpack(t)
    t.release()
    assert refcount(mc, "v") == 2  # the views still hold this process's reference
    a[:] = 2.5  # still mapped: no crash
    assert d.sum() == 20.0
    with pytest.raises(memcuda.Released):
        np.asarray(t)
    with pytest.raises(memcuda.Released):
        t.__dlpack__()
    del a
    assert refcount(mc, "v") == 2
    del d
    gc.collect()
    assert refcount(mc, "v") == 1
    mc.rm("v")


def test_a_with_block_gives_the_reference_back(mc):
    mc.create("w", 16, "u8", device="cpu").release()
    with mc.get("w") as t:
        np.asarray(t)[:] = 7
        assert refcount(mc, "w") == 2
    assert refcount(mc, "w") == 1
    with mc.get("w") as t:
        assert t.tobytes() == bytes([7]) * 16
    mc.rm("w")


def test_a_dlpack_capsule_nobody_consumed_gives_its_hold_back(mc):
    t = mc.create("c", 4, "f32", device="cpu")
    before = _dlpack.live_count()
    capsule = t.__dlpack__()
    assert _dlpack.live_count() == before + 1
    del capsule
    assert _dlpack.live_count() == before
    assert t.__dlpack_device__() == (_dlpack.KDL_CPU, 0)
    t.release()
    assert refcount(mc, "c") == 1
    mc.rm("c")


def _capsule_is(capsule, name):
    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.restype, is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    return is_valid(capsule, name) == 1


def test_a_capsule_the_consumer_refuses_leaks_nothing_and_its_error_stands(mc):
    # NumPy has no bfloat16: it refuses the capsule, with its own error (not a SystemError), and
    # the capsule's hold on the reference and the mapping goes with it.
    t = mc.create("bf", 4, "bf16", device="cpu")
    t.data_ptr  # mapped here (a reference of this process) before the export
    before = _dlpack.live_count()
    held = refcount(mc, "bf")
    with pytest.raises(Exception) as refused:
        np.from_dlpack(t)
    assert not isinstance(refused.value, SystemError), refused.value
    assert "dtype" in str(refused.value).lower()
    gc.collect()
    assert _dlpack.live_count() == before
    assert refcount(mc, "bf") == held
    t.release()
    gc.collect()
    assert refcount(mc, "bf") == 1
    mc.rm("bf")


def test_a_consumer_that_reads_dlpack_1_gets_a_versioned_capsule(mc):
    data = os.urandom(64)
    t = mc.create("v", 16, "f32", device="cpu")
    t.write(data)
    before = _dlpack.live_count()
    legacy = t.__dlpack__(max_version=(0, 8))
    assert _capsule_is(legacy, b"dltensor") and not _capsule_is(legacy, b"dltensor_versioned")
    del legacy
    capsule = t.__dlpack__(max_version=(1, 0))
    assert _capsule_is(capsule, b"dltensor_versioned")
    # Read and taken as a DLPack 1.0 consumer does: the structure, every byte, then the rename
    # and the deleter's call.
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    managed = _dlpack.DLManagedTensorVersioned.from_address(
        get_pointer(capsule, b"dltensor_versioned"))
    assert (managed.version.major, managed.version.minor, managed.flags) == (1, 0, 0)
    tensor = managed.dl_tensor
    assert (tensor.ndim, tensor.shape[0], tensor.dtype.code, tensor.dtype.bits) == (1, 16, 2, 32)
    assert ctypes.string_at(tensor.data, 64) == data
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.restype, set_name.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    assert set_name(capsule, b"used_dltensor_versioned") == 0
    assert _dlpack.live_count() == before + 1
    del capsule  # taken: the destructor leaves it to the consumer's deleter
    assert _dlpack.live_count() == before + 1
    managed.deleter(ctypes.pointer(managed))
    assert _dlpack.live_count() == before
    # Not taken: the destructor calls the deleter.
    unread = t.__dlpack__(max_version=(1, 2))
    assert _dlpack.live_count() == before + 1
    del unread
    assert _dlpack.live_count() == before
    # A host tensor has no stream.
    with pytest.raises(BufferError, match="no stream"):
        t.__dlpack__(stream=1)
    t.release()
    gc.collect()
    assert refcount(mc, "v") == 1
    mc.rm("v")


def test_a_host_tensor_is_a_buffer_without_numpy(node, mc, tmp_path):
    data = os.urandom(4096)
    t = mc.create("buf", 4096, "u8", device="cpu")
    view = t.memoryview()
    assert (view.format, view.nbytes, view.readonly) == ("B", 4096, False)
    view[:] = data
    t.release()  # the memoryview keeps the mapping
    assert bytes(view) == data
    out = tmp_path / "buf.bin"
    got = subprocess.run([tool("mcd-get"), "buf", "--no-ref", "-o", str(out), "--node", node.node],
                         capture_output=True, text=True, env=node.env)
    assert got.returncode == 0, got.stderr
    assert out.read_bytes() == data  # another process reads every byte written here
    # NumPy still reads the tensor through __array_interface__, with its shape and dtype.
    assert np.asarray(mc.get("buf")).tobytes() == data
    del view
    gc.collect()
    assert refcount(mc, "buf") == 1
    mc.rm("buf")


def test_host_copies_both_ways(mc):
    t = mc.create("h", (3,), "u16", device="cpu", init="none")
    t.write(np.array([5, 6, 7], dtype=np.uint16))
    assert np.frombuffer(t.tobytes(), dtype=np.uint16).tolist() == [5, 6, 7]
    t.write(b"\x01\x00")  # a prefix
    assert np.asarray(t).tolist() == [1, 6, 7]
    with pytest.raises(ValueError):
        t.write(bytes(7))
    t.release()
    mc.rm("h")


def test_a_create_with_data_is_ready_only_with_every_byte_in(node, mc, tmp_path):
    """create(data=...) goes through the C ABI's mcd_create_ex with data: a consumer started
    before it (mcd-get --wait) reads exactly these bytes, never zeros."""
    data = np.random.default_rng(5).integers(0, 256, size=(4096, 1024), dtype=np.uint8)
    out = tmp_path / "out.npy"
    waiter = subprocess.Popen(
        [tool("mcd-get"), "d", "--wait", "60", "--no-ref", "-q", "-o", str(out), "--node",
         node.node], env=node.env)
    t = mc.create("d", data.shape, "u8", device="cpu", data=data)
    assert waiter.wait(60) == 0
    assert np.array_equal(np.load(out), data)
    assert mc.stat("d")["state"] == "ready" and refcount(mc, "d") == 1
    assert np.array_equal(np.asarray(t), data)
    t.release()
    mc.create("ro", (3,), "u16", device="cpu", data=b"\x01\x00\x02\x00\x03\x00").release()
    assert np.frombuffer(mc.get("ro").tobytes(), dtype=np.uint16).tolist() == [1, 2, 3]
    with pytest.raises(memcuda.InvalidArgument):
        mc.create("short", (4,), "u8", device="cpu", data=b"abc")
    assert sorted(r["name"] for r in mc.ls()) == ["d", "ro"]
    mc.rm("d")
    mc.rm("ro")


def test_errors_carry_the_tools_stable_names(mc):
    with pytest.raises(memcuda.NotFound) as missing:
        mc.get("missing")
    assert missing.value.code == "not_found" and isinstance(missing.value, KeyError)
    mc.create("e", 1, "f32", device="cpu").release()
    with pytest.raises(memcuda.AlreadyExists) as exists:
        mc.create("e", 1, "f32", device="cpu")
    assert exists.value.code == "already_exists"
    with pytest.raises(memcuda.InvalidArgument):
        mc.create("bad*name", 1, "f32", device="cpu")
    with pytest.raises(memcuda.InvalidArgument) as dtype:  # a ValueError too
        mc.create("x", 1, "q7", device="cpu")
    assert isinstance(dtype.value, ValueError) and "unknown dtype 'q7'" in str(dtype.value)
    with pytest.raises(memcuda.InvalidArgument):
        mc.create("x", (), "f32", device="cpu")
    with pytest.raises(memcuda.InvalidArgument):
        mc.create("x", 1, "f32", device="cpu", init="ones")
    for bad in ({"shape": ["a"]}, {"device": "cuda:x"}, {"device": "gpu"}):
        with pytest.raises(memcuda.InvalidArgument):
            mc.create("x", **dict({"shape": 1, "dtype": "f32", "device": "cpu"}, **bad))
    with pytest.raises(memcuda.InvalidArgument):
        mc.create_set("s", [("only-a-name",)], device="cpu")
    # Nothing is cut short, wrapped or rounded on its way to the C ABI: a name with a NUL would
    # name another tensor, a dimension of 2**64 + 4 would be 4, a device of 2**32 - 1 the host.
    mc.create("victim", 2, "u8", device="cpu").release()
    for bad in (dict(name="victim\0x"), dict(shape=(2**64 + 4,)), dict(shape=(2.5,)),
                dict(shape=(np.float64(3.9),)), dict(device=2**32 - 1), dict(device=1.5),
                dict(device="cudaX"), dict(name=5), dict(data="ab"), dict(owner_pid="abc"),
                dict(data=np.array([1.5, -2.25], dtype=">f4")), dict(dtype=np.dtype(">f4"))):
        args = dict(dict(name="x", shape=2, dtype="f32", device="cpu"), **bad)
        with pytest.raises(memcuda.InvalidArgument):
            mc.create(**args)
    with pytest.raises(memcuda.InvalidArgument):
        mc.rm("victim\0zzz")
    assert refcount(mc, "victim") == 1  # still there
    mc.rm("victim")
    for call in (lambda: mc.get_many("victim"), lambda: mc.release_many(None),
                 lambda: mc.release_many([1]), lambda: mc.create_set("s", None),
                 lambda: memcuda.connect(timeout="x")):
        with pytest.raises(memcuda.InvalidArgument):
            call()
    assert memcuda._dtypes.dtype_name(float) == "f64"  # as NumPy reads Python's float
    with pytest.raises(memcuda.NoDevice):
        mc.create("x", 1, "f32", device=7)
    with pytest.raises(memcuda.Unavailable):
        memcuda.connect(node="no-such-node")
    mc.rm("e")
    # Every class is named in errors.__all__ (a literal, for type checkers), and the package's
    # table is the library's.
    assert {type(memcuda.errors.error_for(e, "")).__name__ for e in range(1, 23)} <= \
        set(memcuda.errors.__all__)
    for errno in range(1, 23):
        assert memcuda.errors.error_for(errno, "").code == _lib.lib.mcd_error_name(errno).decode()


def test_dtypes_map_both_ways():
    import numpy
    for name, (size, typestr, _) in memcuda._dtypes.DTYPES.items():
        if typestr is not None:
            assert numpy.dtype(typestr).itemsize == size
            assert memcuda._dtypes.dtype_name(numpy.dtype(typestr)) == name
    assert memcuda._dtypes.dtype_name("float32") == "f32"
    assert memcuda._dtypes.dtype_name(numpy.float16) == "f16"


def test_every_dtype_round_trips_through_numpy(mc):
    for name, (size, typestr, _) in memcuda._dtypes.DTYPES.items():
        t = mc.create("d-" + name, (2, 2), name, device="cpu")
        if typestr is None:  # bf16: no NumPy dtype; DLPack carries it (torch)
            with pytest.raises(TypeError):
                np.asarray(t)
        else:
            a = np.asarray(t)
            assert a.dtype == np.dtype(typestr) and a.nbytes == 4 * size
            del a
        t.release()
        mc.rm("d-" + name)


def test_a_stack_tensor_goes_with_its_owner_process(node, mc):
    node.python("mc.create('s', 4, 'f32', device='cpu', lifetime='stack')")
    with pytest.raises(memcuda.NotFound):
        for _ in range(100):  # the server reclaims it within about a second
            mc.stat("s")
            import time
            time.sleep(0.05)


def test_a_held_set_keeps_every_members_bytes_and_goes_with_its_holder(node, mc):
    rng = np.random.default_rng(5)
    data = {"m%d" % i: rng.integers(0, 2**32, size=64 + i, dtype=np.uint32) for i in range(6)}
    mc.create_set("held", [(k, v.shape, "u32", v) for k, v in data.items()], device="cpu")
    gc.collect()
    assert all(refcount(mc, "held/" + k) == 1 for k in data)
    # Another process holds the set; every member's creator reference goes meanwhile.
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; sys.path.insert(0, %r); import memcuda, numpy as np, time; "
         "mc = memcuda.connect(); got = mc.get_set('held'); print('held', flush=True); "
         "sys.stdin.readline(); rng = np.random.default_rng(5); "
         "ok = all(np.array_equal(np.asarray(got['m%%d' %% i]), "
         "rng.integers(0, 2**32, size=64 + i, dtype=np.uint32)) for i in range(6)); "
         "print('same' if ok else 'differ', flush=True); time.sleep(60)"
         % os.path.join(os.path.dirname(__file__), "..")],
        env=node.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    assert refcount(mc, "held/m0") == 2 and refcount(mc, "held/m5") == 1
    node.run("mcd-rm", "held/")
    assert [r["name"] for r in mc.ls("held/*")] == ["held/m0"]
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "same"
    # Killed, the holder's reference is given back, and the set goes with it.
    child.send_signal(signal.SIGKILL)
    child.wait()
    for _ in range(100):
        if not mc.ls("held/*"):
            break
        time.sleep(0.05)
    assert mc.ls("held/*") == []


def test_rm_of_a_set_gives_back_one_reference_of_each_member_and_nothing_else(node, mc):
    rng = np.random.default_rng(13)
    data = {"m%d" % i: rng.integers(0, 2**32, size=16 + i, dtype=np.uint32) for i in range(4)}
    mc.create_set("gone", [(k, v.shape, "u32", v) for k, v in data.items()], device="cpu")
    gc.collect()
    extra = mc.create("gone/extra", 8, "u32", device="cpu")  # named alike, not a member
    # A get_set of this process holds the set: refused, and nothing is given back.
    held = mc.get_set("gone")
    with pytest.raises(memcuda.InvalidArgument, match="get_set"):
        mc.rm("gone/")
    assert [refcount(mc, "gone/" + k) for k in sorted(data)] == [2, 1, 1, 1]
    del held
    gc.collect()
    mc.rm("gone/")
    assert [r["name"] for r in mc.ls("gone/*")] == ["gone/extra"]
    assert refcount(mc, "gone/extra") == 1
    with pytest.raises(memcuda.NotFound, match="no tensor set"):
        mc.rm("gone/")
    extra.release()
    # A Tensor of this Client whose reference rm("set/") gave back gives back none of its own.
    mc.create_set("kept", [("a", 8, "u32", data["m0"][:8]), ("b", 8, "u32", data["m1"][:8])],
                  device="cpu")
    gc.collect()
    a = mc.get("kept/a")
    assert refcount(mc, "kept/a") == 2
    mc.rm("kept/")
    assert refcount(mc, "kept/a") == 1 and mc.ls("kept/b") == []
    assert np.array_equal(np.asarray(a), data["m0"][:8])
    del a
    gc.collect()
    assert refcount(mc, "kept/a") == 1, "the Tensor gave back a second reference"
    mc.rm("kept/")
    assert mc.ls("kept/*") == []


def test_a_plain_tensors_release_leaves_a_held_sets_member_of_its_name_mapped(node, mc):
    rng = np.random.default_rng(9)
    a, b = (rng.integers(0, 2**32, size=32, dtype=np.uint32) for _ in range(2))
    held = mc.create_set("pl", [("b", 32, "u32", b), ("a", 32, "u32", a)], device="cpu")
    mc.rm("pl/b")  # the creator's: pl/b is freed, its bytes held through the set's pl/a
    assert [r["name"] for r in mc.ls("pl/*")] == ["pl/a"]
    made = mc.create("pl/b", 64, "u32", device="cpu")  # another tensor of its name
    seen = mc.get("pl/b")
    assert not np.asarray(seen).any()
    del seen
    gc.collect()  # its mapping closes as itself, not the set's member of that name
    assert np.array_equal(np.frombuffer(held["b"].tobytes(), np.uint32), b)
    assert np.array_equal(np.asarray(held["b"]), b)
    del held
    gc.collect()
    made.release()
    mc.rm("pl/b")
    mc.rm("pl/a")
    assert mc.ls("pl/*") == []


def test_a_held_sets_member_is_itself_whatever_its_name_names_now(node, mc):
    rng = np.random.default_rng(8)
    a, b = (rng.integers(0, 2**32, size=32, dtype=np.uint32) for _ in range(2))
    mc.create_set("re", [("a", 32, "u32", a), ("b", 32, "u32", b)], device="cpu")
    one, two = mc.get_set("re"), mc.get_set("re")
    with pytest.raises(memcuda.InvalidArgument):
        mc.rm("re/a")  # the sets' reference: refused, nothing changed
    # The creator's (--detached: this process, the tool's parent, holds the sets' reference of
    # re/a, which the tool would give back first): re/a stays (held), re/b goes.
    node.run("mcd-rm", "re/", "--detached")
    assert [r["name"] for r in mc.ls("re/*")] == ["re/a"]
    new = mc.create("re/b", 32, "u32", device="cpu")  # another tensor of a freed member's name
    seen = mc.get("re/b")
    new_view = np.asarray(seen)
    assert np.array_equal(np.frombuffer(one["b"].tobytes(), np.uint32), b), "its own bytes"
    fresh = rng.integers(0, 2**32, size=32, dtype=np.uint32)
    one["b"].write(fresh)
    assert np.array_equal(np.asarray(two["b"]), fresh), "written through the held mapping"
    assert not new_view.any(), "the new tensor of that name is untouched"
    # A plain Tensor of that name goes first: its mapping closes as itself, the sets' stay.
    del new_view, seen
    gc.collect()
    assert np.array_equal(np.asarray(two["b"]), fresh)
    assert np.array_equal(np.frombuffer(one["b"].tobytes(), np.uint32), fresh)
    # The sets go: their mappings close as themselves, not the new tensor's of the same name.
    new_view = np.asarray(new)
    del one, two
    gc.collect()
    assert not new_view.any() and new_view.shape == (32,)
    assert mc.ls("re/*") == [mc.stat("re/b")]
    del new_view
    new.release()
    mc.rm("re/b")
    assert mc.ls("re/*") == []


@pytest.mark.parametrize("named", [True, False], ids=["node_named", "only_live_server"])
def test_a_killed_holders_reference_is_given_back(node, mc, named):
    # Unnamed, the node is found as the only live server (this node is not the host name), and
    # the reference must be filed under it to be given back.
    mc.create("k", 4, "f32", device="cpu").release()
    env = dict(node.env, MCD_NODE="")
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; sys.path.insert(0, %r); import memcuda, time; mc = memcuda.connect(%s); "
         "t = mc.get('k'); print('held', flush=True); time.sleep(60)"
         % (os.path.join(os.path.dirname(__file__), ".."), "node=%r" % node.node if named else "")],
        env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    assert refcount(mc, "k") == 2
    child.send_signal(signal.SIGKILL)
    child.wait()
    import time
    for _ in range(100):
        if refcount(mc, "k") == 1:
            break
        time.sleep(0.05)
    assert refcount(mc, "k") == 1
    mc.rm("k")


def test_a_tensor_from_the_tools_is_read_and_written_here(node, mc, tmp_path):
    src = tmp_path / "x.npy"
    np.save(src, np.arange(12, dtype=np.float32).reshape(3, 4))
    node.run("mcd-create", "x", "--from", str(src), "--device", "cpu")
    with mc.get("x") as t:
        a = np.asarray(t)
        assert a.tolist() == np.arange(12).reshape(3, 4).tolist()
        a += 1
        del a
    out = tmp_path / "out.npy"
    node.run("mcd-get", "x", "-o", str(out), "--detached")
    node.run("mcd-rm", "x", "--detached")  # mcd-get's reference
    assert np.load(out).tolist() == (np.arange(12).reshape(3, 4) + 1).tolist()
    node.run("mcd-rm", "x", "--detached")
    assert mc.ls() == []


def test_the_package_installs_with_pip_and_nothing_downloaded(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    # A copy, so that the build leaves nothing in the source tree.
    import shutil
    pkg = tmp_path / "src"
    shutil.copytree(os.path.join(os.path.dirname(__file__), ".."), pkg,
                    ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    pkg = str(pkg)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation",
                           "--no-deps", "-q", pkg], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import memcuda; print(memcuda.version(), memcuda.__file__)"],
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "site-packages" in done.stdout
    # Typed (PEP 561), and under its licence.
    installed = os.path.dirname(done.stdout.split()[-1])
    assert os.path.exists(os.path.join(installed, "py.typed"))
    meta = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "from importlib.metadata import metadata; print(metadata('memcuda')['License'])"],
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert meta.stdout.strip() == "Apache-2.0", meta.stderr


def test_the_type_hints_check_a_program_that_uses_the_package(tmp_path):
    # mypy --strict over a program that uses the API as documented passes, and finds the misuse
    # in one that does not (Debian's mypy: scripts/install-deps.sh).
    package = os.path.join(os.path.dirname(__file__), "..")
    good = tmp_path / "good.py"
    good.write_text(
        "import memcuda\n"
        "def share(mc: memcuda.Client) -> int:\n"
        "    try:\n"
        "        mc.get('missing')\n"
        "    except memcuda.NotFound as e:\n"
        "        code: str = e.code\n"
        "    with memcuda.connect() as other:\n"
        "        kept: memcuda.Tensor = other.get('x')\n"
        "    t = mc.create('x', (2, 3), 'f32', device='cpu')\n"
        "    view: memoryview = t.memoryview()\n"
        "    names: list[str] = mc.load_safetensors('m.safetensors', 'm')\n"
        "    total: int = sum(m.nbytes for m in mc.get_set('m').values())\n"
        "    mc.release_many(mc.get_many(names))\n"
        "    t.release()\n"
        "    return t.nbytes + len(view) + total\n")
    bad = tmp_path / "bad.py"
    bad.write_text("import memcuda\n"
                   "def f(mc: memcuda.Client) -> str:\n"
                   "    return mc.create('x', 4).nbytes\n")
    def mypy(path):
        return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                               "--cache-dir", str(tmp_path / "mypy"), str(path)],
                              capture_output=True, text=True,
                              env=dict(os.environ, MYPYPATH=package))
    checked = mypy(good)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    refused = mypy(bad)
    assert refused.returncode == 1 and 'got "int", expected "str"' in refused.stdout, refused.stdout

