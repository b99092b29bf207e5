"""Issue 17: what a claim reads does not grow with what it cannot claim. Each statement a
node runs to claim or to find its next due time is run over a table that also holds
thousands of due tasks of other queues (or of a paused queue) and thousands of tasks not
due yet, and the rows it reads are counted by the database itself: on PostgreSQL the
rows each scan of ``tickwork_tasks`` returned or filtered out (EXPLAIN ANALYZE), on
SQLite the virtual machine steps it took, against the same statement over a table with
none of that. Counts, not timings: the same on any machine."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tickwork.model import Claim, ExecutionStatus, Kind, Status
from tickwork.schedules import outcome_of
from tickwork.store import NewTask, Store, encoding
from tickwork.store.limits import SCAN
from tickwork.store.runs import queue_params

NAME = "reads.job"
BACKLOG = 5_000
STATEMENTS = ["claim_candidates", "lane_candidates", "upcoming_due"]


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


def outcome_batch(store: Store, running: list[Claim]) -> str:
    """``write_outcomes_batch``'s batch: every run COMPLETED now."""
    rows = [encoding.outcome_json(outcome_of(c, ExecutionStatus.COMPLETED, store.now())) for c in running]
    assert None not in rows  # times of now: all in the batch's exact years
    return "[" + ",".join(row for row in rows if row is not None) + "]"


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
        "unless_lane": True,  # claim_skip_locked as a claim first runs it: with its probe of the lane
        "ahead": 1,  # next_due_at's: a node's 64 read future tasks on purpose, 64 at most
        "due_by": d.encode_time(now),
        "ahead_s": 0.0,
        **queue_params(d, ["default"] if queues is None else queues),
    }


def reads(store: Store, url: str, query: str, values: dict[str, Any]) -> int:
    """How much ``query`` read: PostgreSQL, rows out of or filtered by each scan of the
    tasks and executions tables; SQLite, virtual machine steps. The statement's writes are rolled back."""
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
    return max(_pg_reads(url, text, values, generic) for generic in (False, True))


