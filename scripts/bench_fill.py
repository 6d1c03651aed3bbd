#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""Tensors made from files, measured: `mcd-create NAME --from FILE.npy` of one size --rounds
times in a row, into host memory and into each GPU asked for, against a private Redis and one
mcd-serve. Each figure is the time of one mcd-create process (its start and Redis round trips
included), the file in the page cache (read once before); the first of a size is shown apart,
since no ready block of the size waits for it (mcd-serve(1), --ready-max). The last of each size
is read back (mcd-get -o) and compared with its file, byte for byte, outside the time.

    python3 scripts/bench_fill.py --sizes 64MiB,1GiB --devices cpu,0 --bin build/bin
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_copy import human, random_npy, run, same_file, start_redis, wait_for  # noqa: E402
from bench_torch_peer import parse_size  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="64MiB,1GiB")
    p.add_argument("--devices", default="cpu", help="cpu and/or GPU ordinals, comma-separated")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--bin", default=os.environ.get("MCD_BIN_DIR", ""),
                   help="folder of the mcd-* tools (default: from PATH)")
    a = p.parse_args()
    tool = (lambda name: os.path.join(a.bin, name)) if a.bin else (lambda name: name)
    devices = a.devices.split(",")
    gpus = ",".join(d for d in devices if d != "cpu") or "cpu"
    tmp = tempfile.mkdtemp(prefix="mcd-bench-fill-")
    redis, env = start_redis(tmp)
    server = None
    try:
        log = os.path.join(tmp, "serve.log")
        with open(log, "w") as out:
            server = subprocess.Popen([tool("mcd-serve"), "--node", "fill", "--devices", gpus],
                                      env=env, stdout=out, stderr=out)
        if not wait_for(lambda: "serving node" in open(log).read(), 30):
            raise SystemExit("mcd-serve did not start: " + open(log).read())
        print(f"{'memory':<8} {'size':>8} {'first ms':>9} {'later, median ms':>17} {'GB/s':>7}  "
              "each, ms")
        for size in (parse_size(s) for s in a.sizes.split(",")):
            source = os.path.join(tmp, "source.npy")
            random_npy(source, size)
            with open(source, "rb") as f:
                while f.read(1 << 24):
                    pass
            for device in devices:
                times = []
                for r in range(a.rounds):
                    t0 = time.perf_counter()
                    run(tool("mcd-create"), [f"f{r}", "--from", source, "--device", device,
                                             "--node", "fill", "-q"], env)
                    times.append(time.perf_counter() - t0)
                back = os.path.join(tmp, "back.npy")
                run(tool("mcd-get"), [f"f{a.rounds - 1}", "--no-ref", "-o", back, "--node", "fill",
                                      "-q"], env)
                if not same_file(back, source):
                    raise SystemExit(f"the tensor made from {human(size)} differs from its file")
                os.unlink(back)
                for r in range(a.rounds):
                    run(tool("mcd-rm"), [f"f{r}", "--node", "fill", "-q"], env)
                later = statistics.median(times[1:]) if len(times) > 1 else times[0]
                memory = "host" if device == "cpu" else f"gpu {device}"
                each = " ".join(f"{t * 1e3:.0f}" for t in times)
                print(f"{memory:<8} {human(size):>8} {times[0] * 1e3:>9.1f} {later * 1e3:>17.1f} "
                      f"{size / later / 1e9:>7.2f}  {each}")
            os.unlink(source)
        print("(the last of each size read back and compared with its file)")
    finally:
        if server:
            server.terminate()
            server.wait()
        redis.terminate()
        redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
