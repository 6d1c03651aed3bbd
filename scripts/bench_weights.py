#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""A model's weights to every worker at once: memcuda beside torch.multiprocessing, in one run.

One producer makes a 7B-like set of weights (by default 291 f16 tensors, 13.5 GB, shaped as a
Llama-7B checkpoint) filled with random bytes on GPU 0. For each row, fresh consumer processes
(4 by default, started and with their CUDA context up before the clock starts) are each sent a
message; each then gets every tensor as a torch view and reads one element of each. The clock runs
from the producer's message to that consumer's last read, per consumer; rows alternate within
each round. Rows:

- memcuda, batched get: plain tensors (one allocation each), conn.get_many(names) in one call,
  then memcuda.as_torch of the list (each tensor's own DLPack capsule to torch.from_dlpack);
- memcuda, tensor set: the same weights as one tensor set (one allocation), conn.get_set(name),
  then memcuda.as_torch (one DLPack export of the set, a strided view of it per member);
- torch.multiprocessing: the producer sends a dict of its CUDA tensors through a Pipe;
- CUDA alone, a floor: the producer sends the IPC handles of the allocations the peer's tensors
  live in, and each consumer opens every one with cupy.cuda.runtime.ipcOpenMemHandle, nothing
  else (no views, no reads, no bytes compared): what opening that many allocations costs, whoever
  asks (needs CuPy; skipped without it). A second floor row opens the set's one allocation so.

Each row also reports the medians of its consumers' parts (get, views, reads): the peer's reads
are a floor of every row, since every consumer reads the same elements.

Every consumer then compares every byte it can see with what the producer wrote (each tensor is
regenerated from its seed on the GPU and compared with torch.equal), outside the time.

A last pair of rows loads the weights from a safetensors file (written from the set beforehand)
into GPU memory: conn.load_safetensors against safetensors.torch.load_file(device="cuda") where
the safetensors package is installed, else a plain read of each tensor and a copy to the GPU;
alternated, the file in the page cache for both (read once before), every byte compared.

Needs a running mcd-serve with a GPU (MCD_REDIS_URL or mcd-serve --spawn-redis), PyTorch, about
3x the weights' size of GPU memory and 1x of disk and host memory (--scale shrinks all of it).

    mcd-serve --spawn-redis & python3 scripts/bench_weights.py --rounds 3 --consumers 4
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import memcuda  # noqa: E402


def llama_shapes(scale):
    """291 (name, shape) pairs shaped as a Llama-7B checkpoint, each dimension of width `scale`
    times its own (1.0: 13.5 GB of f16)."""
    d, ff, vocab, layers = int(4096 * scale), int(11008 * scale), int(32000 * scale), 32
    shapes = [("model.embed_tokens.weight", (vocab, d))]
    for i in range(layers):
        p = "model.layers.%d." % i
        shapes += [(p + "self_attn.%s_proj.weight" % x, (d, d)) for x in "qkvo"]
        shapes += [(p + "mlp.gate_proj.weight", (ff, d)), (p + "mlp.up_proj.weight", (ff, d)),
                   (p + "mlp.down_proj.weight", (d, ff)), (p + "input_layernorm.weight", (d,)),
                   (p + "post_attention_layernorm.weight", (d,))]
    shapes += [("model.norm.weight", (d,)), ("lm_head.weight", (vocab, d))]
    return shapes


def weights_of(index, shape):
    """Tensor `index`'s bytes: random, from its own seed, so that a consumer can make them again."""
    g = torch.Generator(device="cuda")
    g.manual_seed(1000 + index)
    return torch.randint(-32768, 32768, shape, dtype=torch.int16, device="cuda",
                         generator=g).view(torch.float16)


def cuda_ipc_handle(t):
    """The cudaIpcMemHandle_t of the allocation torch tensor `t` lives in, as torch exports it
    (torch 2.x puts a byte or two, the format's version and the kind of handle, before its 64
    bytes)."""
    handle = bytes(t.untyped_storage()._share_cuda_()[1])
    if not 64 <= len(handle) <= 66:
        raise SystemExit("torch exports a CUDA IPC handle of %d bytes" % len(handle))
    return handle[-64:]


def check_all(views, shapes):
    """How many of the weights differ in any byte from what the producer wrote."""
    bad = 0
    for i, (name, shape) in enumerate(shapes):
        if not torch.equal(views[name].view(torch.int16), weights_of(i, shape).view(torch.int16)):
            bad += 1
    return bad


class _TimedLib:
    """libmemcuda's calls as the memcuda package makes them, with the time of each kept: what of
    a consumer's time is the library's, and what is Python's own."""

    def __init__(self, lib):
        self._lib = lib
        self.us = {}

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if not name.startswith("mcd_get"):
            return fn

        def timed(*args):
            t0 = time.perf_counter()
            rc = fn(*args)
            self.us[name] = self.us.get(name, 0) + (time.perf_counter() - t0) * 1e6
            return rc
        return timed


def consumer(conn, node, mode, shapes):
    torch.zeros(1, device="cuda")  # the context up before the clock starts
    if mode == "bare":
        import cupy  # before the clock too
    memcuda._clib = lib = _TimedLib(memcuda._clib)
    mc = memcuda.connect(node=node)
    conn.send("ready")
    message = conn.recv()
    t0 = time.perf_counter()
    if mode == "bare":
        opened = [cupy.cuda.runtime.ipcOpenMemHandle(handle) for handle in message]
        done = time.perf_counter()
        conn.send((done, done - t0, 0.0, 0.0))
        for ptr in opened:
            cupy.cuda.runtime.ipcCloseMemHandle(ptr)
        conn.send(0)
        conn.recv()
        return
    if mode == "peer":
        views = message
        held = None
    elif mode == "batched":
        held = mc.get_many(message)
    else:
        held = mc.get_set(message)
    t1 = time.perf_counter()
    if mode == "batched":
        views = dict(zip((name[len("plain/"):] for name in message), memcuda.as_torch(held)))
    elif mode == "set":
        views = memcuda.as_torch(held)
    t2 = time.perf_counter()
    for v in views.values():
        _ = v.view(-1)[0].item()
    done = time.perf_counter()  # CLOCK_MONOTONIC: the producer's clock too
    conn.send((done, t1 - t0, t2 - t1, done - t2))
    print("%s consumer (ms): get %.1f (libmemcuda %.1f), views %.1f, reads %.1f"
          % (mode, (t1 - t0) * 1e3, sum(lib.us.values()) / 1e3, (t2 - t1) * 1e3,
             (done - t2) * 1e3), file=sys.stderr)
    conn.send(check_all(views, shapes))
    del views, held
    conn.recv()  # hold on until the producer has every answer


def run_row(mode, message, args, shapes):
    """One row's consumers, fresh: their times (s) from their message to their last read, and
    each one's parts (get, views, reads)."""
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(args.consumers):
        here, there = ctx.Pipe()
        proc = ctx.Process(target=consumer, args=(there, args.node, mode, shapes), daemon=True)
        proc.start()
        pipes.append(here)
        procs.append(proc)
    for p in pipes:
        assert p.recv() == "ready"
    starts = []
    for p in pipes:
        starts.append(time.perf_counter())
        p.send(message)
    answers = [p.recv() for p in pipes]
    times = [a[0] - t0 for a, t0 in zip(answers, starts)]
    parts = [a[1:] for a in answers]
    bad = [p.recv() for p in pipes]
    for p in pipes:
        p.send("bye")
    for proc in procs:
        proc.join(60)
    if any(bad):
        raise SystemExit("%s: consumers saw %r weights that differ from the producer's" % (mode, bad))
    return times, parts


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def load_rows(mc, shapes, names, args, rows):
    """Loading the weights from a safetensors file: memcuda's set against torch, alternated."""
    try:
        from safetensors.torch import load_file
        peer = "safetensors.torch.load_file(device='cuda')"
    except ImportError:
        load_file = None
        peer = "torch: read each tensor, copy to the GPU"
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        path = os.path.join(tmp, "weights.safetensors")
        mc.save_safetensors("set", path)
        with open(path, "rb") as f:  # into the page cache, for both
            while f.read(1 << 26):
                pass
        size = os.path.getsize(path)

        def torch_load():
            if load_file is not None:
                return load_file(path, device="cuda")
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
                out = {}
                for name, entry in header.items():
                    if name == "__metadata__":
                        continue
                    begin, end = entry["data_offsets"]
                    f.seek(8 + n + begin)
                    host = torch.frombuffer(bytearray(f.read(end - begin)), dtype=torch.float16)
                    out[name] = host.to("cuda").view(entry["shape"])
                return out

        times = {"memcuda load_safetensors": [], peer: []}
        for r in range(args.rounds):
            for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                if which == 0:
                    mc.load_safetensors(path, "loaded", device=0)
                    times["memcuda load_safetensors"].append(time.perf_counter() - t0)
                    got = mc.get_set("loaded")
                    views = {n: torch.from_dlpack(t) for n, t in got.items()}
                else:
                    views = torch_load()
                    torch.cuda.synchronize()
                    times[peer].append(time.perf_counter() - t0)
                bad = check_all(views, shapes)
                if bad:
                    raise SystemExit("load %d: %d weights differ" % (which, bad))
                del views
                if which == 0:
                    del got
                    for n in sorted(mc.ls("loaded/*"), key=lambda x: x["name"]):
                        mc.rm(n["name"])
                torch.cuda.empty_cache()
        for row, values in times.items():
            rows.append({"row": "load safetensors", "peer": row, "bytes": size,
                         "n": len(values), "median_s": median(values),
                         "gb_per_s": size / median(values) / 1e9})


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--scale", type=float, default=1.0, help="width of every dimension (1: 13.5 GB)")
    ap.add_argument("--node", default=None)
    ap.add_argument("--tmp", default=None, help="where the safetensors file is written")
    ap.add_argument("--no-load", action="store_true", help="skip the safetensors rows")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    mp.set_start_method("spawn")

    shapes = llama_shapes(args.scale)
    mc = memcuda.connect(node=args.node)
    total = sum(2 * torch.Size(s).numel() for _, s in shapes)
    print("%d tensors, %.2f GB of f16" % (len(shapes), total / 1e9), file=sys.stderr)

    # The same weights three times: plain memcuda tensors, a memcuda set, the peer's tensors.
    plain = {}
    for i, (name, shape) in enumerate(shapes):
        t = mc.create("plain/" + name, shape, "f16", device=0, init="none")
        torch.from_dlpack(t).copy_(weights_of(i, shape))
        plain[name] = t
    memcuda_set = mc.create_set("set", [(name, shape, "f16") for name, shape in shapes], device=0)
    views = {n: torch.from_dlpack(t) for n, t in memcuda_set.items()}
    for i, (name, shape) in enumerate(shapes):
        views[name].copy_(weights_of(i, shape))
    del views
    peer = {name: weights_of(i, shape) for i, (name, shape) in enumerate(shapes)}
    torch.cuda.synchronize()

    plain_names = ["plain/" + name for name, _ in shapes]
    rows_of = {"memcuda, batched get": ("batched", plain_names),
               "memcuda, tensor set": ("set", "set"),
               "torch.multiprocessing": ("peer", peer)}
    try:
        import cupy  # noqa: F401
        # The peer's allocations, each once (small tensors share one of the caching allocator's).
        handles = {cuda_ipc_handle(t) for t in peer.values()}
        rows_of["CUDA alone: the peer's %d allocations opened" % len(handles)] = (
            "bare", sorted(handles))
        # The set's one allocation, as its get opens it.
        first = mc.stat("set/" + shapes[0][0])
        if first["ipc_kind"] == "cuda_ipc":
            rows_of["CUDA alone: the set's one allocation opened"] = (
                "bare", [bytes.fromhex(first["ipc_handle_hex"])])
    except ImportError:
        print("no CuPy: the floor of opening the allocations is not measured", file=sys.stderr)
    times = {row: [] for row in rows_of}
    parts = {row: [] for row in rows_of}
    order = list(rows_of)
    for r in range(args.rounds):
        for row in (order if r % 2 == 0 else order[::-1]):
            mode, message = rows_of[row]
            row_times, row_parts = run_row(mode, message, args, shapes)
            times[row].extend(row_times)
            parts[row].extend(row_parts)
    rows = [{"row": "weights to every worker", "peer": row, "bytes": total,
             "tensors": len(shapes), "consumers": args.consumers, "n": len(values),
             "median_ms": median(values) * 1e3, "max_ms": max(values) * 1e3,
             "get_ms": median([p[0] for p in parts[row]]) * 1e3,
             "views_ms": median([p[1] for p in parts[row]]) * 1e3,
             "reads_ms": median([p[2] for p in parts[row]]) * 1e3}
            for row, values in times.items()]

    del plain, memcuda_set
    for name in plain_names:
        mc.rm(name)
    if not args.no_load:
        load_rows(mc, shapes, plain_names, args, rows)
    for name, _ in shapes:
        mc.rm("set/" + name)
    del peer
    torch.cuda.empty_cache()

    base = {r["peer"]: r for r in rows if r["row"] == "weights to every worker"}
    torch_ms = base["torch.multiprocessing"]["median_ms"]
    for r in rows:
        if r["row"] == "weights to every worker":
            r["vs_peer"] = torch_ms / r["median_ms"]
    loads = [r for r in rows if r["row"] == "load safetensors"]
    if loads:
        peer_rate = [r for r in loads if not r["peer"].startswith("memcuda")][0]["gb_per_s"]
        for r in loads:
            r["vs_peer"] = r["gb_per_s"] / peer_rate
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            if "median_ms" in r:
                print("%-24s %-44s median %8.1f ms  max %8.1f ms  %.2fx the peer"
                      "  (get %.1f, views %.1f, reads %.1f)"
                      % (r["row"], r["peer"], r["median_ms"], r["max_ms"], r["vs_peer"],
                         r["get_ms"], r["views_ms"], r["reads_ms"]))
            else:
                print("%-24s %-44s %6.2f GB/s  %.2fx the peer"
                      % (r["row"], r["peer"], r["gb_per_s"], r["vs_peer"]))


if __name__ == "__main__":
    main()
