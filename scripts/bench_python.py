#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""Python programs sharing a GPU tensor, memcuda beside torch.multiprocessing, in one run.

memcuda's rows and the peer's are timed alike, from before the producer makes the tensor to the
consumer's acknowledgement, with the same two processes and the same multiprocessing Pipe
(pickled by torch.multiprocessing's reductions, without a Queue's feeder thread) carrying the
handover: memcuda's producer creates a named tensor (zeroed, on GPU 0) and sends its name, the
consumer gets it, views it as a torch.Tensor (torch.from_dlpack; in a second row
torch.as_tensor, through __cuda_array_interface__; in a third memcuda.as_torch), reads one
element and
acknowledges (its references are given back outside the time, as mcd-bench's share row does);
the peer's producer makes torch.zeros and sends the tensor itself (CUDA IPC underneath), the
consumer reads one element, drops it and acknowledges. The producer's cleanup (memcuda's
release and rm; the peer's drop of the tensor) is outside the time on both sides, in batches
of 64 (a server freeing memory while the next create runs would otherwise be timed too).

A third row, "handover floor", times what every Python share here pays whoever shares: the
producer sends a name over the same Pipe, the consumer reads one element of a torch.Tensor it
has open already and acknowledges. A share can be no faster than that.

Two "python create" rows say where the producer's time goes: its creates in the share rows, and
as many back to back (as mcd-bench's create row times the C++ one), each with libmemcuda's own
call apart from the Python around it.

Needs a running mcd-serve with a GPU (MCD_REDIS_URL or the private Redis of
`mcd-serve --spawn-redis`), PyTorch, and the memcuda package (pip install ./python, or
PYTHONPATH=python). Prints a table; --json writes the rows as mcd-bench does.

    mcd-serve --spawn-redis & python3 scripts/bench_python.py --sizes 1MiB --iterations 300
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import memcuda  # noqa: E402
from bench_torch_peer import parse_size, percentile  # noqa: E402  (the peer's own script, beside this one)

class _TimedCalls:
    """libmemcuda's calls as the memcuda package makes them, with the time of mcd_create_ex
    kept: what of a Python create is the library's, and what is Python's own."""

    def __init__(self, lib):
        self._lib = lib
        self.create_us = []

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def mcd_create_ex(self, *args):
        t0 = time.perf_counter()
        rc = self._lib.mcd_create_ex(*args)
        self.create_us.append((time.perf_counter() - t0) * 1e6)
        return rc


def consumer(conn, node):
    torch.zeros(1, device="cuda")  # context up before the first measurement
    mc = memcuda.connect(node=node)
    conn.send("ready")
    steps = {"get": [], "dlpack": [], "as_tensor": [], "as_torch": [], "read": []}
    held = []  # given back in batches, outside the time, as mcd-bench's share row does
    resident = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda")  # the floor row's tensor
    while True:
        item = conn.recv()
        if item is None:
            break
        if isinstance(item, str) and item == "floor":
            _ = resident[0].item()
            conn.send("ok")
            continue
        if isinstance(item, str) and item == "give back":
            for t in held:
                t.release()
            held.clear()
            conn.send("released")
            continue
        if isinstance(item, tuple):  # memcuda: how to view it, and a name
            how, name = item
            t0 = time.perf_counter()
            t = mc.get(name)
            t1 = time.perf_counter()
            view = (torch.from_dlpack(t) if how == "dlpack" else
                    torch.as_tensor(t, device="cuda") if how == "as_tensor" else
                    memcuda.as_torch(t))
            t2 = time.perf_counter()
            _ = view[0].item()
            t3 = time.perf_counter()
            conn.send("ok")
            for step, us in zip(("get", how, "read"), (t1 - t0, t2 - t1, t3 - t2)):
                steps[step].append(us * 1e6)
            del view
            held.append(t)
        else:  # torch.multiprocessing: the tensor itself
            _ = item[0].item()
            del item
            conn.send("ok")
    print("consumer steps, medians (us): " + ", ".join(
        "%s %.1f" % (k, percentile(v, 0.5)) for k, v in steps.items()), file=sys.stderr)


def producer_creates(mc, calls, size, n, share_creates_us):
    """The "python create" rows: the share rows' creates (`share_creates_us`, with libmemcuda's
    own calls in `calls`), against `n` creates back to back, as mcd-bench's create row times the
    C++ one: what a create pays for the server's idle time between two handovers. Those tensors
    are given back 64 at a time, outside the time."""
    share_creates, share_calls = list(share_creates_us), list(calls.create_us)
    del share_creates_us[:], calls.create_us[:]
    loop_creates, made = [], []
    for i in range(n):
        name = "bench-py-%d-loop-%d" % (os.getpid(), i)
        t0 = time.perf_counter()
        made.append(mc.create(name, (size,), "u8", device=0))
        loop_creates.append((time.perf_counter() - t0) * 1e6)
        if len(made) >= 64 or i == n - 1:
            for t in made:
                t.release()
                mc.rm(t.name)
            made.clear()
    loop_calls = list(calls.create_us)
    del calls.create_us[:]
    print("%d B, producer's create, median (us): in the share rows %.1f (libmemcuda's call "
          "%.1f), back to back %.1f (libmemcuda's call %.1f)"
          % (size, percentile(share_creates, 0.5), percentile(share_calls, 0.5),
             percentile(loop_creates, 0.5), percentile(loop_calls, 0.5)), file=sys.stderr)
    return [{"row": "python create", "peer": which, "bytes": size, "n": len(values),
             "median_us": percentile(values, 0.5), "p90_us": percentile(values, 0.9),
             "p99_us": percentile(values, 0.99)}
            for which, values in (("share rows", share_creates), ("back to back", loop_creates))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1MiB")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--node", default=None)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()

    mp.set_start_method("spawn")
    calls = memcuda._clib = _TimedCalls(memcuda._clib)
    mc = memcuda.connect(node=args.node)
    conn, child = mp.Pipe()
    proc = mp.Process(target=consumer, args=(child, args.node), daemon=True)
    proc.start()
    assert conn.recv() == "ready"
    torch.zeros(1, device="cuda")

    def memcuda_share(size, i, how="dlpack"):
        name = "bench-py-%d-%s-%d" % (os.getpid(), how, i)
        t0 = time.perf_counter()
        t = mc.create(name, (size,), "u8", device=0)
        create_us.append((time.perf_counter() - t0) * 1e6)
        conn.send((how, name))
        conn.recv()
        elapsed = time.perf_counter() - t0
        made.append((name, t))  # removed in batches, as the peer's tensors are dropped
        return elapsed

    def remove_made():
        conn.send("give back")  # the consumer's references first
        assert conn.recv() == "released"
        for name, t in made:
            t.release()
            mc.rm(name)
        made.clear()

    def torch_share(size, i):
        t0 = time.perf_counter()
        t = torch.zeros(size, dtype=torch.uint8, device="cuda")
        conn.send(t)
        conn.recv()
        elapsed = time.perf_counter() - t0
        kept.append(t)  # the producer keeps a shared tensor alive until the consumer let go
        return elapsed

    def floor_handover(size, i):
        t0 = time.perf_counter()
        conn.send("floor")
        conn.recv()
        return time.perf_counter() - t0

    rows = []
    kept = []
    made = []
    create_us = []
    for size in sorted(parse_size(s) for s in args.sizes.split(",")):
        rows_of = {"dlpack": "memcuda, torch.from_dlpack", "as_tensor": "memcuda, torch.as_tensor",
                   "as_torch": "memcuda, memcuda.as_torch"}
        lat = {row: [] for row in rows_of.values()}
        lat.update({"torch.multiprocessing": [], "handover floor": []})
        for i in range(5):  # warm-up of both
            memcuda_share(size, -1 - i)
            torch_share(size, i)
        del create_us[:], calls.create_us[:]  # the creates of the share rows only
        for how, row in rows_of.items():
            for i in range(args.iterations):
                lat[row].append(memcuda_share(size, i, how) * 1e6)
                if len(made) >= 64:
                    remove_made()
            remove_made()
        for i in range(args.iterations):
            lat["torch.multiprocessing"].append(torch_share(size, i) * 1e6)
            if len(kept) >= 64:
                kept.clear()
        kept.clear()
        for i in range(args.iterations):
            lat["handover floor"].append(floor_handover(size, i) * 1e6)
        rows.extend(producer_creates(mc, calls, size, args.iterations, create_us))
        for peer, values in lat.items():
            rows.append({"row": "python share", "peer": peer, "bytes": size, "n": len(values),
                         "median_us": percentile(values, 0.5), "p90_us": percentile(values, 0.9),
                         "p99_us": percentile(values, 0.99)})
    conn.send(None)
    proc.join(timeout=10)
    config = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "host": socket.gethostname(),
              "memcuda": memcuda.version(), "iterations": args.iterations}
    if args.json:
        json.dump({"tool": "bench_python", "config": config, "rows": rows}, sys.stdout, indent=1)
        print()
        return
    print("%-14s %-28s %10s %12s %10s %10s" % ("row", "", "bytes", "median us", "p90 us", "p99 us"))
    for r in rows:
        print("%-14s %-28s %10d %12.1f %10.1f %10.1f"
              % (r["row"], r["peer"], r["bytes"], r["median_us"], r["p90_us"], r["p99_us"]))
    shares = [r for r in rows if r["row"] == "python share"]
    for size in sorted({r["bytes"] for r in shares}):
        peer = next(r for r in shares if r["bytes"] == size and r["peer"].startswith("torch"))
        for ours in (r for r in shares if r["bytes"] == size and r["peer"].startswith("memcuda")):
            print("%d B, %s: %.2fx torch.multiprocessing (medians, one run)"
                  % (size, ours["peer"], peer["median_us"] / ours["median_us"]))


if __name__ == "__main__":
    main()
