#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""Copies between nodes, measured: `mcd-create DST --copy-of SRC` between two mcd-serve processes
of different nodes on this host, over UCX's TCP transport (a server refuses transports that
cannot report the other's failure, as shared memory alone cannot in UCX 1.13), for host and GPU
tensors, beside a plain cudaMemcpy D2H + H2D of the same size (PyTorch, pageable and pinned).
With a CUDA-aware UCX (LD_LIBRARY_PATH), GPU tensors are copied both in place and staged in
pinned host memory (mcd-serve --stage-gpu-copies), in one run.

Each figure is the median of --rounds copies of a size made back to back, as a node that pulls
several tensors makes them, timed around the mcd-create process (its start and Redis round trips
included: the 4 KiB row shows that fixed part); the first copy of a size is shown apart, since
no ready block of the size waits for it (mcd-serve(1), --ready-max). Each source holds random
bytes, and every copy is read back and compared with it once all of the size are made, outside
the time. For host tensors a second
table sets the copies beside the transport's own speed in the same run: ucx_perftest's
active-message bandwidth (ucp_am_bw, warm and cold; package ucx-utils) and the rate of writing a
new shared-memory object, as a copy's destination is. Needs redis-server and the mcd-* tools on
PATH (or --bin); the GPU rows need a CUDA device and, for the baseline, PyTorch.

    python3 scripts/bench_copy.py --sizes 64MiB,1GiB --devices cpu,0
    python3 scripts/bench_copy.py --transports "tcp,cuda_copy tcp,sm,cuda_copy,cuda_ipc" --devices 0
"""
import argparse
import mmap
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch_peer import parse_size  # noqa: E402


def run(tool, args, env, check=True):
    out = subprocess.run([tool] + args, env=env, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SystemExit(f"{os.path.basename(tool)} {' '.join(args)}: {out.stderr.strip()}")
    return out


def wait_for(predicate, seconds):
    end = time.time() + seconds
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def start_redis(tmp):
    """A private redis-server on a Unix socket in `tmp`, and the environment that names it."""
    sock = os.path.join(tmp, "redis.sock")
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
                              "--dir", tmp], stdout=subprocess.DEVNULL)
    if not wait_for(lambda: os.path.exists(sock), 10):
        redis.kill()
        raise SystemExit("redis-server did not start")
    return redis, dict(os.environ, MCD_REDIS_URL=f"unix://{sock}")


def start_servers(bin_dir, env, tls, devices, staged, tmp):
    """The two servers, and whether they move GPU tensors in place."""
    servers = []
    in_place = False
    for node in ("copy-a", "copy-b"):
        log = open(os.path.join(tmp, f"{node}-{tls}-{staged}.log"), "w")
        server_env = dict(env, UCX_TLS=tls)
        argv = [os.path.join(bin_dir, "mcd-serve"), "--node", node, "--devices", devices]
        proc = subprocess.Popen(argv + (["--stage-gpu-copies"] if staged else []),
                                env=server_env, stdout=log, stderr=log)
        servers.append(proc)
        ok = wait_for(lambda: "serving node" in open(log.name).read(), 30)
        if not ok:
            raise SystemExit(f"mcd-serve {node} did not start: {open(log.name).read()}")
        in_place = not staged and "reads and writes GPU memory itself" in open(log.name).read()
    return servers, in_place


def human(size):
    """4KiB, 64MiB, 1GiB, as the sizes are given."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def random_npy(path, size):
    """A .npy file of `size` random bytes (u8)."""
    header = "{'descr': '|u1', 'fortran_order': False, 'shape': (%d,), }" % size
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
        left = size
        while left > 0:
            chunk = os.urandom(min(1 << 26, left))
            f.write(chunk)
            left -= len(chunk)


def time_copies(bin_dir, env, device, size, rounds, tmp):
    """Seconds of `rounds` copies of a tensor of `size` random bytes, made back to back: their
    median and the first's. Every copy's bytes are then read back and compared with the
    source's, outside the time."""
    create = os.path.join(bin_dir, "mcd-create")
    get = os.path.join(bin_dir, "mcd-get")
    rm = os.path.join(bin_dir, "mcd-rm")
    source = os.path.join(tmp, f"src-{size}.npy")
    if not os.path.exists(source):
        random_npy(source, size)
    run(create, ["src", "--from", source, "--device", device, "--node", "copy-b", "-q"], env)
    times = []
    for r in range(rounds):
        t0 = time.perf_counter()
        run(create, [f"dst{r}", "--copy-of", "src", "--device", device, "--node", "copy-a", "-q",
                     "--timeout-ms", "600000"], env)
        times.append(time.perf_counter() - t0)
    for r in range(rounds):
        out = os.path.join(tmp, "dst.npy")
        run(get, [f"dst{r}", "--no-ref", "-o", out, "--node", "copy-a", "-q"], env)
        if not same_file(out, source):
            raise SystemExit(f"the copy dst{r} of {size} bytes differs from its source")
        os.unlink(out)
        run(rm, [f"dst{r}", "--node", "copy-a", "-q"], env)
    run(rm, ["src", "--node", "copy-b", "-q"], env)
    return statistics.median(times), times[0]


def same_file(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 24), fb.read(1 << 24)
            if x != y:
                return False
            if not x:
                return True


