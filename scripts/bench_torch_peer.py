#!/usr/bin/env python3
"""The peer a user would pick instead of memcuda: torch.multiprocessing sharing a CUDA tensor.

Measured the way mcd-bench measures its "share" row: a producer process creates a tensor (zeroed,
as memcuda's default), hands it to a consumer process through a torch.multiprocessing Queue
(CUDA IPC underneath), the consumer reads one element and acknowledges; the time is from
before the creation to the acknowledgement. Writes the same JSON shape as `mcd-bench --json`.

    python3 scripts/bench_torch_peer.py --sizes 4KiB,1MiB,64MiB,1GiB --iterations 200 > torch.json
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
LIVE_BUDGET = 8 << 30


def parse_size(text):
    t = text.strip().rstrip("B").rstrip("i")
    unit = t[-1] if t and t[-1] in UNITS else ""
    return int(float(t[: len(t) - len(unit)]) * UNITS[unit])


def consumer(inbox, acks):
    torch.cuda.init()
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4KiB,1MiB,64MiB,1GiB")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--max-seconds", type=float, default=5.0)
    args = ap.parse_args()

    mp.set_start_method("spawn")
    inbox, acks = mp.Queue(), mp.Queue()
    proc = mp.Process(target=consumer, args=(inbox, acks), daemon=True)
    proc.start()
    assert acks.get() == "ready"
    torch.zeros(1, device="cuda")
    rows = []
    for size in sorted(parse_size(s) for s in args.sizes.split(",")):
        n = min(args.iterations, max(3, LIVE_BUDGET // size))
        kept, lat = [], []
        for _ in range(3):  # warm-up: first sends set up the IPC machinery
            t = torch.zeros(size, dtype=torch.uint8, device="cuda")
            inbox.put(t)
            acks.get()
            kept.append(t)
        deadline = time.monotonic() + args.max_seconds
        for _ in range(n):
            if time.monotonic() > deadline:
                break
            t0 = time.perf_counter()
            t = torch.zeros(size, dtype=torch.uint8, device="cuda")
            inbox.put(t)
            acks.get()
            lat.append((time.perf_counter() - t0) * 1e6)
            kept.append(t)  # the producer must keep every shared tensor alive itself
        kept.clear()
        torch.cuda.synchronize()
        mean = sum(lat) / len(lat)
        rows.append({"row": "share", "allocator": "torch.multiprocessing", "device": "0", "bytes": size,
                     "n": len(lat), "median_us": percentile(lat, 0.5), "p90_us": percentile(lat, 0.9),
                     "p99_us": percentile(lat, 0.99), "max_us": max(lat), "ops_per_s": 1e6 / mean, "x_floor": 0,
                     "note": "torch.zeros in A, Queue to B, B reads one element, ack to A"})
        print(f"torch share {size} B: median {rows[-1]['median_us']:.1f} us", file=sys.stderr)
    inbox.put(None)
    proc.join(timeout=10)
    config = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "host": socket.gethostname(),
              "iterations": args.iterations}
    driver = nvidia_driver_version()
    if driver:
        config["nvidia_driver"] = driver  # as mcd-bench records it, to pair the two records
    record = {"tool": "bench_torch_peer", "config": config, "rows": rows}
    json.dump(record, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
