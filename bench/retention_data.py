"""Old history for bench/retention.py, written with SQL straight into a migrated store.

``executions`` ended executions and ``tasks`` ended one-time tasks, all of it finished
between ``span`` and nothing before ``cutoff`` (which the caller puts beyond the
retention): every one-time task has one execution, the other executions belong to
``RECURRING`` recurring tasks (due in a year, under a name no node knows), so that
retention deletes the tasks with their run and all but the newest ``keep_last`` runs of
each recurring task. Executions are interleaved in time as a real store's would be:
ids grow with finished_at, one-time runs evenly among the recurring ones.
"""

from __future__ import annotations

import sqlite3
import time
from datetime import datetime, timedelta

RECURRING = 100
HISTORY = "bench.history"
SPAN = timedelta(days=30)

# One row per execution slot g in 1..E: slot g is the one-time run of task k = g*T/E
# when that quotient grows at g (T of the E slots), else a run of recurring task
# 1 + j % R, j counting the slots that are not one-time runs (so each gets its share).
_SLOTS_PG = """
SELECT g,
       (g * %(t)s) / %(e)s > ((g - 1) * %(t)s) / %(e)s AS one_time,
       %(r)s + (g * %(t)s) / %(e)s AS task,
       1 + (g - (g * %(t)s) / %(e)s) %% %(r)s AS recurring,
       %(base)s::timestamptz + g * %(step)s * interval '1 microsecond' AS at
FROM generate_series(1::bigint, %(e)s) AS g
"""

_PG = [
    f"""INSERT INTO tickwork_tasks (id, name, kind, interval_seconds, scheduled_at, next_run_at, status,
        created_at, updated_at)
    SELECT g, '{HISTORY}.recurring', 'RECURRING', 3600, %(base)s, %(future)s, 'PENDING', %(base)s, %(base)s
    FROM generate_series(1, %(r)s) AS g""",
    f"""INSERT INTO tickwork_executions (task_id, attempt, scheduled_for, started_at, finished_at, status, node, fence)
    SELECT CASE WHEN one_time THEN task ELSE recurring END, 1, at - interval '1 second',
           at - interval '1 second', at,
           CASE WHEN one_time AND task %% 20 = 0 THEN 'FAILED' WHEN one_time AND task %% 50 = 1 THEN 'CANCELLED'
                ELSE 'COMPLETED' END,
           'bench-history', 1
    FROM ({_SLOTS_PG}) AS s""",
    f"""INSERT INTO tickwork_tasks (id, name, kind, scheduled_at, next_run_at, status, attempt, run_count,
        last_status, version, created_at, updated_at)
    SELECT task_id, '{HISTORY}', 'ONE_TIME', scheduled_for, scheduled_for, status, 1, 1, status, 2,
           scheduled_for, finished_at
    FROM tickwork_executions WHERE task_id > %(r)s""",
]

_SLOTS_SQLITE = """
WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < :e)
SELECT g,
       (g * :t) / :e > ((g - 1) * :t) / :e AS one_time,
       :r + (g * :t) / :e AS task,
       1 + (g - (g * :t) / :e) % :r AS recurring,
       :base + g * :step AS at
FROM n
"""

_SQLITE = [
    f"""INSERT INTO tickwork_tasks (id, name, kind, interval_seconds, scheduled_at, next_run_at, status,
        created_at, updated_at)
    WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < :r)
    SELECT g, '{HISTORY}.recurring', 'RECURRING', 3600, :base, :future, 'PENDING', :base, :base FROM n""",
    f"""INSERT INTO tickwork_executions (task_id, attempt, scheduled_for, started_at, finished_at, status, node, fence)
    SELECT CASE WHEN one_time THEN task ELSE recurring END, 1, at - 1000000, at - 1000000, at,
           CASE WHEN one_time AND task % 20 = 0 THEN 'FAILED' WHEN one_time AND task % 50 = 1 THEN 'CANCELLED'
                ELSE 'COMPLETED' END,
           'bench-history', 1
    FROM ({_SLOTS_SQLITE})""",
    f"""INSERT INTO tickwork_tasks (id, name, kind, scheduled_at, next_run_at, status, attempt, run_count,
        last_status, version, created_at, updated_at)
    SELECT task_id, '{HISTORY}', 'ONE_TIME', scheduled_for, scheduled_for, status, 1, 1, status, 2,
           scheduled_for, finished_at
    FROM tickwork_executions WHERE task_id > :r""",
]


def generate(url: str, executions: int, tasks: int, cutoff: datetime) -> float:
    """Write the history (finished in the ``SPAN`` before ``cutoff``); seconds it took."""
    if not 0 < tasks <= executions:
        raise ValueError("need 0 < tasks <= executions: every one-time task has one execution")
    began = time.perf_counter()
    base = cutoff - SPAN
    step_us = int(SPAN.total_seconds() * 1e6) // executions
    future = cutoff + timedelta(days=3650)
    if url.startswith("sqlite"):
        _sqlite(url.removeprefix("sqlite:///"), executions, tasks, base, step_us, future)
    else:
        _postgres(url, executions, tasks, base, step_us, future)
    return time.perf_counter() - began


def _sqlite(path: str, e: int, t: int, base: datetime, step_us: int, future: datetime) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    params = {"e": e, "t": t, "r": RECURRING, "base": _us(base), "step": step_us, "future": _us(future)}
    conn.execute("BEGIN IMMEDIATE")
    for statement in _SQLITE:
        conn.execute(statement, params)
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def _postgres(url: str, e: int, t: int, base: datetime, step_us: int, future: datetime) -> None:
    import psycopg

    params = {"e": e, "t": t, "r": RECURRING, "base": base, "step": step_us, "future": future}
    with psycopg.connect(url) as conn:
        for statement in _PG:
            conn.execute(statement, params)
        conn.execute("SELECT setval('tickwork_tasks_id_seq', (SELECT max(id) FROM tickwork_tasks))")
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE tickwork_tasks")
        conn.execute("VACUUM ANALYZE tickwork_executions")


def _us(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def counts(url: str) -> tuple[int, int]:
    """(executions, tasks) in the store now."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            (e,) = conn.execute("SELECT COUNT(*) FROM tickwork_executions").fetchone()
            (t,) = conn.execute("SELECT COUNT(*) FROM tickwork_tasks").fetchone()
        finally:
            conn.close()
        return int(e), int(t)
    import psycopg

    with psycopg.connect(url) as pg:
        row = pg.execute(
            "SELECT (SELECT COUNT(*) FROM tickwork_executions), (SELECT COUNT(*) FROM tickwork_tasks)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])
