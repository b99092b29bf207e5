"""The bare claim loop on tickwork's own tables: the ceiling tickwork's W1 is set beside
(bench.tickwork_bench, bench.guard, bench.peers' ``ceiling``).

    python -m bench.ceiling URL SINK

Two of these run as W1's workers: claim 500 due rows (PostgreSQL ``FOR UPDATE SKIP
LOCKED``), do nothing, write one execution row per task and mark them done in one
transaction, until nothing is due. This module imports neither tickwork nor anything
of the benchmarks that does: a ceiling process that loaded tickwork at its start (as it
once did) started ~60 ms of CPU later, a handicap the ratios to it then hid.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path


def ceiling_main(url: str, sink: Path) -> None:
    fd = os.open(sink / f"{os.getpid()}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    if url.startswith("sqlite"):
        sqlite_ceiling(url.removeprefix("sqlite:///"), fd)
    else:
        postgres_ceiling(url, fd)


# The predicate of tickwork's index of claimable plain tasks (migration 0013), so that
# the bare loop walks the same index in the same order as a node's claim does.
CLAIMABLE = (
    "queue = 'default' AND status = 'PENDING' AND priority = 0 "
    "AND lock IS NULL AND max_running IS NULL AND rate_limit IS NULL"
)


def sqlite_ceiling(path: str, fd: int) -> None:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    while True:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(
            "UPDATE tickwork_tasks SET status='RUNNING' WHERE id IN (SELECT id FROM tickwork_tasks "
            f"WHERE {CLAIMABLE} ORDER BY next_run_at, id LIMIT 500) RETURNING id, kwargs"
        ).fetchall()
        conn.execute("COMMIT")
        if not rows:
            return
        now = int(time.time() * 1e6)
        os.write(fd, "".join(f"{_bid(k)} {time.time_ns()}\n" for _, k in rows).encode())
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO tickwork_executions (task_id, attempt, scheduled_for, started_at, finished_at, status) "
            "VALUES (?, 1, ?, ?, ?, 'COMPLETED')",
            [(i, now, now, now) for i, _ in rows],
        )
        conn.executemany("UPDATE tickwork_tasks SET status='COMPLETED' WHERE id=?", [(i,) for i, _ in rows])
        conn.execute("COMMIT")


def postgres_ceiling(url: str, fd: int) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        while True:
            rows = conn.execute(
                "UPDATE tickwork_tasks SET status='RUNNING' WHERE id IN (SELECT id FROM tickwork_tasks "
                f"WHERE {CLAIMABLE} ORDER BY next_run_at, id LIMIT 500 FOR UPDATE SKIP LOCKED) "
                "RETURNING id, kwargs"
            ).fetchall()
            if not rows:
                conn.commit()
                return
            os.write(fd, "".join(f"{k['bid']} {time.time_ns()}\n" for _, k in rows).encode())
            ids = [i for i, _ in rows]
            conn.execute(
                "INSERT INTO tickwork_executions (task_id, attempt, scheduled_for, started_at, finished_at, status) "
                "SELECT i, 1, now(), now(), now(), 'COMPLETED' FROM unnest(%s::bigint[]) AS i",
                (ids,),
            )
            conn.execute("UPDATE tickwork_tasks SET status='COMPLETED' WHERE id = ANY(%s)", (ids,))
            conn.commit()


def _bid(kwargs: str) -> int:
    import json

    return int(json.loads(kwargs)["bid"])


if __name__ == "__main__":
    ceiling_main(sys.argv[1], Path(sys.argv[2]))
