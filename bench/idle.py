"""What a node with nothing to do costs: CPU milliseconds per second, by thread, and how
often each thread wakes, and beside it what PostgreSQL spent meanwhile (all of a local
server's processes: ``bench.pg_cpu``, read in clock ticks of 10 ms: over 20 s, to
0.5 ms a second). A node spends most of a year idle or nearly so, and every idle
node of a fleet pays this at once.

    .venv/bin/python -m bench.idle [--store skip_locked] [--seconds 20] [--rounds 3]

Each round starts one node (``concurrency=16``, ``poll_interval=1``) on a fresh store
holding one task due in an hour, lets it settle for 3 s, then reads this process's
threads over ``--seconds`` (``bench.node_cpu.thread_times``: CPU time and times
scheduled in). Prints each round's threads and the median of the whole.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.node_cpu import by_group, thread_times
from bench.pg_cpu import database_cpu
from bench.tickwork_bench import drop, fresh_store, schedule
from tickwork import App, Context

SETTLE_S = 3.0


Round = tuple[float, float | None, dict[str, list[float]]]


def one_round(kind: str, folder: Path, seconds: float) -> Round:
    """The node's CPU milliseconds per second, the database's (PostgreSQL), and the
    node's threads' CPU seconds and wake-ups."""
    store = fresh_store(kind, folder)
    try:
        schedule(store, [datetime.now(UTC) + timedelta(hours=1)])
        app = App(store.url, claim=store.claim, poll_interval=1.0)

        @app.task(name="bench.noop")
        def noop(ctx: Context, bid: int) -> None:
            pass

        worker = app.worker(concurrency=16)
        thread = threading.Thread(target=worker.run, name="poll loop", daemon=True)
        thread.start()
        if not worker.started.wait(30):
            raise SystemExit(f"{kind}: the node did not start within 30 s")
        time.sleep(SETTLE_S)  # its start-up is not what idling costs
        database = database_cpu() if kind != "sqlite" else None
        before, cpu = thread_times(), time.process_time()
        time.sleep(seconds)  # the measured span itself: nothing is awaited
        cpu = time.process_time() - cpu
        groups = by_group(before, thread_times())
        database_ms = None if database is None else 1000 * (database_cpu() - database) / seconds
        worker.stop()
        thread.join(30)
        app.close()
        return 1000 * cpu / seconds, database_ms, groups
    finally:
        drop(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="skip_locked", choices=["skip_locked", "optimistic", "sqlite"])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            ms_per_s, database_ms, groups = one_round(args.store, Path(tmp), args.seconds)
            figures.append(ms_per_s)
            database = "" if database_ms is None else f" (PostgreSQL: {database_ms:.2f} ms)"
            print(f"# round {i + 1}: {ms_per_s:.2f} ms CPU per second{database}", flush=True)
            for name, (cpu, slices) in sorted(groups.items(), key=lambda g: -g[1][0]):
                if cpu > 0:
                    per_s, wakes = 1000 * cpu / args.seconds, slices / args.seconds
                    print(f"#   {name:<28} {per_s:6.3f} ms/s, {wakes:5.1f} wake-ups/s")
    print(
        f"{args.store}: idle node, median {statistics.median(figures):.2f} ms CPU per second "
        f"({args.rounds} rounds of {args.seconds:g} s)"
    )


if __name__ == "__main__":
    main()
