"""SQLite's batch statements of the hot path (sqlite.sql: claim_batch, log_claimed_runs,
write_outcomes_batch, finish_executions_batch) find each row by its id, the batch (JSON
text, or the connection's outcome batch table) driving the lookups: a plan that walked a
table, or an index of every running task or execution, or that built a Bloom filter of
one (by reading it whole), would cost each batch in proportion to the table, under the
file's write lock. Checked on SQLite's own plans over a file holding many running runs
and much history, with statistics (ANALYZE) and without."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from tickwork.model import ExecutionStatus, Kind
from tickwork.schedules import outcome_of
from tickwork.store import NewTask, open_store

STATEMENTS = ["claim_batch", "log_claimed_runs", "write_outcomes_batch", "finish_executions_batch"]


@pytest.fixture(params=[False, True], ids=["no statistics", "analyzed"])
def path(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    file = tmp_path / "batches.db"
    store = open_store(f"sqlite:///{file}")
    store.migrate()
    now = store.now()
    due = now - timedelta(seconds=1)
    store.insert_tasks(
        [NewTask(name="t", args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=due, next_run_at=due)] * 3000
    )
    claims = store.claim("n", ["t"], 2000, 30.0)
    store.finish("n", [outcome_of(c, ExecutionStatus.COMPLETED, store.now()) for c in claims[:1000]])
    store.close()
    if request.param:
        with sqlite3.connect(file) as conn:
            conn.execute("ANALYZE")
    return file


@pytest.mark.parametrize("query", STATEMENTS)
def test_each_batch_statement_finds_its_rows_by_id(path: Path, query: str) -> None:
    store = open_store(f"sqlite:///{path}")
    texts = store.dialect.texts  # type: ignore[attr-defined]
    store.close()
    params = {"candidates": "[]", "ids": "[]", "positions": "[0, 1]", "node": "n", "now": 0, "lease_until": 0}
    params["expired_only"] = False
    with sqlite3.connect(path) as conn:
        conn.execute(texts["create_outcome_batch"])  # each connection's own (sqlite.py)
        text = texts[query]
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {text}", params)]
    walks = [step for step in plan if step.startswith("SCAN") and "VIRTUAL TABLE" not in step]
    assert all("tickwork_queues" in step for step in walks), plan  # the paused queues' table only
    assert any("INTEGER PRIMARY KEY" in step for step in plan), plan
    assert not [step for step in plan if "tickwork_tasks_lease" in step or "tickwork_executions_status" in step], plan
    assert not [step for step in plan if step.startswith("BLOOM FILTER")], plan  # built by reading a whole table


def test_the_batch_compare_and_set_skips_a_row_whose_version_moved(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'cas.db'}")
    store.migrate()
    due = store.now() - timedelta(seconds=1)
    fresh, moved = store.insert_tasks(
        [NewTask(name="t", args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=due, next_run_at=due)] * 2
    )
    d = store.dialect  # type: ignore[attr-defined]
    now = d.approximate_now()
    params = {"node": "n", "now": d.encode_time(now), "lease_until": d.encode_time(now + timedelta(seconds=30))}
    candidates = [{"id": fresh.id, "version": fresh.version}, {"id": moved.id, "version": moved.version + 1}]
    with d.transaction() as s:
        rows = d.hot_path.compare_and_set(s, candidates, params)
    assert [int(r["id"]) for r in rows] == [fresh.id]
    assert rows[0]["version"] == fresh.version + 1 and rows[0]["execution_id"] is not None
    [run] = store.list_executions(task_id=fresh.id)
    assert run.id == rows[0]["execution_id"] and run.status is ExecutionStatus.RUNNING
    assert store.list_executions(task_id=moved.id) == []
    assert store.task_header(moved.id).status == "PENDING"  # type: ignore[union-attr]
    store.close()