def _pg_reads(url: str, text: str, values: dict[str, Any], generic: bool, joins: bool = False) -> int:
    """Rows read by the plan made for these values, or by the generic plan (what the
    hot path's prepared statements run: tickwork/store/postgres.py). With ``joins``, the
    rows every join looked at and threw away too (a nested loop over a batch's rows)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url) as conn:
        cur = conn.cursor()
        explain = f"EXPLAIN (ANALYZE, FORMAT JSON) {text}"
        if generic:  # prepare it, then explain the prepared statement's (generic) plan
            cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            cur.execute(text.encode(), values, prepare=True)
            [(prepared,)] = cur.execute("SELECT name FROM pg_prepared_statements ORDER BY prepare_time DESC LIMIT 1")
            names = dict.fromkeys(re.findall(r"%\((\w+)\)s", text))  # psycopg numbers them in this order
            given = ", ".join(sql.Literal(values[n]).as_string(conn) for n in names)
            explain = f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {prepared}" + (f"({given})" if given else "")
        [(plan,)] = cur.execute(explain.encode(), None if generic else values).fetchall()
        conn.rollback()
    tree = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
    thrown = sum(int(n.get("Rows Removed by Join Filter", 0) * n.get("Actual Loops", 1)) for n in _nodes(tree))
    return sum(_rows(node) for node in _nodes(tree)) + (thrown if joins else 0)


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _rows(node: dict[str, Any]) -> int:
    """Rows a scan of the tasks or executions table read. A sequential scan counts the
    rows it would read when this run never reached it (another run would)."""
    if node.get("Relation Name") not in ("tickwork_tasks", "tickwork_executions"):
        return 0
    read = int((node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * node.get("Actual Loops", 1))
    return max(read, int(node["Plan Rows"])) if node.get("Node Type") == "Seq Scan" else read


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


HOT_PATH = [
    "claim_skip_locked", "claim_candidates_and_lane", "claim_cas_batch", "renew_batch", "write_outcomes_batch",
    "write_fresh_outcomes",
]  # fmt: skip


def test_the_hot_paths_generic_plans_read_only_their_own_rows(store: Store, store_url: str) -> None:
    """The hot path's connections run every statement's generic plan (postgres.py), made
    without the parameters' values: not one of them may scan a table or walk what it
    does not need, however the planner guesses the sizes of its arrays and LIMITs."""
    if store_url.startswith("sqlite"):
        pytest.skip("SQLite plans each statement with its values")

    store.insert_tasks([new(store, -5) for _ in range(40)])
    [other] = store.insert_tasks([new(store, -60, queue="reports")])
    copy_task(store_url, other.id, BACKLOG)
    [future] = store.insert_tasks([new(store, 3600)])
    copy_task(store_url, future.id, BACKLOG)
    _history(store_url)
    running = store.claim("reads", [NAME], 8, 30.0, queues=["default"])
    d = store.dialect  # type: ignore[attr-defined]
    waiting = [t for t in store.list_tasks(status=Status.PENDING, limit=40) if t.queue == "default"][:8]
    values = {
        **params(store),
        "lane": False,
        "ids": [t.id for t in waiting],
        "versions": [t.version for t in waiting],
        "fences": [c.fence for c in running],
        "expired_only": False,
        "batch": outcome_batch(store, running),
    }
    renewing = {**values, "ids": [c.task.id for c in running]}
    found = {q: _pg_reads(store_url, d.texts[q], renewing if q == "renew_batch" else values, True) for q in HOT_PATH}
    assert {q: n for q, n in found.items() if n > 200} == {}


def test_the_hot_path_runs_generic_plans_and_nothing_is_jit_compiled(store: Store, store_url: str) -> None:
    """Its settings per connection: the hot path's pool plans once per statement, the
    other pool as PostgreSQL chooses (listings with optional filters need their values),
    and neither JIT-compiles (30 ms to claim 32 rows of a 1,000,000-row table)."""
    if store_url.startswith("sqlite"):
        pytest.skip("PostgreSQL's session settings")
    d = store.dialect  # type: ignore[attr-defined]
    for pool, mode in ((d.autocommit_pool, "force_generic_plan"), (d.pool, "auto")):
        with pool.connection() as conn:
            assert conn.execute("SHOW plan_cache_mode").fetchone() == (mode,)
            assert conn.execute("SHOW jit").fetchone() == ("off",)
            assert conn.execute("SHOW default_transaction_isolation").fetchone() == ("read committed",)


def _history(url: str) -> None:
    """An execution row for each task of the backlog: a scan of the log would show."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tickwork_executions (task_id, attempt, scheduled_for, started_at, status, node, fence) "
            "SELECT id, 1, next_run_at, next_run_at, 'COMPLETED', 'old', 1 FROM tickwork_tasks"
        )
        conn.execute("ANALYZE tickwork_executions")


@pytest.fixture(autouse=True)
def _only_sql_stores(store: Store) -> None:
    if not hasattr(store, "dialect"):
        pytest.skip("reads are counted by the SQL stores' databases")


