"""W1 of two checkouts, back to back and alternating, for a before/after comparison.

    .venv/bin/python -m bench.compare OTHER_CHECKOUT [--rounds 3] [--stores skip_locked,sqlite] [--scale 1.0]

Each measurement runs ``bench.tickwork_bench``'s W1 (20,000 due no-op tasks, 2 node
processes, executions per second from node launch to the last start) in a process of
its own whose working directory and import path are one checkout, so its nodes run that
checkout's code. Rounds alternate this checkout and the other (ABAB…), so that a drift
of the machine's speed during the run falls on both alike. Prints every figure, and per
store the median of each side and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
ONE = (
    "import sys, tempfile; from pathlib import Path; from bench.tickwork_bench import w1\n"
    "with tempfile.TemporaryDirectory() as tmp:\n"
    "    print(w1(sys.argv[1], Path(tmp), int(sys.argv[2])))\n"
)


def measure(checkout: Path, store: str, n: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", ONE, store, str(n)], cwd=checkout, env=env, check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, help="the other checkout (e.g. a git worktree of the base commit)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="skip_locked,sqlite")
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    sides = {"this": HERE, "other": args.other.resolve()}
    n = max(10, int(20_000 * args.scale))
    figures: dict[tuple[str, str], list[float]] = {}
    for store in args.stores.split(","):
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for side in order:
                value = measure(sides[side], store, n)
                figures.setdefault((store, side), []).append(value)
                print(f"{store} round {round_ + 1} {side}: {value:,.0f} exec/s", flush=True)
    print("| store | this checkout exec/s (median) | other checkout exec/s (median) | this / other |")
    print("|---|---|---|---|")
    for store in args.stores.split(","):
        this, other = (statistics.median(figures[(store, side)]) for side in ("this", "other"))
        print(f"| {store} | {this:,.0f} | {other:,.0f} | {this / other:.2f} |")


if __name__ == "__main__":
    main()
