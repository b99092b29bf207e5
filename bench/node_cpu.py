"""What one run costs a node in CPU: one node in this process on W1 (20,000 due no-op
tasks, ``concurrency=16``), the process's CPU time per task, rounds on a fresh store each.

    .venv/bin/python -m bench.node_cpu [--store skip_locked] [--tasks 20000] [--rounds 3]

The node is alone in the process (no harness reading sink files beside it), so the CPU
time is the node's: its claims, decoding, runs, result writes and metrics. To see where it
goes, run py-spy on this process while it runs (``py-spy record --gil --threads -p PID``).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.tickwork_bench import drop, fresh_store, schedule
from tickwork import App, Context


def one_round(kind: str, folder: Path, n: int) -> tuple[float, float]:
    """Executions per second and CPU microseconds per task of one node on n due tasks."""
    store = fresh_store(kind, folder)
    try:
        schedule(store, [datetime.now(UTC) - timedelta(seconds=1)] * n)
        app = App(store.url, claim=store.claim, poll_interval=1.0)
        started = itertools.count(1)
        done = threading.Event()

        @app.task(name="bench.noop")
        def noop(ctx: Context, bid: int) -> None:
            if next(started) >= n:
                done.set()

        worker = app.worker(concurrency=16)
        thread = threading.Thread(target=worker.run, daemon=True)
        cpu, wall = time.process_time(), time.perf_counter()
        thread.start()
        if not done.wait(300):
            raise SystemExit(f"{kind}: not every task ran within 300 s")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        worker.stop()
        thread.join(30)
        app.close()
        return n / wall, 1e6 * cpu / n
    finally:
        drop(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="skip_locked", choices=["skip_locked", "optimistic", "sqlite"])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            figures.append(one_round(args.store, Path(tmp), args.tasks))
            print(f"# round {i + 1}: {figures[-1][0]:,.0f} exec/s, {figures[-1][1]:.1f} us CPU per task", flush=True)
    print(
        f"{args.store}: median {statistics.median(f[1] for f in figures):.1f} us CPU per task, "
        f"{statistics.median(f[0] for f in figures):,.0f} exec/s (one node, {args.tasks:,} tasks, {args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()
