#!/usr/bin/python3
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""Plots mcd-bench records (and the torch.multiprocessing peer's) into one PNG.

Left: end-to-end share latency by tensor size, per allocator and for the peer, of a fresh tensor
(create in A, get + map + touch in B, ack) and of an existing one (made before the clock).
Right: create / get (warm) / delete medians at 1 MiB per allocator.
Needs Debian's python3-matplotlib.

    /usr/bin/python3 scripts/plot_bench.py docs/bench-h100-cuda_ipc.json docs/bench-h100-pool-host.json \
        docs/torch-h100.json -o docs/bench-h100.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+")
    ap.add_argument("-o", "--output", default="bench.png")
    args = ap.parse_args()
    rows, title = [], ""
    for path in args.records:
        record = json.load(open(path))
        rows += record["rows"]
        title = title or record["config"].get("gpu", "")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    colors = {}
    for row, style in (("share", "-"), ("share_existing", "--")):
        for allocator in sorted({r["allocator"] for r in rows if r["row"] == "share"}):
            share = sorted((r["bytes"], r["median_us"]) for r in rows
                           if r["row"] == row and r["allocator"] == allocator)
            if not share:
                continue
            line = left.plot([s[0] for s in share], [s[1] for s in share], style, marker="o",
                             color=colors.get(allocator),
                             label=f"{allocator} ({'fresh' if row == 'share' else 'existing'})")[0]
            colors[allocator] = line.get_color()
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("tensor bytes")
    left.set_ylabel("share latency, median, us")
    left.set_title("fresh (solid): create in A, get + map + touch in B, ack;\nexisting (dashed): the same for a tensor made before", fontsize=10)
    left.legend()
    left.grid(alpha=0.3)
    steps = ["create", "get_warm", "delete"]
    allocators = sorted({r["allocator"] for r in rows if r["row"] == "create"})
    width = 0.8 / max(len(allocators), 1)
    for i, allocator in enumerate(allocators):
        values = [next((r["median_us"] for r in rows if r["row"] == s and r["allocator"] == allocator
                        and r["bytes"] == 1 << 20), 0) for s in steps]
        right.bar([k + i * width for k in range(len(steps))], values, width, label=allocator)
    right.set_xticks([k + width * (len(allocators) - 1) / 2 for k in range(len(steps))])
    right.set_xticklabels(steps)
    right.set_ylabel("median us (1 MiB)")
    right.set_title("lifecycle steps as the client sees them")
    right.legend()
    right.grid(axis="y", alpha=0.3)
    fig.suptitle(f"memcuda vs torch.multiprocessing, {title}")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(args.output)


if __name__ == "__main__":
    main()
