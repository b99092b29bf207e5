"""What a run would cost the database if a task's run state lived in a narrow table of
its own: the schema change an earlier round took for the next lever, measured before
anyone builds it (the README's performance section has the figures: about 0.8 of one row's CPU).

    .venv/bin/python -m bench.schema_split [--tasks 20000] [--rounds 3]

Two layouts of the same due one-time tasks, each on a fresh database, each driven by
the same loop from this process (claim 500 due tasks ``FOR UPDATE SKIP LOCKED``,
returning the columns a node's claim returns; then settle them, 500 a statement: the
task COMPLETED and its execution row inserted, in one statement):

* ``one row``: tickwork's tables as migrated: the claim and the settle each update the
  task's row of 52 columns (the claim's SET list is tickwork's own, ``claimed_set``);
* ``split``: the same tasks, their run state (status, queue, due time, lease, version,
  attempt, the run's columns) in a narrow table with a claim index and a lease index,
  updated by the claim and the settle; the definition read by a join from a copy of the
  task table that nothing updates.

Per task: the CPU all of the local PostgreSQL's processes spent (``bench.pg_cpu``) and
this process's. Neither loop is tickwork's node (no lane probe, no fencing, no JSON
batch): the difference between them is the layout's, which is what this measures.
"""

from __future__ import annotations

import re
import tempfile
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from bench.ceiling import CLAIMABLE
from bench.db_cost import BATCH, NODE, arguments, print_medians, timed
from bench.tickwork_bench import drop, fresh_store, schedule
from tickwork.store.postgres import PostgresDialect

LAYOUTS = ("one row", "split")
STATE = (
    "status",
    "queue",
    "next_run_at",
    "priority",
    "version",
    "lease_owner",
    "lease_expires_at",
    "attempt",
    "run_count",
    "last_status",
    "updated_at",
    "run_id",
    "run_attempt",
    "run_started_at",
    "run_scheduled_for",
    "run_note",
    "triggered",
    "scheduled_at",
)
"""The columns a claim or a settle writes (and what its SET list reads): the narrow
table's, beside the task's id."""

SPLIT_DDL = f"""
CREATE TABLE split_definition AS SELECT * FROM tickwork_tasks;
ALTER TABLE split_definition ADD PRIMARY KEY (id);
CREATE TABLE split_state AS SELECT id, {", ".join(STATE)} FROM tickwork_tasks;
ALTER TABLE split_state ADD PRIMARY KEY (id);
CREATE INDEX split_state_plain ON split_state (queue, next_run_at, id) WHERE status = 'PENDING';
CREATE INDEX split_state_lease ON split_state (lease_expires_at) WHERE status = 'RUNNING';
ANALYZE split_definition;
ANALYZE split_state;
"""


def statements(texts: dict[str, str], table: str) -> tuple[str, str]:
    """The claim and the settle on ``table`` (tickwork_tasks or split_state); on the
    split layout the claim joins the definition for the columns a claim returns."""
    sets = texts["claimed_set"].replace("%(lease)s", "30")
    # Each layout's pick walks its claim index (tickwork's: the plain tasks' partial index,
    # whose predicate it must repeat; a pick that did not was a sequential scan a claim).
    claimable = CLAIMABLE if table == "tickwork_tasks" else "queue = 'default' AND status = 'PENDING'"
    pick = (
        f"SELECT id FROM {table} WHERE {claimable} AND next_run_at <= now()"
        f" ORDER BY next_run_at, id LIMIT {BATCH} FOR UPDATE SKIP LOCKED"
    )
    returned = texts["claimed_task"]
    if table == "tickwork_tasks":
        claim = f"UPDATE tickwork_tasks t SET {sets} WHERE t.id = ANY(ARRAY({pick})) RETURNING {returned}"
    else:  # t is the state row: each returned column from where it lives now
        columns = re.sub(r"\bt\.(\w+)", lambda m: ("t." if m[1] in STATE or m[1] == "id" else "d.") + m[1], returned)
        claim = (
            f"WITH t AS (UPDATE split_state t SET {sets} WHERE t.id = ANY(ARRAY({pick})) RETURNING t.*)"
            f" SELECT {columns} FROM t JOIN split_definition d ON d.id = t.id"
        )
    settle = (
        f"WITH settled AS (UPDATE {table} t SET status = 'COMPLETED', version = t.version + 1,"
        " lease_owner = NULL, lease_expires_at = NULL, run_count = t.run_count + 1, last_status = 'COMPLETED',"
        " updated_at = now() WHERE t.id = ANY(%(ids)s) RETURNING t.id, t.version, t.run_id, t.run_attempt,"
        " t.run_started_at, t.run_scheduled_for)"
        " INSERT INTO tickwork_executions (id, task_id, attempt, scheduled_for, started_at, finished_at, status,"
        " node, fence) SELECT run_id, id, run_attempt, run_scheduled_for, run_started_at, now(), 'COMPLETED',"
        " %(node)s, version FROM settled"
    )
    return claim, settle


def one(folder: Path, n: int, layout: str) -> tuple[float, float]:
    """The database's and this process's CPU µs per task of claiming and settling n."""
    store = fresh_store("skip_locked", folder)
    try:
        schedule(store, [datetime.now(UTC) - timedelta(seconds=1)] * n)
        dialect = PostgresDialect(store.url)
        texts = dialect.texts
        dialect.close()
        with psycopg.connect(store.url, autocommit=True, prepare_threshold=0) as conn:
            if layout == "split":
                for statement in filter(str.strip, SPLIT_DDL.split(";")):
                    conn.execute(statement, prepare=False)
            claim, settle = statements(texts, "tickwork_tasks" if layout == "one row" else "split_state")
            conn.execute("VACUUM ANALYZE tickwork_tasks")

            def loop() -> int:
                done = 0
                with conn.cursor(binary=True) as cur:
                    while rows := cur.execute(claim, {"node": NODE}).fetchall():
                        cur.execute(settle, {"ids": [r[0] for r in rows], "node": NODE})
                        done += len(rows)
                return done

            done, database_us, client_us = timed(n, loop)
        if done != n:
            raise SystemExit(f"{layout}: {done} of {n} tasks claimed and settled")
        return database_us, client_us
    finally:
        drop(store)


def main() -> None:
    args = arguments(__doc__)
    figures: dict[str, list[tuple[float, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for layout in LAYOUTS:  # alternating, so a sitting's drift falls on both
                database_us, client_us = one(Path(tmp), args.tasks, layout)
                figures[layout].append((database_us, client_us))
                print(f"# round {i + 1} {layout}: database {database_us:.1f} µs, client {client_us:.1f} µs a task")
    print_medians("layout (median)", figures)


if __name__ == "__main__":
    main()
