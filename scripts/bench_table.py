#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""Prints mcd-bench and peer JSON records as one text table (for docs and notes).

    python3 scripts/bench_table.py bench.json [torch.json ...]
"""
import json
import sys


def size(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b / div:g} {unit}"
    return f"{b} B" if b else "-"


def main():
    print(f"| {'row':<18} | {'allocator':<21} | {'size':>7} | {'n':>5} | {'median us':>9} | {'p90 us':>8} | {'p99 us':>8} | {'ops/s':>7} | {'x floor':>7} |")
    print("|" + "|".join("-" * w for w in (20, 23, 9, 7, 11, 10, 10, 9, 9)) + "|")
    for path in sys.argv[1:]:
        for r in json.load(open(path))["rows"]:
            print(f"| {r['row']:<18} | {r['allocator']:<21} | {size(r['bytes']):>7} | {r['n']:>5} | {r['median_us']:>9.1f} | "
                  f"{r['p90_us']:>8.1f} | {r['p99_us']:>8.1f} | {r['ops_per_s']:>7.0f} | {r['x_floor']:>7.1f} |")


if __name__ == "__main__":
    main()
