"""The bare ceiling: what a loop that claims and logs runs costs on tables made only for
it, so that tickwork's figures can be read against the floor of any scheduler that logs
every run, not only against the floor of its own schema (the ``ceiling`` system).

Its tasks are three columns with one partial index of the pending ones; its log has a
primary key and nothing else. Each worker process claims up to 500 due tasks
(``FOR UPDATE SKIP LOCKED``), writes each start to the sink as it "runs" it, then, in one
transaction, copies one log row per run (``COPY``) and marks the tasks done. It leaves
when nothing is due: W1 only, like the other ceiling."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from bench.peers.sink import Sink

BATCH = 500

_SCHEMA = (
    "CREATE TABLE bare_tasks (id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'PENDING', due timestamptz NOT NULL)",
    "CREATE INDEX bare_tasks_pending ON bare_tasks (due) WHERE status = 'PENDING'",
    "CREATE TABLE bare_runs (id bigserial PRIMARY KEY, task_id bigint NOT NULL, "
    "started_at timestamptz NOT NULL, finished_at timestamptz NOT NULL, status text NOT NULL)",
)
_CLAIM = (
    "UPDATE bare_tasks SET status = 'RUNNING' WHERE id IN ("
    "SELECT id FROM bare_tasks WHERE status = 'PENDING' AND due <= now() "
    "ORDER BY due LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id"
)


def store(url: str, due: list[datetime]) -> tuple[float, dict[int, float]]:
    """Creates the tables and copies task ``i`` due at ``due[i]`` into them; the seconds
    the copy took and each task's due time (stored as given)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for statement in _SCHEMA:
            conn.execute(statement)
        started = time.perf_counter()
        with conn.transaction(), conn.cursor().copy("COPY bare_tasks (id, due) FROM STDIN") as copy:
            for number, when in enumerate(due):
                copy.write_row((number, when))
        elapsed = time.perf_counter() - started
        conn.execute("ANALYZE bare_tasks")
    return elapsed, {number: when.timestamp() for number, when in enumerate(due)}


def work(url: str, sink: Path) -> None:
    """One worker process: claim, run, log and settle batches until nothing is due."""
    import psycopg

    record = Sink(sink)
    with psycopg.connect(url, autocommit=True) as conn:
        while ids := [row[0] for row in conn.execute(_CLAIM, (BATCH,)).fetchall()]:
            runs = []
            for number in ids:
                started = datetime.now(UTC)
                record.started(number)
                runs.append((number, started, datetime.now(UTC), "COMPLETED"))
            with conn.transaction():
                with conn.cursor().copy("COPY bare_runs (task_id, started_at, finished_at, status) FROM STDIN") as copy:
                    for run in runs:
                        copy.write_row(run)
                conn.execute("UPDATE bare_tasks SET status = 'DONE' WHERE id = ANY(%s)", (ids,))
