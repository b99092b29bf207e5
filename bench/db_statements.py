"""What each part of the hot path's two statements costs the database, per row: the
claim with and without its 52 returned columns, the result write as a node sends it, with
the ``ON CONFLICT`` a reconciler's has and without the execution row, its JSON batch
parsed alone, and a bare update by key.

    .venv/bin/python -m bench.db_statements [--tasks 20000] [--rounds 3]

Each variant runs on a fresh database of due tasks (PostgreSQL on this machine), from
this process, 500 rows a statement, and is timed by the CPU all of PostgreSQL's
processes spent (``bench.pg_cpu.database_cpu``). The variants are tickwork's own
statements (the store's text, as the node sends it, on a connection set up as the
node's are) with one part cut out, so each difference is that part's cost; the figures
are for choosing what to change, not for comparing with other systems. Prints each round and the median per variant.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.ceiling import CLAIMABLE
from bench.db_cost import BATCH, NODE, claim_all, completed, timed
from bench.tickwork_bench import drop, fresh_store, schedule
from tickwork import App
from tickwork.store import encoding

CLAIM_VARIANTS = ("claim returning id", "claim returning 52 columns")
WRITE_VARIANTS = (
    "write as sent",
    "write with ON CONFLICT",
    "write without the execution row",
    "write's JSON parsed alone",
    "update of status by key",
)
_PICK = f"SELECT id FROM tickwork_tasks WHERE {CLAIMABLE} ORDER BY next_run_at, id LIMIT {BATCH} FOR UPDATE SKIP LOCKED"


def claim_variants(texts: dict[str, str]) -> dict[str, str]:
    """The claim's update alone (as the node sets a claimed row), returning its id, or the
    columns a node's claim returns."""
    returned = texts["claimed_task"]
    sets = texts["claimed_set"].replace("%(lease)s", "30")  # the node's own: %(node)s
    if set(re.findall(r"%\((\w+)\)s", sets)) != {"node"}:
        raise SystemExit("claimed_set changed its parameters: update bench/db_statements.py")
    update = f"UPDATE tickwork_tasks t SET {sets} WHERE t.id = ANY(ARRAY({_PICK})) RETURNING "
    return dict(zip(CLAIM_VARIANTS, (update + "t.id", update + returned), strict=True))


def write_variants(texts: dict[str, str]) -> dict[str, str]:
    """The result write as a node sends it (``write_fresh_outcomes``), as a reconciler does
    (``write_outcomes_batch``: its ON CONFLICT keeps a row written early), and with one
    part cut out."""
    text = texts["write_fresh_outcomes"]
    head = text[: text.index("settled AS (")].rstrip().rstrip(",")
    if ", logged AS (" not in text:
        raise SystemExit("write_fresh_outcomes changed shape: update bench/db_statements.py")
    without_log = text[: text.index(", logged AS (")] + "\nSELECT id, fence, execution_id FROM settled"
    by_key = "UPDATE tickwork_tasks SET status = 'COMPLETED' WHERE id = ANY(%(ids)s) RETURNING id"
    parsed = head + "\nSELECT o.task_id AS id FROM o"
    variants = (text, texts["write_outcomes_batch"], without_log, parsed, by_key)
    return dict(zip(WRITE_VARIANTS, variants, strict=True))


def one(folder: Path, n: int, variant: str) -> float:
    """The database's CPU µs per row of ``variant`` on a fresh store of n due tasks."""
    store = fresh_store("skip_locked", folder)
    try:
        schedule(store, [datetime.now(UTC) - timedelta(seconds=1)] * n)
        app = App(store.url, claim="skip_locked")
        try:
            dialect: Any = app.store.dialect  # type: ignore[attr-defined]
            texts: dict[str, str] = dialect.texts
            # Set up as the node's hot-path connections are (generic plans, prepared at once).
            hot_path = {**dialect.connect_kwargs, "options": dialect.hot_path_options, "prepare_threshold": 0}
            with psycopg.connect(store.url, autocommit=True, **hot_path) as conn:
                cur = conn.cursor(binary=True)
                if variant in CLAIM_VARIANTS:
                    return run(n, lambda: _drain(cur, claim_variants(texts)[variant]))
                params = [_write_params(outcomes) for outcomes in completed(app.store, claim_all(app.store))]
                text = write_variants(texts)[variant]
                return run(n, lambda: sum(len(cur.execute(text, p).fetchall()) for p in params))
        finally:
            app.close()
    finally:
        drop(store)


def _drain(cur: psycopg.Cursor[Any], text: str) -> int:
    count = 0
    while rows := cur.execute(text, {"node": NODE}).fetchall():
        count += len(rows)
    return count


def _write_params(outcomes: list[Any]) -> dict[str, Any]:
    batch = "[" + ",".join(o for o in map(encoding.outcome_json, outcomes) if o is not None) + "]"
    return {"node": NODE, "expired_only": False, "batch": batch, "ids": [o.task_id for o in outcomes]}


def run(n: int, work: Callable[[], int]) -> float:
    rows, database_us, _ = timed(n, work)
    if rows != n:
        raise SystemExit(f"{rows} rows of {n}")
    return database_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    variants = [*CLAIM_VARIANTS, *WRITE_VARIANTS]
    figures: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for variant in variants:  # alternating, so that a slow spell hits them all
                figures[variant].append(one(Path(tmp), args.tasks, variant))
            print(f"# round {i + 1}: " + ", ".join(f"{v} {figures[v][-1]:.1f}" for v in variants), flush=True)
    print("| statement (median) | database CPU µs/row |")
    print("|---|---|")
    for variant in variants:
        print(f"| {variant} | {statistics.median(figures[variant]):.1f} |")


if __name__ == "__main__":
    main()
