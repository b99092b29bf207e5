"""Claim cost against what else the tables hold: W1 (20,000 due no-op tasks, 2 node
processes serving the queue "default", executions per second from launch to the last
start) in tables that also hold 1,000,000 tasks of that queue not due for a day,
100,000 due tasks of two other queues (same task name: only the queue keeps the nodes
from them) and 1,000,000 executions of ended one-time tasks from the last 30 days
(bench/retention_data.py, within the retention: nothing for the pruner), as a ratio to
W1 on empty tables. Rounds alternate empty and full, so a drift of the machine's speed
falls on both alike.

    .venv/bin/python -m bench.queues [--stores sqlite,skip_locked,optimistic] [--rounds 3]
        [--future 1000000] [--other 100000] [--executions 1000000]

The extra rows are written with SQL straight into the migrated store, then analyzed and
checkpointed (the fill's own WAL is not the measured round's to write out).
PostgreSQL: a fresh database per measurement on $BENCH_PG's server.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from bench import retention_data
from bench.tickwork_bench import LABELS, w1
from tickwork.store import open_store

NAME = "bench.noop"

_PG = """
INSERT INTO tickwork_tasks (name, kind, scheduled_at, next_run_at, status, queue, created_at, updated_at)
SELECT %(name)s, 'ONE_TIME', %(at)s, %(at)s + g * interval '1 microsecond', 'PENDING', %(queue)s, %(at)s, %(at)s
FROM generate_series(1, %(n)s) AS g
"""

_SQLITE = """
INSERT INTO tickwork_tasks (name, kind, scheduled_at, next_run_at, status, queue, created_at, updated_at)
WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < :n)
SELECT :name, 'ONE_TIME', :at, :at + g, 'PENDING', :queue, :at, :at FROM n
"""


def fill(url: str, future: int, other: int, executions: int = 0) -> None:
    """``executions`` ended runs of as many one-time tasks (first: they take the first
    ids), ``future`` tasks of "default" due in a day, ``other`` due ones split over two
    queues."""
    store = open_store(url)
    store.migrate()
    store.close()
    now = datetime.now(UTC)
    if executions:
        retention_data.generate(url, executions, executions, cutoff=now)
    batches = [
        ("default", now + timedelta(days=1), future),
        ("reports", now - timedelta(minutes=5), other // 2),
        ("emails", now - timedelta(minutes=5), other - other // 2),
    ]
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        for queue, at, n in batches:
            conn.execute(_SQLITE, {"name": NAME, "at": int(at.timestamp() * 1e6), "queue": queue, "n": n})
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        return
    import psycopg

    with psycopg.connect(url) as pg:
        for queue, at, n in batches:
            pg.execute(_PG, {"name": NAME, "at": at, "queue": queue, "n": n})
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute("VACUUM ANALYZE tickwork_tasks")
        # The fill writes ~1 GB of WAL: checkpointed now, not by a checkpoint the WAL's
        # size sets off during the measured round (its fsyncs slowed that round's commits).
        pg.execute("CHECKPOINT")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="sqlite,skip_locked,optimistic")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--future", type=int, default=1_000_000)
    parser.add_argument("--other", type=int, default=100_000)
    parser.add_argument("--executions", type=int, default=1_000_000)
    args = parser.parse_args()
    prepare = partial(fill, future=args.future, other=args.other, executions=args.executions)
    full_table = f"+{args.future:,} not due, +{args.other:,} due elsewhere, +{args.executions:,} executions"
    print(f"| store | W1 exec/s, empty table | W1 exec/s, {full_table} | ratio |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.stores.split(","):
            empty, full = [], []
            for i in range(args.rounds):
                print(f"# {LABELS[kind]} round {i + 1}", file=sys.stderr, flush=True)
                empty.append(w1(kind, Path(tmp), args.tasks))
                full.append(w1(kind, Path(tmp), args.tasks, prepare=prepare))
                print(f"#   empty {empty[-1]:,.0f}  full {full[-1]:,.0f}", file=sys.stderr, flush=True)
            e, f = statistics.median(empty), statistics.median(full)
            print(f"| {LABELS[kind]} | {e:,.0f} | {f:,.0f} | {f / e:.2f} |")


if __name__ == "__main__":
    main()
