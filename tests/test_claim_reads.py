"""Issue 17: what a claim reads does not grow with what it cannot claim. Each statement a
node runs to claim or to find its next due time is run over a table that also holds
thousands of due tasks of other queues (or of a paused queue) and thousands of tasks not
due yet, and the rows it reads are counted by the database itself: on PostgreSQL the
rows each scan of ``tickwork_tasks`` returned or filtered out (EXPLAIN ANALYZE), on
SQLite the virtual machine steps it took, against the same statement over a table with
none of that. Counts, not timings: the same on any machine."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tickwork.model import Kind
from tickwork.store import NewTask, Store
from tickwork.store.limits import SCAN
from tickwork.store.runs import queue_params

NAME = "reads.job"
BACKLOG = 5_000
STATEMENTS = ["claim_candidates", "lane_candidates", "next_due_at"]


def new(store: Store, offset: float, **fields: Any) -> NewTask:
    when = store.now() + timedelta(seconds=offset)
    return NewTask(name=NAME, args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=when, next_run_at=when, **fields)


def copy_task(url: str, task_id: int, times: int) -> None:
    """``times`` copies of one task, written in one statement."""
    columns = (
        "name, args, kwargs, kind, scheduled_at, next_run_at, status, queue, lock, priority, created_at, updated_at"
    )
    sql = (
        f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {int(times)}) "
        f"INSERT INTO tickwork_tasks ({columns}) SELECT {columns} FROM tickwork_tasks, n WHERE id = {int(task_id)}"
    )
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("///", 1)[1]) as conn:
            conn.execute(sql)
            conn.execute("ANALYZE")
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.encode())
            conn.execute("ANALYZE tickwork_tasks")


def params(store: Store, queues: list[str] | None = None) -> dict[str, Any]:
    d = store.dialect  # type: ignore[attr-defined]
    now = d.approximate_now()
    return {
        "now": d.encode_time(now),
        "node": "reads",
        "lease": 30.0,
        "lease_until": d.encode_time(now + timedelta(seconds=30)),
        "names": d.encode_names([NAME]),
        "exclude": d.encode_ids([]),
        "limit": 32,
        "scan": SCAN,
        "due_by": d.encode_time(now),
        **queue_params(d, ["default"] if queues is None else queues),
    }


def reads(store: Store, url: str, query: str, values: dict[str, Any]) -> int:
    """How much ``query`` read: PostgreSQL, rows out of or filtered by each scan of the
    tasks table; SQLite, virtual machine steps. The statement's writes are rolled back."""
    text = store.dialect.texts[query]  # type: ignore[attr-defined]
    if url.startswith("sqlite"):
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        conn = sqlite3.connect(url.split("///", 1)[1])
        conn.set_progress_handler(count, 1)
        conn.execute(text, values).fetchall()
        conn.rollback()
        conn.close()
        return steps
    import psycopg

    with psycopg.connect(url) as conn:
        [(plan,)] = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {text}".encode(), values).fetchall()
        conn.rollback()
    tree = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
    return sum(_rows(node) for node in _nodes(tree))


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _rows(node: dict[str, Any]) -> int:
    if node.get("Relation Name") != "tickwork_tasks":
        return 0
    return int((node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * node.get("Actual Loops", 1))


def measure(store: Store, url: str, queries: list[str]) -> dict[str, int]:
    return {q: reads(store, url, q, params(store)) for q in queries}


def statements(store_url: str) -> list[str]:
    return STATEMENTS + ([] if store_url.startswith("sqlite") else ["claim_skip_locked"])


def within(full: dict[str, int], empty: dict[str, int], store_url: str) -> dict[str, tuple[int, int]]:
    """The statements that read much more over the full table than over the empty one."""
    slack = 2_000 if store_url.startswith("sqlite") else 200  # SQLite: VM steps, not rows
    return {q: (full[q], empty[q]) for q in full if full[q] > 2 * empty[q] + slack}


def test_due_tasks_of_other_queues_and_future_tasks_are_not_read(store: Store, store_url: str) -> None:
    store.insert_tasks([new(store, -5) for _ in range(40)])  # this node's queue: due work
    empty = measure(store, store_url, statements(store_url))
    [other] = store.insert_tasks([new(store, -60, queue="reports")])
    copy_task(store_url, other.id, BACKLOG)  # older than this node's: first in due order
    [future] = store.insert_tasks([new(store, 3600)])
    copy_task(store_url, future.id, BACKLOG)
    full = measure(store, store_url, statements(store_url))
    assert within(full, empty, store_url) == {}
    assert [c.task.queue for c in store.claim("reads", [NAME], 32, 30.0, queues=["default"])] == ["default"] * 32


def test_a_paused_queues_backlog_is_not_read(store: Store, store_url: str) -> None:
    store.insert_tasks([new(store, -5) for _ in range(40)])
    empty = measure(store, store_url, statements(store_url))
    [paused] = store.insert_tasks([new(store, -60, queue="paused")])
    copy_task(store_url, paused.id, BACKLOG)
    store.set_queue_paused("paused", True)
    values = {**params(store, ["paused", "default"])}
    full = {q: reads(store, store_url, q, values) for q in statements(store_url)}
    assert within(full, empty, store_url) == {}
    claimed = store.claim("reads", [NAME], 32, 30.0, queues=["paused", "default"])
    assert {c.task.queue for c in claimed} == {"default"}


def test_tasks_held_back_by_a_limit_are_not_read_by_the_plain_claim(store: Store, store_url: str) -> None:
    store.insert_tasks([new(store, -5) for _ in range(40)])
    empty = measure(store, store_url, ["claim_candidates"])
    store.insert_tasks([new(store, -120, lock="held")])
    [holder] = store.claim("holder", [NAME], 1, 300.0)
    assert holder.task.lock == "held"
    [waiting] = store.insert_tasks([new(store, -60, lock="held")])
    copy_task(store_url, waiting.id, BACKLOG)
    full = measure(store, store_url, ["claim_candidates"])
    assert within(full, empty, store_url) == {}
    assert {c.task.lock for c in store.claim("reads", [NAME], 32, 30.0, queues=["default"])} == {None}


def test_every_queue_is_read_when_none_is_named(store: Store) -> None:
    """``queues=None`` (a caller of the store that serves every queue): each queue with
    due work is found by the loose scan, and the oldest due come first across them."""
    for i, queue in enumerate(["b", "a", "c", "b"]):
        store.insert_tasks([new(store, -10 + i, queue=queue)])
    store.insert_tasks([new(store, 60, queue="d")])  # not due
    claimed = store.claim("reads", [NAME], 10, 30.0, queues=None)
    assert [c.task.queue for c in claimed] == ["b", "a", "c", "b"]
    assert store.next_due_at([NAME], None) is not None


def test_counts_do_not_read_future_tasks(store: Store, store_url: str) -> None:
    """The depth gauges and the producer's backpressure count read the due part of each
    queue and lane priority, however many tasks wait in the future."""
    counts = ["queue_depth", "due_by_queue", "due_count"]
    store.insert_tasks([new(store, -5) for _ in range(40)] + [new(store, -5, priority=2) for _ in range(10)])
    empty = measure(store, store_url, counts)
    for fields in ({}, {"priority": 2}, {"queue": "reports"}):
        [future] = store.insert_tasks([new(store, 3600, **fields)])
        copy_task(store_url, future.id, BACKLOG)
    full = measure(store, store_url, counts)
    assert within(full, empty, store_url) == {}
    assert store.queue_depth()[0] == 50 and store.due_count(1000) == 50
    assert store.due_by_queue() == {"default": (50, store.queue_depth()[1])}


@pytest.fixture(autouse=True)
def _only_sql_stores(store: Store) -> None:
    if not hasattr(store, "dialect"):
        pytest.skip("reads are counted by the SQL stores' databases")