class Counted:
    """A session that counts the statements run on it (the store's own, not a mock)."""

    def __init__(self, session: Any, names: list[str]) -> None:
        self.session, self.names = session, names

    def fetch_all(self, query: str, params: Any) -> Any:
        self.names.append(query)
        return self.session.fetch_all(query, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


def claim_statements(store: Store, *args: Any, **kwargs: Any) -> tuple[list[Any], list[str]]:
    hot = store._runs.hot  # type: ignore[attr-defined]
    names: list[str] = []
    opened = hot.session

    @contextlib.contextmanager
    def counted() -> Iterator[Counted]:
        with opened() as s:
            yield Counted(s, names)

    hot.session = counted
    try:
        return store.claim(*args, **kwargs), names
    finally:
        del hot.session


def test_a_skip_locked_claim_with_nothing_in_the_lane_is_one_statement(store: Store) -> None:
    """The lane is probed inside claim_skip_locked: with no due task there that has a
    limit or a priority, the claim is that one statement. With one, the statement claims
    nothing, and the lane's task goes first."""
    if getattr(store, "claim_strategy", None) != "skip_locked":
        pytest.skip("PostgreSQL's skip_locked claim")
    store.insert_tasks([new(store, -5) for _ in range(3)])
    not_this_nodes = [new(store, 60, priority=5), dataclasses.replace(new(store, -5, priority=5), name="other.job")]
    store.insert_tasks(not_this_nodes)
    got, ran = claim_statements(store, "n1", [NAME], 2, 30.0, queues=["default"])
    assert (len(got), ran) == (2, ["claim_skip_locked"])
    [urgent] = store.insert_tasks([new(store, -1, priority=5)])
    got, ran = claim_statements(store, "n1", [NAME], 2, 30.0, queues=["default"])
    assert [c.task.id for c in got][:1] == [urgent.id] and len(got) == 2
    assert ran == ["claim_skip_locked", "lane_candidates", "claim_cas_batch", "claim_skip_locked"]
    # The lane had work: the next claim reads it first, finds it empty, and goes back to
    # the one statement after that.
    got, ran = claim_statements(store, "n1", [NAME], 2, 30.0, queues=["default"])
    assert (got, ran) == ([], ["lane_candidates", "claim_skip_locked"])
    got, ran = claim_statements(store, "n1", [NAME], 2, 30.0, queues=["default"])
    assert (got, ran) == ([], ["claim_skip_locked"])


def test_a_lane_held_by_a_full_limit_costs_a_claim_no_probe(store: Store) -> None:
    """Due tasks held back by max_running stay due: each claim reads the lane first, as
    before the probe, rather than probe it, claim nothing, and read it anyway."""
    if getattr(store, "claim_strategy", None) != "skip_locked":
        pytest.skip("PostgreSQL's skip_locked claim")
    store.insert_tasks([new(store, -5, max_running=1) for _ in range(3)] + [new(store, -1) for _ in range(6)])
    got, ran = claim_statements(store, "n1", [NAME], 2, 30.0, queues=["default"])
    assert len(got) == 2 and ran[:2] == ["claim_skip_locked", "lane_candidates"]
    for _ in range(2):  # the limit is full: its tasks are read and passed over
        got, ran = claim_statements(store, "n1", [NAME], 2, 30.0, queues=["default"])
        assert all(c.task.max_running is None for c in got) and len(got) == 2
        assert ran[0] == "lane_candidates" and ran.count("claim_skip_locked") == 1


def test_a_big_batch_of_outcomes_or_renewals_reads_each_task_once(store: Store, store_url: str) -> None:
    """A node with hundreds of short runs writes their outcomes and renews their leases
    in batches of hundreds, while the statistics still say that nothing runs (taken
    before the claim, as autovacuum's lag leaves them): each task must be found by its
    id, not by a walk of every running task per outcome (a cost in the square of the
    batch, which made the outcome write of W1 cost twice what it does now)."""
    if store_url.startswith("sqlite"):
        pytest.skip("SQLite plans each statement with its values")

    size = 200
    store.insert_tasks([new(store, -5) for _ in range(size)])
    [future] = store.insert_tasks([new(store, 3600)])
    copy_task(store_url, future.id, BACKLOG)  # and ANALYZE: nothing runs yet
    running = store.claim("reads", [NAME], size, 30.0, queues=["default"])
    assert len(running) == size
    d = store.dialect  # type: ignore[attr-defined]
    values = {
        **params(store),
        "ids": [c.task.id for c in running],
        "fences": [c.fence for c in running],
        "expired_only": False,
        "batch": outcome_batch(store, running),
    }
    batches = ("write_outcomes_batch", "write_fresh_outcomes", "renew_batch")
    found = {q: _pg_reads(store_url, d.texts[q], values, True, joins=True) for q in batches}
    # once over the table at most (a planner's choice for a table this small), never once per row
    assert {q: n for q, n in found.items() if n > BACKLOG + 3 * size} == {}


def test_outcomes_and_renewals_find_tasks_by_id_in_a_small_table_never_analyzed(store: Store, store_url: str) -> None:
    """The same writes in a new deployment's table of 2,000 tasks that autovacuum has not
    analyzed yet: the planner then takes a batch of outcomes for 100 rows and, for a
    table this small, would scan it and compare every task this node runs with every
    outcome."""
    if store_url.startswith("sqlite"):
        pytest.skip("SQLite plans each statement with its values")

    size, table = 200, 2_000
    store.insert_tasks([new(store, -5) for _ in range(size)])
    store.insert_tasks([new(store, 3600) for _ in range(table - size)])
    running = store.claim("reads", [NAME], size, 30.0, queues=["default"])
    assert len(running) == size
    d = store.dialect  # type: ignore[attr-defined]
    values = {
        **params(store),
        "expired_only": False,
        "batch": outcome_batch(store, running),
        "ids": [c.task.id for c in running],
        "fences": [c.fence for c in running],
    }
    batches = ("write_outcomes_batch", "write_fresh_outcomes", "renew_batch")
    found = {q: max(_pg_reads(store_url, d.texts[q], values, g, joins=True) for g in (False, True)) for q in batches}
    # once over the table at most, never once per outcome
    assert {q: n for q, n in found.items() if n > table + 3 * size} == {}


def test_running_runs_are_read_from_their_tasks_when_one_task_owns_the_log(store: Store, store_url: str) -> None:
    """A log of 20,000 rows, all of one task, and 20 runs going on whose rows
    are not written yet (PostgreSQL writes a run's row at its end). Every reader of
    running runs tests each running task's newest row (a run claimed by a node of an
    earlier version has one): that must be one row read per task, not a walk of the
    log back from its end, which the planner takes when one task owns most of it."""
    if store_url.startswith("sqlite"):
        pytest.skip("SQLite writes a run's row at its claim: no test of a task's newest row")
    import psycopg

    [owner] = store.insert_tasks([new(store, 3600)])
    store.insert_tasks([new(store, -5) for _ in range(20)])
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tickwork_executions (task_id, attempt, scheduled_for, started_at, status, node, fence) "
            "SELECT %s, 1, now(), now(), 'COMPLETED', 'old', 1 FROM generate_series(1, 20000)",
            (owner.id,),
        )
        conn.execute("ANALYZE")
    running = store.claim("reads", [NAME], 20, 30.0, queues=["default"])
    assert len(running) == 20
    d = store.dialect  # type: ignore[attr-defined]
    values = {**params(store), "task_id": None, "status": None, "limit": 100, "grace": 0.0}
    readers = {
        "list_executions": values,
        "list_executions RUNNING": {**values, "status": "RUNNING"},
        "running_by_node": values,
        "claimed_since": {**values, "since": d.encode_time(store.now() - timedelta(seconds=60))},
        "find_runs": {**values, "name": None, "since": None, "until": None, "scan": 500},  # the view
    }
    found = {
        name: max(_pg_reads(store_url, d.texts[name.split()[0]], given, generic) for generic in (False, True))
        for name, given in readers.items()
    }
    assert {name: n for name, n in found.items() if n > 1_000} == {}
    assert len(store.list_executions(status=ExecutionStatus.RUNNING)) == 20
    assert {r.id for r in store.list_executions(limit=20)} == {c.execution_id for c in running}


