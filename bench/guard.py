"""The W1 guard: tickwork's W1 as a ratio to the bare claim loop's ceiling on the same
database, rounds alternating (W1, ceiling, W1, …) so that a drift of the machine's speed
falls on both alike. Not part of CI: run it before and after a change to the hot path
and compare the ratios (the absolute rates move with the machine; the ratio much less).

    .venv/bin/python -m bench.guard [--stores skip_locked,sqlite] [--rounds 3] [--tasks 20000]
        [--floor 0.0]

The ceiling is bench/ceiling.py's loop, 2 processes (as bench/tickwork_bench.py runs it)
claiming 500 rows at a time from the same index a node reads, doing nothing, writing one
execution row per task and marking them done. On PostgreSQL each round also runs the
bare ceiling of bench/peers (the same loop on tables made only for it: the floor of any
scheduler that logs every run, which the performance goals are set against). ``--floor
R`` exits 1 when a store's median ratio to its own ceiling is below R.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from bench.peers import workloads
from bench.peers.systems import parse_system
from bench.tickwork_bench import LABELS, w1

BARE = parse_system("bare")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="skip_locked,sqlite")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--floor", type=float, default=0.0, help="exit 1 when a median ratio is below this")
    args = parser.parse_args()
    below = []
    print("| store | W1 exec/s (median) | ceiling exec/s (median) | W1 / ceiling | bare ceiling exec/s | W1 / bare |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.stores.split(","):
            tickwork, ceiling, bare = [], [], []
            for i in range(args.rounds):
                tickwork.append(w1(kind, Path(tmp), args.tasks))
                ceiling.append(w1(kind, Path(tmp), args.tasks, ceiling=True))
                figures = f"W1 {tickwork[-1]:,.0f}, ceiling {ceiling[-1]:,.0f}"
                if kind != "sqlite":
                    bare.append(workloads.w1(BARE, Path(tmp), args.tasks)["exec_s"])
                    figures += f", bare {bare[-1]:,.0f}"
                print(f"# {LABELS[kind]} round {i + 1}: {figures}", file=sys.stderr)
            t, c = statistics.median(tickwork), statistics.median(ceiling)
            b = f"{statistics.median(bare):,.0f} | {t / statistics.median(bare):.2f}" if bare else "n/a | n/a"
            print(f"| {LABELS[kind]} | {t:,.0f} | {c:,.0f} | {t / c:.2f} | {b} |", flush=True)
            if t / c < args.floor:
                below.append(kind)
    if below:
        print(f"below the floor of {args.floor}: {', '.join(below)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
