#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""The peer a user would pick instead of memcuda: torch.multiprocessing sharing a CUDA tensor.

Measured the way mcd-bench measures its "share" row: a producer process creates a tensor (zeroed,
as memcuda's default), hands it to a consumer process through a torch.multiprocessing Queue
(CUDA IPC underneath), the consumer reads one element and acknowledges; the time is from
before the creation to the acknowledgement. Writes the same JSON shape as `mcd-bench --json`.

Two rows per size, as mcd-bench's: "share" (a fresh tensor: torch.zeros inside the time) and
"share_existing" (the tensor made and filled before the clock, which times the handover alone).

    python3 scripts/bench_torch_peer.py --sizes 4KiB,1MiB,64MiB,1GiB,8GiB --iterations 200 > torch.json
"""
import argparse
import json
import socket
import sys
import time

try:
    import torch
    import torch.multiprocessing as mp
except ImportError:  # parse_size and percentile serve scripts that run without PyTorch
    torch = mp = None

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
LIVE_BYTES = 8 << 30  # the producer drops its shared tensors once it holds this many bytes


def parse_size(text):
    t = text.strip().rstrip("B").rstrip("i")
    unit = t[-1] if t and t[-1] in UNITS else ""
    return int(float(t[: len(t) - len(unit)]) * UNITS[unit])


def consumer(inbox, acks, device):
    torch.cuda.set_device(device)
    torch.zeros(1, device="cuda")  # context up before the first measurement
    acks.put("ready")
    while True:
        t = inbox.get()
        if t is None:
            break
        _ = t[0].item()  # touch: one element read through the mapping
        del t
        acks.put("ok")


def percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))] if v else 0.0


def nvidia_driver_version():
    """The NVIDIA kernel module's version (580.159.04, say), or None."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            words = f.readline().split()
    except OSError:
        return None
    return next((w for w in words if "." in w and all(c.isdigit() or c == "." for c in w)), None)


NOTES = {False: "torch.zeros in A, Queue to B, B reads one element, ack to A",
         True: "a tensor A made and filled before the clock: Queue to B, B reads one element, ack to A"}


def share(inbox, acks, size, n, max_seconds, device, existing):
    """Latencies (us) of n handovers: fresh (torch.zeros inside the time) or existing (made and
    filled before the clock). The producer keeps each shared tensor alive itself (the consumer
    drops its copy at once), in batches of LIVE_BYTES, as mcd-bench's share rows do."""
    kept, lat = [], []
    for _ in range(3):  # warm-up: first sends set up the IPC machinery
        t = torch.zeros(size, dtype=torch.uint8, device=device)
        inbox.put(t)
        acks.get()
    del t
    deadline = time.monotonic() + max_seconds
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        if existing:
            t = torch.empty(size, dtype=torch.uint8, device=device).fill_(1)
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        if not existing:
            t = torch.zeros(size, dtype=torch.uint8, device=device)
        inbox.put(t)
        acks.get()
        lat.append((time.perf_counter() - t0) * 1e6)
        kept.append(t)
        if len(kept) * size >= LIVE_BYTES:  # given back outside the time, as mcd-bench's share rows do
            kept.clear()
            del t
    kept.clear()
    torch.cuda.synchronize(device)
    return lat


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4KiB,1MiB,64MiB,1GiB")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--max-seconds", type=float, default=5.0)
    ap.add_argument("--device", type=int, default=0, help="the GPU both processes work on")
    args = ap.parse_args()

    mp.set_start_method("spawn")
    inbox, acks = mp.Queue(), mp.Queue()
    proc = mp.Process(target=consumer, args=(inbox, acks, args.device), daemon=True)
    proc.start()
    assert acks.get() == "ready"
    device = torch.device("cuda", args.device)
    torch.zeros(1, device=device)
    rows = []
    for size in sorted(parse_size(s) for s in args.sizes.split(",")):
        n = args.iterations
        for existing in (False, True):
            lat = share(inbox, acks, size, n, args.max_seconds, device, existing)
            mean = sum(lat) / len(lat)
            rows.append({"row": "share_existing" if existing else "share", "allocator": "torch.multiprocessing",
                         "device": str(args.device), "bytes": size, "n": len(lat),
                         "median_us": percentile(lat, 0.5), "p90_us": percentile(lat, 0.9),
                         "p99_us": percentile(lat, 0.99), "max_us": max(lat), "ops_per_s": 1e6 / mean,
                         "x_floor": 0, "note": NOTES[existing]})
            print(f"torch {rows[-1]['row']} {size} B: median {rows[-1]['median_us']:.1f} us", file=sys.stderr)
    inbox.put(None)
    proc.join(timeout=10)
    config = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(args.device), "device": args.device, "host": socket.gethostname(),
              "iterations": args.iterations}
    driver = nvidia_driver_version()
    if driver:
        config["nvidia_driver"] = driver  # as mcd-bench records it, to pair the two records
    record = {"tool": "bench_torch_peer", "config": config, "rows": rows}
    json.dump(record, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