def test_unsuccessful_runs_are_found_by_status_without_reading_the_log(store: Store, store_url: str) -> None:
    """The dashboard's overview asks for the last few runs of each unsuccessful status.
    In a log of 20,000 COMPLETED rows holding two FAILED ones, that reads those two
    (through the partial index of migration 0015), not the log back from its end. The
    readers' connections plan each statement with its values (only the hot path's run
    generic plans), so the plan counted is the one made with them."""
    if store_url.startswith("sqlite"):
        pytest.skip("SQLite has its index by status from its first migration")
    import psycopg

    [task] = store.insert_tasks([new(store, 3600)])
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tickwork_executions (task_id, attempt, scheduled_for, started_at, status, node, fence) "
            "SELECT %s, 1, now(), now(), CASE WHEN i %% 10000 = 0 THEN 'FAILED' ELSE 'COMPLETED' END, 'old', 1 "
            "FROM generate_series(1, 20000) AS i",
            (task.id,),
        )
        conn.execute("ANALYZE")
    d = store.dialect  # type: ignore[attr-defined]
    values = {"task_id": None, "limit": 5}
    found = {
        status: _pg_reads(store_url, d.texts["list_executions"], {**values, "status": status}, False)
        for status in ("FAILED", "TIMED_OUT")
    }
    assert {status: n for status, n in found.items() if n > 10} == {}
    assert len(store.list_executions(status=ExecutionStatus.FAILED, limit=5)) == 2
