"""Bulk scheduling: ``schedule_many`` beside the ceiling of a bare bulk write of the same
rows into the same table, rounds alternating so that a drift of the machine's speed
falls on both alike.

    .venv/bin/python -m bench.enqueue [--stores skip_locked,sqlite] [--rounds 3] [--tasks 20000]

tickwork: one ``App`` schedules ``--tasks`` one-time tasks (``kwargs={"bid": i}``, ``at``
an hour ahead) in calls of 5,000, as bench-peers' adapter does: each call validates its
items against the task's signature, inserts them in one transaction and returns the
stored tasks. Ceiling: the same number of rows written with no checks and nothing read
back, on a fresh store of the same schema: PostgreSQL binary ``COPY`` of the columns a task
needs (the others take their defaults), SQLite one ``executemany`` INSERT per 5,000 in
one transaction each. Tasks per second from the first call to the last return, and the
client process's CPU per task over the same calls.

Beside them, what one ``schedule()`` call takes (ms, the mean of 300 calls on the same
warm ``App``): the path of a web request that schedules one task.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.tickwork_bench import CHUNK, LABELS, drop, fresh_store, make_app
from tickwork.store import open_store

COLUMNS = ("name", "args", "kwargs", "kind", "scheduled_at", "next_run_at", "status", "created_at", "updated_at")


def tickwork_rate(kind: str, folder: Path, n: int) -> tuple[float, float]:
    """Tasks per second, and the client process's CPU microseconds per task (steadier
    than the rate on a shared machine: the server's work is not in it)."""
    store = fresh_store(kind, folder)
    try:
        app = make_app(store.url, store.claim, None)
        app.schedule_many([{"task": "bench.noop", "kwargs": {"bid": -1}}])  # migrated, connected, warm
        at = datetime.now(UTC) + timedelta(hours=1)
        items = [{"task": "bench.noop", "kwargs": {"bid": i}, "at": at} for i in range(n)]
        started, cpu = time.perf_counter(), time.process_time()
        for i in range(0, n, CHUNK):
            app.schedule_many(items[i : i + CHUNK])
        rate = n / (time.perf_counter() - started)
        cpu_us = (time.process_time() - cpu) / n * 1e6
        app.close()
        return rate, cpu_us
    finally:
        drop(store)


def single_ms(kind: str, folder: Path, calls: int = 300) -> float:
    store = fresh_store(kind, folder)
    try:
        app = make_app(store.url, store.claim, None)
        for i in range(20):  # migrated, connected, statements prepared
            app.schedule("bench.noop", kwargs={"bid": -i})
        started = time.perf_counter()
        for i in range(calls):
            app.schedule("bench.noop", kwargs={"bid": i})
        took = (time.perf_counter() - started) / calls * 1000
        app.close()
        return took
    finally:
        drop(store)


def ceiling_rate(kind: str, folder: Path, n: int) -> float:
    store = fresh_store(kind, folder)
    try:
        schema = open_store(store.url)
        schema.migrate()
        schema.close()
        at = datetime.now(UTC) + timedelta(hours=1)
        if kind == "sqlite":
            return _sqlite_ceiling(store.url.removeprefix("sqlite:///"), at, n)
        return _postgres_ceiling(store.url, at, n)
    finally:
        drop(store)


def _sqlite_ceiling(path: str, at: datetime, n: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    us = (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    text = f"INSERT INTO tickwork_tasks ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
    started = time.perf_counter()
    for i in range(0, n, CHUNK):
        rows = [
            ("bench.noop", "[]", json.dumps({"bid": b}), "ONE_TIME", us, us, "PENDING", us, us)
            for b in range(i, min(n, i + CHUNK))
        ]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(text, rows)
        conn.execute("COMMIT")
    rate = n / (time.perf_counter() - started)
    conn.close()
    return rate


def _postgres_ceiling(url: str, at: datetime, n: int) -> float:
    import psycopg
    from psycopg.types.json import Jsonb

    types = ["text", "jsonb", "jsonb", "text", "timestamptz", "timestamptz", "text", "timestamptz", "timestamptz"]
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        for i in range(0, n, CHUNK):
            statement = f"COPY tickwork_tasks ({', '.join(COLUMNS)}) FROM STDIN (FORMAT BINARY)"
            with conn.cursor().copy(statement) as copy:
                copy.set_types(types)
                for b in range(i, min(n, i + CHUNK)):
                    copy.write_row(("bench.noop", Jsonb([]), Jsonb({"bid": b}), "ONE_TIME", at, at, "PENDING", at, at))
            conn.commit()
        return n / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="skip_locked,sqlite")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20_000)
    args = parser.parse_args()
    print(
        "| store | schedule_many tasks/s (median) | bare bulk write tasks/s (median) | schedule_many / bare"
        " | schedule_many client CPU µs/task (median) | one schedule() ms (median) |"
    )
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.stores.split(","):
            tickwork, cpu, ceiling, single = [], [], [], []
            for i in range(args.rounds):
                rate, cpu_us = tickwork_rate(kind, Path(tmp), args.tasks)
                tickwork.append(rate)
                cpu.append(cpu_us)
                ceiling.append(ceiling_rate(kind, Path(tmp), args.tasks))
                single.append(single_ms(kind, Path(tmp)))
                done = f"{rate:,.0f} ({cpu_us:.1f} µs CPU) / {ceiling[-1]:,.0f}, one {single[-1]:.2f} ms"
                print(f"# {LABELS[kind]} round {i + 1}: {done}", file=sys.stderr)
            t, c = statistics.median(tickwork), statistics.median(ceiling)
            one, us = statistics.median(single), statistics.median(cpu)
            print(f"| {LABELS[kind]} | {t:,.0f} | {c:,.0f} | {t / c:.2f} | {us:.1f} | {one:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
