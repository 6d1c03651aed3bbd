# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""The memcuda package on a GPU host: tensors made by the tools, viewed in place by PyTorch and
CuPy, changed by their kernels, read back by the tools; every reference given back and the GPU
memory with it. Skipped (and reported so) without a GPU or PyTorch."""

import gc
import os
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import memcuda  # noqa: E402
from conftest import Node  # noqa: E402


def gpu_used_mib():
    free, total = torch.cuda.mem_get_info(0)
    return (total - free) // (1 << 20)


def gpu_memory_back_to(before, seconds=5.0):
    """Whether the device's used memory comes back to `before` within `seconds`: the server
    answers an rm before its worker has run the cudaFree."""
    end = time.time() + seconds
    while gpu_used_mib() > before:
        if time.time() > end:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def gpu():
    torch.zeros(1, device="cuda:0")  # this process's context exists before the first reading
    # No ready stock and no slabs: what the server allocates for a tensor is freed with it.
    n = Node("0", "--ready-max", "0", "--slab-max", "0")
    os.environ["MCD_REDIS_URL"] = n.url
    # This process's first open of another process's memory: on a host with several GPUs the
    # driver sets up peer access then and keeps 2 MiB of GPU 0 for the process's life. Paid here,
    # before any test reads the memory in use, since it is not a tensor's to give back.
    mc = memcuda.connect(node=n.node)
    with mc.get(mc.create("first", (1,), "u8").name):
        pass
    mc.rm("first")
    yield n
    assert n.stop() == 0, n.serve_log()


def made_by_the_tools(gpu, tmp_path, name):
    x = np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024)  # 1 MiB
    src = tmp_path / (name + ".npy")
    np.save(src, x)
    gpu.run("mcd-create", name, "--from", str(src), "--device", "0")
    return x


def read_back_by_the_tools(gpu, tmp_path, name):
    out = tmp_path / (name + "-out.npy")
    gpu.run("mcd-get", name, "-o", str(out), "--detached")
    gpu.run("mcd-rm", name, "--detached")  # mcd-get's reference
    return np.load(out)


def test_torch_changes_a_tools_tensor_in_place(gpu, tmp_path):
    mc = memcuda.connect(node=gpu.node)
    before = gpu_used_mib()
    x = made_by_the_tools(gpu, tmp_path, "w")
    with mc.get("w") as t:
        assert t.device == 0 and t.shape == (256, 1024)
        view = torch.from_dlpack(t)
        assert view.device == torch.device("cuda", 0) and view.dtype == torch.float32
        assert view.data_ptr() == t.data_ptr  # the same memory, not a copy
        assert torch.equal(view.cpu(), torch.from_numpy(x))
        view.mul_(2)
        torch.cuda.synchronize()
    view += 1  # a view outlives the with block: still mapped, its reference still held
    torch.cuda.synchronize()
    assert mc.stat("w")["refcount"] == 2
    del view
    gc.collect()
    assert mc.stat("w")["refcount"] == 1
    assert np.array_equal(read_back_by_the_tools(gpu, tmp_path, "w"), 2 * x + 1)
    assert mc.stat("w")["refcount"] == 1
    # Through __cuda_array_interface__ the array keeps the Tensor itself, which holds on past
    # its release() until both are gone.
    u = mc.get("w")
    by_interface = torch.as_tensor(u, device="cuda")
    assert by_interface.data_ptr() == u.data_ptr and by_interface.dtype == torch.float32
    assert torch.equal(by_interface.cpu(), torch.from_numpy(2 * x + 1))
    u.release()
    assert mc.stat("w")["refcount"] == 2
    del u, by_interface
    gc.collect()
    assert mc.stat("w")["refcount"] == 1
    gpu.run("mcd-rm", "w", "--detached")
    assert mc.ls() == []
    assert gpu_memory_back_to(before), "GPU memory not given back"


def test_cupy_changes_a_tools_tensor_in_place(gpu, tmp_path):
    cupy = pytest.importorskip("cupy")
    mc = memcuda.connect(node=gpu.node)
    before = gpu_used_mib()
    x = made_by_the_tools(gpu, tmp_path, "c")
    t = mc.get("c")
    by_dlpack = cupy.from_dlpack(t)
    by_interface = cupy.asarray(t)  # __cuda_array_interface__
    assert by_dlpack.data.ptr == by_interface.data.ptr == t.data_ptr
    by_dlpack += 1
    by_interface *= 3
    cupy.cuda.Device(0).synchronize()
    assert mc.stat("c")["refcount"] == 2
    t.release()
    del by_dlpack, by_interface, t
    gc.collect()
    assert mc.stat("c")["refcount"] == 1
    assert np.array_equal(read_back_by_the_tools(gpu, tmp_path, "c"), (x + 1) * 3)
    gpu.run("mcd-rm", "c", "--detached")
    assert mc.ls() == []
    assert gpu_memory_back_to(before), "GPU memory not given back"


def test_a_tensor_created_here_is_seen_by_another_process(gpu):
    mc = memcuda.connect(node=gpu.node)
    t = mc.create("p", (4, 4), "bf16", device=0)
    torch.from_dlpack(t).fill_(1.5)
    torch.cuda.synchronize()
    code = ("import torch; t = mc.get('p'); v = torch.from_dlpack(t); "
            "assert v.dtype == torch.bfloat16 and float(v.sum()) == 24.0, v")
    gpu.python(code)
    t.release()
    gc.collect()
    mc.rm("p")
    assert mc.ls() == []


def test_torch_and_cupy_take_dlpack_1_capsules_and_every_byte(gpu):
    # A consumer that asks for DLPack 1.0 (max_version: PyTorch 2.11 and CuPy 14 do) gets a
    # "dltensor_versioned" capsule, one that does not a "dltensor"; either way its view reads
    # every byte written, and the capsules' holds go with the views.
    import cupy
    from memcuda import _dlpack
    mc = memcuda.connect(node=gpu.node)
    asked = []
    export = memcuda.Tensor.__dlpack__

    def spy(self, **kw):
        asked.append(kw.get("max_version"))
        return export(self, **kw)

    data = torch.randint(0, 256, (1 << 20,), dtype=torch.uint8, device="cuda")
    t = mc.create("dl1", (1 << 20,), "u8", device=0)
    torch.from_dlpack(t).copy_(data)
    torch.cuda.synchronize()
    before = _dlpack.live_count()
    u = mc.get("dl1")
    memcuda.Tensor.__dlpack__ = spy
    try:
        x = torch.from_dlpack(u)
        c = cupy.from_dlpack(u)
    finally:
        memcuda.Tensor.__dlpack__ = export
    assert len(asked) == 2
    print("max_version asked by torch %s, cupy %s: %s" % (torch.__version__, cupy.__version__, asked))
    assert torch.equal(x, data)
    assert (cupy.asnumpy(c) == data.cpu().numpy()).all()
    assert _dlpack.live_count() == before + 2
    del x, c
    u.release()
    t.release()
    gc.collect()
    assert _dlpack.live_count() == before
    assert mc.stat("dl1")["refcount"] == 1
    mc.rm("dl1")


def test_a_set_from_safetensors_is_one_mapping_that_torch_and_another_process_view(gpu, tmp_path):
    from test_host import _safetensors_file
    rng = np.random.default_rng(21)
    tensors = {"w.%d" % i: rng.standard_normal((64 + i, 32)).astype(np.float16) for i in range(20)}
    tensors["big"] = rng.integers(0, 255, size=48 << 20, dtype=np.uint8)
    path = tmp_path / "m.safetensors"
    _safetensors_file(path, tensors)
    mc = memcuda.connect(node=gpu.node)
    mc.load_safetensors(path, "m", device=0)
    got = mc.get_set("m")
    views = {name: torch.from_dlpack(t) for name, t in got.items()}
    for name, array in tensors.items():
        assert torch.equal(views[name].cpu(), torch.from_numpy(array)), name
    records = {name: mc.stat("m/" + name) for name in tensors}
    base = min(records.values(), key=lambda r: r["offset"])
    for name, t in got.items():  # one mapping: addresses as far apart as offsets
        assert t.data_ptr - got[base["name"][2:]].data_ptr == records[name]["offset"] - base["offset"]
    gpu.python("import torch, numpy as np; got = mc.get_set('m'); rng = np.random.default_rng(21); "
               "w0 = rng.standard_normal((64, 32)).astype(np.float16); "
               "assert torch.equal(torch.from_dlpack(got['w.0']).cpu(), torch.from_numpy(w0))")
    del views, got, t
    gc.collect()
    gpu.run("mcd-rm", "m/")
    # The child's references go back once the server sees it gone (within about a second).
    end = time.time() + 10
    while mc.ls() and time.time() < end:
        time.sleep(0.05)
    assert mc.ls() == []


def test_as_torch_views_plain_tensors_alone_or_in_a_list_and_holds_their_references(gpu):
    rng = np.random.default_rng(34)
    mc = memcuda.connect(node=gpu.node)
    written, kinds = {}, [("f16", np.float16), ("f32", np.float32), ("i64", np.int64)]
    for i, (dtype, np_dtype) in enumerate(kinds):
        raw = rng.integers(0, 256, size=(5 + i) * 3 * np.dtype(np_dtype).itemsize,
                           dtype=np.uint8).tobytes()  # random bytes, NaNs and all
        mc.create("q%d" % i, (5 + i, 3), dtype, data=raw)
        written["q%d" % i] = raw
    names = sorted(written)
    got = mc.get_many(names)
    views = memcuda.as_torch(got)  # a list: a list, in order
    assert isinstance(views, list) and len(views) == len(got)
    for name, t, view in zip(names, got, views):
        assert view.data_ptr() == t.data_ptr, name  # in place, not a copy
        assert view.dtype == torch.from_dlpack(t).dtype and tuple(view.shape) == t.shape, name
        assert view.cpu().contiguous().view(torch.uint8).numpy().tobytes() == written[name], name
    assert [mc.stat(n)["refcount"] for n in names] == [2, 2, 2]
    del got, t
    gc.collect()
    assert [mc.stat(n)["refcount"] for n in names] == [2, 2, 2], "the views hold them"
    del views, view
    gc.collect()
    assert [mc.stat(n)["refcount"] for n in names] == [1, 1, 1]
    one = memcuda.as_torch(mc.get("q1"))  # a Tensor: a torch.Tensor
    assert isinstance(one, torch.Tensor) and tuple(one.shape) == (6, 3)
    assert one.cpu().contiguous().view(torch.uint8).numpy().tobytes() == written["q1"]
    assert mc.stat("q1")["refcount"] == 2
    del one
    gc.collect()
    assert mc.stat("q1")["refcount"] == 1
    with pytest.raises(memcuda.InvalidArgument):
        memcuda.as_torch("q1")
    for name in names:
        mc.rm(name)
    assert mc.ls() == []


def test_as_torch_views_a_sets_members_in_place_and_holds_its_reference(gpu):
    rng = np.random.default_rng(33)
    kinds = [("f16", np.float16), ("f32", np.float32), ("u8", np.uint8), ("i64", np.int64),
             ("bf16", np.uint16)]
    members, written = [], {}
    for i in range(40):
        dtype, np_dtype = kinds[i % len(kinds)]
        shape = (3 + i, 5) if i % 3 else (7 + i,)
        raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(np_dtype).itemsize,
                           dtype=np.uint8).tobytes()  # random bytes, NaNs and all
        members.append(("p.%d" % i, shape, dtype, raw))
        written["p.%d" % i] = raw
    mc = memcuda.connect(node=gpu.node)
    mc.create_set("v", members, device=0)
    got = mc.get_set("v")
    views = memcuda.as_torch(got)
    assert list(views) == list(got)
    leader = sorted("v/" + name for name in got)[0]
    for name, t in got.items():
        view = views[name]
        assert view.data_ptr() == t.data_ptr, name  # in place, not a copy
        assert view.dtype == torch.from_dlpack(t).dtype and tuple(view.shape) == t.shape, name
        assert view.is_contiguous(), name
        assert view.cpu().contiguous().view(torch.uint8).numpy().tobytes() == written[name], name
    # The views alone keep the set's reference and mapping: the Tensors may go.
    count = mc.stat(leader)["refcount"]
    del got, t
    gc.collect()
    assert mc.stat(leader)["refcount"] == count
    assert views["p.4"].cpu().contiguous().view(torch.uint8).numpy().tobytes() == written["p.4"]
    views["p.1"].fill_(2.0)  # writable, as any view
    del views, view
    gc.collect()
    assert mc.stat(leader)["refcount"] == count - 1
    plain = mc.create("plain", (4,), "f32")
    mixed = memcuda.as_torch({"x": plain})  # not a set's member: torch.from_dlpack
    assert mixed["x"].data_ptr() == plain.data_ptr
    del mixed
    plain.release()
    mc.rm("plain")
    mc.rm("v/")
    assert mc.ls() == []