def perftest(tls, size, warm):
    """ucx_perftest's active-message bandwidth (ucp_am_bw) between two processes here over
    `tls`, in GB/s: warm (buffers reused, the median of 8 after a warm-up) or cold (one message,
    no warm-up: fresh buffers and a fresh connection). None without ucx_perftest."""
    if not shutil.which("ucx_perftest"):
        return None
    env = dict(os.environ, UCX_TLS=tls)
    env.setdefault("UCX_NET_DEVICES", "lo")
    args = ["-t", "ucp_am_bw", "-s", str(size)] + (["-n", "8"] if warm else ["-n", "1", "-w", "0"])
    with socket.socket() as s:  # a free port, for this measurement alone
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    server = subprocess.Popen(["ucx_perftest", "-p", port] + args, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            time.sleep(0.1)
            try:
                out = subprocess.run(["ucx_perftest", "127.0.0.1", "-p", port] + args, env=env,
                                     capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                return None
            final = [line.split() for line in out.stdout.splitlines() if line.startswith("Final:")]
            # Final: iterations, latency typical/average/overall, bandwidth average/overall (MiB/s)
            if final and len(final[0]) >= 7:
                return float(final[0][6]) * 1048576 / 1e9
        return None
    finally:
        server.kill()
        server.wait()


def fresh_memory_floor(size, rounds):
    """GB/s of writing `size` bytes into a new shared-memory object, as a copy's destination is:
    its pages are made as they are first written (the median of `rounds`)."""
    data = os.urandom(size)
    times = []
    for _ in range(rounds):
        with tempfile.TemporaryFile(dir="/dev/shm") as f:
            f.truncate(size)
            with mmap.mmap(f.fileno(), size) as m:
                t0 = time.perf_counter()
                m[:] = data
                times.append(time.perf_counter() - t0)
    return size / statistics.median(times) / 1e9


def cuda_baseline(size, rounds):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    src = torch.empty(size, dtype=torch.uint8, device="cuda")
    out = {}
    for pinned in (False, True):
        host = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
        dst = torch.empty(size, dtype=torch.uint8, device="cuda")
        times = []
        for _ in range(rounds + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            host.copy_(src)
            dst.copy_(host)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out["pinned" if pinned else "pageable"] = statistics.median(times[1:])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="4KiB,64MiB,1GiB")
    p.add_argument("--devices", default="cpu,0", help="cpu and/or a GPU ordinal")
    p.add_argument("--transports", default="tcp",
                   help="UCX_TLS values separated by spaces, one run each")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-perftest", action="store_true",
                   help="leave out the rows of ucx_perftest and of fresh memory")
    p.add_argument("--bin", default=os.environ.get("MCD_BIN_DIR", ""),
                   help="folder of the mcd-* tools (default: from PATH)")
    a = p.parse_args()
    bin_dir = a.bin or os.path.dirname(subprocess.run(["which", "mcd-serve"], capture_output=True,
                                                      text=True).stdout.strip())
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    devices = a.devices.split(",")
    gpus = ",".join(d for d in devices if d != "cpu") or "cpu"
    tmp = tempfile.mkdtemp(prefix="mcd-bench-copy-")
    redis, env = start_redis(tmp)
    rows = []
    try:
        for tls in a.transports.split():
            for staged in (False, True):
                servers, in_place = start_servers(bin_dir, env, tls, gpus, staged, tmp)
                try:
                    for device in devices:
                        if device == "cpu" and staged:
                            continue  # host tensors always go in place
                        path = "" if device == "cpu" else ", in place" if in_place else ", staged"
                        for size in sizes:
                            t, first = time_copies(bin_dir, env, device, size, a.rounds, tmp)
                            memory = "host" if device == "cpu" else f"gpu {device}"
                            rows.append((f"copy {tls}{path}", memory, size, t, first))
                finally:
                    for s in servers:
                        s.terminate()
                        s.wait()
                if not in_place:
                    break  # a UCX that cannot read GPU memory stages without being asked
        if gpus != "cpu":
            for size in sizes:
                base = cuda_baseline(size, a.rounds)
                if base:
                    for kind, t in base.items():
                        rows.append((f"cudaMemcpy D2H+H2D, {kind}", "gpu", size, t, None))
    finally:
        redis.terminate()
        redis.wait()
    print(f"{'path':<44} {'memory':<8} {'size':>8} {'median ms':>10} {'GB/s':>8} "
          f"{'first ms':>9} {'GB/s':>8}")
    for path, memory, size, t, first in rows:
        shown = f"{first * 1e3:>9.2f} {size / first / 1e9:>8.2f}" if first else ""
        print(f"{path:<44} {memory:<8} {human(size):>8} {t * 1e3:>10.2f} {size / t / 1e9:>8.2f} "
              f"{shown}")
    print(f"(each of {a.rounds} copies a size read back and compared with its random source)")
    if "cpu" in devices and not a.no_perftest:
        # The transport's own speed, in the same run: host copies beside ucx_perftest, and the
        # floor a fresh destination sets on this host.
        print()
        print("GB/s:")
        print(f"{'transport':<10} {'size':>8} {'copy':>8} {'perftest warm':>14} "
              f"{'copy/warm':>10} {'perftest cold':>14} {'fresh memory':>13}")
        for size in sizes:
            floor = fresh_memory_floor(size, a.rounds)
            for tls in a.transports.split():
                copy = [t for path, memory, sz, t, _ in rows
                        if path == f"copy {tls}" and memory == "host" and sz == size]
                if not copy:
                    continue
                got = size / copy[0] / 1e9
                warm, cold = perftest(tls, size, True), perftest(tls, size, False)
                ratio = f"{got / warm:.2f}" if warm else "-"
                shown = [f"{v:.2f}" if v else "-" for v in (warm, cold)]
                print(f"{tls:<10} {human(size):>8} {got:>8.2f} {shown[0]:>14} {ratio:>10} "
                      f"{shown[1]:>14} {floor:>13.2f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
