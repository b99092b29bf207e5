"""Runs the chosen systems through the chosen workloads, one after the other, and prints
the figures of the same run, then each as tickwork's lead over that system.

With ``--repeat N`` the whole rotation runs N times (every system once per pass, so that
a drift of the machine's speed falls on all alike) and the tables give each figure's
median over the passes, and each lead's median with the lowest and highest of the
passes' own leads: on a 2-core machine one pass's lead can move by a fifth from one
pass to the next.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
from importlib import metadata
from pathlib import Path

from bench.peers import workloads
from bench.peers.systems import System, parse_system
from bench.tickwork_bench import compile_checkout

DEFAULT_SYSTEMS = "tickwork,pgqueuer,pgqueuer:batch_size=100,ceiling,bare"
SIZES = {"W1": 20_000, "W2": 2_000, "W3": 10_000}
COLUMNS = (
    ("W1", "exec_s", "W1 exec/s", "{:,.0f}"),
    ("W1", "steady", "W1 steady exec/s", "{:,.0f}"),
    ("W1", "cpu_ms", "W1 workers' CPU ms/task", "{:.3f}"),
    ("W1", "db_cpu_ms", "W1 database CPU ms/task", "{:.3f}"),
    ("W1", "enqueue_s", "enqueue tasks/s", "{:,.0f}"),
    ("W2", "p50", "W2 lateness p50 ms", "{:.1f}"),
    ("W2", "p99", "W2 p99 ms", "{:.1f}"),
    ("W2", "cpu_s", "W2 workers' CPU s", "{:.2f}"),
    ("W3", "drain_s", "W3 drain s", "{:.2f}"),
    ("W3", "p99", "W3 p99 ms", "{:,.0f}"),
    ("W3", "rss_mb", "W3 peak RSS MB", "{:.0f}"),
)


def versions() -> str:
    names = ("tickwork", "pgqueuer", "asyncpg", "psycopg")
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return f"Python {platform.python_version()}, " + ", ".join(found)


Results = dict[str, dict[str, dict[str, float]]]
"""Figures by system name, then workload, then figure key."""


def run_one(system: System, workload: str, folder: Path, scale: float) -> dict[str, float]:
    n = max(10, int(SIZES[workload] * scale))
    if workload == "W1":
        return workloads.w1(system, folder, n)
    if system.kind in ("ceiling", "bare"):
        return {}  # the bare loops drain what is due and exit: W1 only
    return (workloads.w2 if workload == "W2" else workloads.w3)(system, folder, n)


def table(results: Results, chosen: list[str]) -> list[str]:
    columns = [c for c in COLUMNS if c[0] in chosen]
    lines = ["| system | " + " | ".join(c[2] for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, by_workload in results.items():
        cells = []
        for workload, key, _, shape in columns:
            value = by_workload.get(workload, {}).get(key)
            cells.append("n/a" if value is None else shape.format(value))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def medians(passes: list[Results]) -> Results:
    """Each figure's median over the passes that have it."""
    merged: Results = {}
    for name in passes[0]:
        for workload in passes[0][name]:
            keys = {key for one in passes for key in one[name][workload]}
            merged.setdefault(name, {})[workload] = {
                key: statistics.median(v for one in passes if (v := one[name][workload].get(key)) is not None)
                for key in keys
            }
    return merged


LOWER_IS_BETTER = {"cpu_ms", "db_cpu_ms", "p50", "p99", "cpu_s", "drain_s", "rss_mb"}


def lead(mine: float | None, theirs: float | None, key: str) -> float | None:
    """tickwork's figure over the other's (theirs over ours for times and costs), so that
    above 1 always means tickwork is ahead."""
    if not mine or not theirs:
        return None
    return theirs / mine if key in LOWER_IS_BETTER else mine / theirs


def ratios(passes: list[Results], chosen: list[str]) -> list[str]:
    """Each system's figures as tickwork's lead over them: with one pass, that pass's;
    with more, the median of the passes' leads and their range."""
    if "tickwork" not in passes[0]:
        return []
    columns = [c for c in COLUMNS if c[0] in chosen]
    lines = ["| tickwork ahead by (x) | " + " | ".join(c[2] for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name in passes[0]:
        if name == "tickwork":
            continue
        cells = []
        for workload, key, _, _ in columns:
            leads = [
                x
                for one in passes
                if (x := lead(one["tickwork"][workload].get(key), one[name][workload].get(key), key)) is not None
            ]
            if not leads:
                cells.append("n/a")
            elif len(passes) == 1:
                cells.append(f"{leads[0]:.2f}")
            else:
                cells.append(f"{statistics.median(leads):.2f} ({min(leads):.2f} to {max(leads):.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument("--systems", default=DEFAULT_SYSTEMS)
    parser.add_argument("--workloads", default="W1,W2,W3")
    parser.add_argument("--scale", type=float, default=1.0, help="every workload's task count times this")
    parser.add_argument("--repeat", type=int, default=1, help="passes over every system; medians are printed")
    args = parser.parse_args()
    if args.repeat < 1:
        raise SystemExit(f"--repeat must be at least 1, not {args.repeat}")
    systems = [parse_system(name) for name in args.systems.split(",")]
    chosen = [w for w in args.workloads.split(",") if w]
    if unknown := [w for w in chosen if w not in SIZES]:
        raise SystemExit(f"unknown workload {unknown[0]!r}: W1, W2 or W3")
    print(f"# {versions()}", flush=True)
    compile_checkout()  # as installed peers are: their modules byte-compiled by pip
    passes: list[Results] = []
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(1, args.repeat + 1):
            results: Results = {}
            for system in systems:
                for workload in chosen:
                    figures = run_one(system, workload, Path(tmp), args.scale)
                    results.setdefault(system.name, {})[workload] = figures
                    shown = f"pass {number} " if args.repeat > 1 else ""
                    print(f"# {shown}{system.name} {workload}: {figures}", flush=True)
            passes.append(results)
    if args.repeat > 1:
        print(f"(medians of {args.repeat} passes; each lead's range over the passes in brackets)")
    print("\n".join(table(medians(passes), chosen)))
    print()
    print("\n".join(ratios(passes, chosen)))


if __name__ == "__main__":
    main()
