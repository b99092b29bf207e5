"""What a limit costs a claim: claim-and-finish rounds of 32 tasks out of 5,000 due, for
tasks without a limit, with ``max_running`` (never reached), with a distinct ``lock``
each, and with a ``priority`` of 5 (the lane without a limit); and a plain claim behind
5,000 due tasks held back by one full lock. Each figure is a ratio to the plain claim of
the same run.

    .venv/bin/python -m bench.limits [--stores sqlite,postgres] [--tasks 5000]

PostgreSQL: a fresh database ``tickwork_bench_limits`` on $TICKWORK_BENCH_PG (default
postgresql://postgres@127.0.0.1:5432/test's server).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from tickwork.model import ExecutionStatus, Kind
from tickwork.schedules import outcome_of
from tickwork.store import NewTask, Store, open_store

NAME = "bench.limited"
BATCH = 32
ADMIN = os.environ.get("TICKWORK_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def fresh_store(kind: str, folder: Path) -> Store:
    if kind == "sqlite":
        store = open_store(f"sqlite:///{folder / f'limits-{time.monotonic_ns()}.db'}")
    else:
        import psycopg

        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS tickwork_bench_limits WITH (FORCE)")
            conn.execute("CREATE DATABASE tickwork_bench_limits")
        store = open_store(ADMIN.rsplit("/", 1)[0] + "/tickwork_bench_limits")
    store.migrate()
    return store


def ms_per_round(store: Store, tasks: int, fields: dict[str, Any], held: int = 0) -> float:
    """Median ms of a claim of BATCH plus the write of their results, over the table."""
    due = store.now() - timedelta(seconds=5)

    def new(**extra: Any) -> NewTask:
        fields = {"scheduled_at": due, "next_run_at": due, **extra}
        return NewTask(name=NAME, args=[], kwargs={}, kind=Kind.ONE_TIME, **fields)

    if held:  # one lock, taken by one running task: all the others wait
        store.insert_tasks([new(lock="held", next_run_at=due - timedelta(seconds=1))])
        store.claim("holder", [NAME], 1, 300.0)
        store.insert_tasks([new(lock="held") for _ in range(held)])
    store.insert_tasks([new(**{k: (v(i) if callable(v) else v) for k, v in fields.items()}) for i in range(tasks)])
    times = []
    for _ in range(tasks // BATCH - 1):
        started = time.perf_counter()
        got = store.claim("bench", [NAME], BATCH, 300.0)
        store.finish("bench", [outcome_of(c, ExecutionStatus.COMPLETED, store.now()) for c in got])
        times.append(time.perf_counter() - started)
        assert len(got) == BATCH, len(got)
    return statistics.median(times) * 1000


CASES: dict[str, tuple[dict[str, Any], int]] = {
    "plain": ({}, 0),
    "max_running=1000": ({"max_running": 1000}, 0),
    "distinct lock": ({"lock": lambda i: f"customer-{i}"}, 0),
    "priority=5": ({"priority": 5}, 0),
    "plain, 5,000 held back": ({}, 5000),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--tasks", type=int, default=5000)
    args = parser.parse_args()
    print("| store | case | ms per claim of 32 + results | ratio to plain |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.stores.split(","):
            figures = {}
            for case, (fields, held) in CASES.items():
                store = fresh_store(kind, Path(tmp))
                try:
                    figures[case] = ms_per_round(store, args.tasks, fields, held)
                finally:
                    store.close()
            for case, ms in figures.items():
                print(f"| {kind} | {case} | {ms:.2f} | {ms / figures['plain']:.2f} |")


if __name__ == "__main__":
    main()
