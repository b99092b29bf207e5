"""What one run costs a node in CPU: one node in this process (``concurrency=16``), the
process's CPU time per task, rounds on a fresh store each, and where it goes by thread.

    .venv/bin/python -m bench.node_cpu [--store skip_locked] [--tasks 20000] [--rounds 3]
    .venv/bin/python -m bench.node_cpu --sparse 10 --tasks 1000   # W2's shape
    .venv/bin/python -m bench.node_cpu --gc-threshold 0            # the collector left at 700

By default the tasks are all due (W1's shape); ``--sparse S`` spreads them evenly over S
seconds, starting 3 s after the node (W2's shape: what a run costs when runs are far
apart), and counts from the first due time. The node is alone in the process (no harness
reading sink files beside it), so the CPU time is the node's: its claims, decoding, runs,
result writes and metrics; beside it, the CPU the database spent meanwhile (all of a
local PostgreSQL's processes: the node's statements and whatever else it ran). Each
round also prints, per thread group, its CPU time per task and how many times per task
its threads were scheduled in (``/proc/self/task/*/schedstat``: each is a wake-up, after
a wait for the database, a queue, a lock or the GIL). To see the Python code behind the
CPU, run py-spy on this process (``py-spy record --gil --threads``).

The node runs with the collector's young threshold ``run_worker`` gives its process
(``--gc-threshold``, tickwork/gc_young.py; 0 leaves Python's 700, as a node embedded
with ``App.worker()`` has it), and each round prints the time the collector took, per
task (``gc.callbacks``: the collections of every generation, during the round).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.pg_cpu import database_cpu
from bench.tickwork_bench import drop, fresh_store, schedule
from tickwork import App, Context, gc_young
from tickwork.node.worker import Worker

SPARSE_LEAD_S = 3.0


def thread_times() -> dict[int, tuple[float, int]]:
    """Per thread of this process: seconds on a CPU and times scheduled in."""
    times = {}
    for tid in Path("/proc/self/task").iterdir():
        try:
            on_cpu_ns, _waited_ns, slices = (tid / "schedstat").read_text().split()
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
        times[int(tid.name)] = (int(on_cpu_ns) / 1e9, int(slices))
    return times


def by_group(before: dict[int, tuple[float, int]], after: dict[int, tuple[float, int]]) -> dict[str, list[float]]:
    """CPU seconds and wake-ups between two readings, by thread name (the slot threads
    together, as "slots")."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    groups: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for tid, (cpu, slices) in after.items():
        name = names.get(tid, "other")
        name = "slots" if name.startswith("tickwork-run-") else name
        cpu_before, slices_before = before.get(tid, (0.0, 0))
        groups[name][0] += cpu - cpu_before
        groups[name][1] += slices - slices_before
    return groups


Round = tuple[float, float, float | None, dict[str, list[float]], "Collections"]


class Collections:
    """The cyclic collector's collections while it is installed: how many of each
    generation, and the seconds they took."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began
            self.counts[info["generation"]] += 1


def one_round(kind: str, folder: Path, n: int, sparse: float | None, threshold: int | None) -> Round:
    """Executions per second, CPU microseconds per task, the database's CPU microseconds
    per task (PostgreSQL on this machine), and the threads' shares, of one node on n tasks."""
    store = fresh_store(kind, folder)
    try:
        if sparse is None:
            first = datetime.now(UTC) - timedelta(seconds=1)
            schedule(store, [first] * n)
        else:
            first = datetime.now(UTC) + timedelta(seconds=SPARSE_LEAD_S)
            schedule(store, [first + timedelta(seconds=sparse * (i + 0.5) / n) for i in range(n)])
        app = App(store.url, claim=store.claim, poll_interval=1.0)
        started = itertools.count(1)
        done = threading.Event()

        @app.task(name="bench.noop")
        def noop(ctx: Context, bid: int) -> None:
            if next(started) >= n:
                done.set()

        worker = app.worker(concurrency=16)
        thread = threading.Thread(target=_run, args=(worker, threshold), name="poll loop", daemon=True)
        thread.start()
        if sparse is not None:  # the node's start is not what a sparse run costs
            time.sleep(max(0.0, (first - datetime.now(UTC)).total_seconds()))
        database = database_cpu() if kind != "sqlite" else None
        collections = Collections()
        gc.callbacks.append(collections)
        threads, cpu, wall = thread_times(), time.process_time(), time.perf_counter()
        if not done.wait(300):
            raise SystemExit(f"{kind}: not every task ran within 300 s")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        gc.callbacks.remove(collections)
        groups = by_group(threads, thread_times())
        database_after = database_cpu() if database is not None else None
        worker.stop()
        thread.join(30)
        app.close()
        spent = None if database_after is None or database is None else database_after - database
        database_us = None if spent is None else 1e6 * spent / n
        return n / wall, 1e6 * cpu / n, database_us, groups, collections
    finally:
        drop(store)


def _run(worker: Worker, threshold: int | None) -> None:
    with gc_young.raised(threshold):  # as App.run_worker does
        worker.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="skip_locked", choices=["skip_locked", "optimistic", "sqlite"])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sparse", type=float, default=None, metavar="S", help="spread the tasks over S seconds")
    parser.add_argument("--gc-threshold", type=int, default=gc_young.NODE_THRESHOLD, metavar="N", help="0: as it is")
    args = parser.parse_args()
    if not 0 <= args.gc_threshold <= gc_young.MAX_THRESHOLD:
        parser.error(f"--gc-threshold: 0 to {gc_young.MAX_THRESHOLD}")
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            rate, cpu_us, database_us, groups, collections = one_round(
                args.store, Path(tmp), args.tasks, args.sparse, args.gc_threshold or None
            )
            figures.append((rate, cpu_us))
            database = "" if database_us is None else f" (PostgreSQL: {database_us:.1f} us)"
            print(f"# round {i + 1}: {rate:,.0f} exec/s, {cpu_us:.1f} us CPU per task{database}", flush=True)
            collected = "/".join(map(str, collections.counts))
            print(f"#   collector {1e6 * collections.seconds / args.tasks:11.1f} us per task ({collected} collections)")
            for name, (cpu, slices) in sorted(groups.items(), key=lambda g: -g[1][0]):
                per_task_us, wakeups = cpu * 1e6 / args.tasks, slices / args.tasks
                if per_task_us >= 0.5:
                    print(f"#   {name:<24} {per_task_us:7.1f} us, {wakeups:5.2f} wake-ups per task")
    print(
        f"{args.store}: median {statistics.median(f[1] for f in figures):.1f} us CPU per task, "
        f"{statistics.median(f[0] for f in figures):,.0f} exec/s (one node, {args.tasks:,} tasks, {args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()
