"""PostgreSQL writes a run's execution row once, when the run ends (migration 0014):
while it runs, its task's row holds it, and every reader still shows it RUNNING, with
the id, start, slot, node and fence its row then gets."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_ADMIN_URL, wait_for
from tickwork.model import ExecutionStatus, Kind, Status
from tickwork.schedules import outcome_of
from tickwork.store import Claim, NewTask, Store, open_store

NAME = "runs.job"


@pytest.fixture
def store_url(pg_url: str) -> str:
    """PostgreSQL only: conftest's ``store`` opens this one."""
    return pg_url


def due(store: Store) -> NewTask:
    slot = store.now() - timedelta(seconds=30)
    return NewTask(name=NAME, args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=slot, next_run_at=slot)


def stored_executions(url: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT id, status FROM tickwork_executions ORDER BY id")]


def claim_one(store: Store, node: str = "node-a") -> Claim:
    [claim] = store.claim(node, [NAME], 1, 30.0)
    return claim


def test_a_running_run_is_read_from_its_task_and_written_once_at_its_end(store: Store, pg_url: str) -> None:
    task = store.insert_tasks([due(store)])[0]
    claim = claim_one(store)
    assert stored_executions(pg_url) == []  # nothing written to the log yet

    [running] = store.list_executions(task_id=task.id)
    assert (running.id, running.status, running.node, running.fence) == (
        claim.execution_id, ExecutionStatus.RUNNING, "node-a", claim.fence,
    )  # fmt: skip
    assert running.scheduled_for == task.scheduled_at and running.finished_at is None and running.attempt == 1
    assert running.started_at is not None and running.started_at >= task.next_run_at
    assert [r.id for r in store.list_executions(status=ExecutionStatus.RUNNING)] == [claim.execution_id]
    assert [r.id for r in store.find_executions(status=ExecutionStatus.RUNNING).runs] == [claim.execution_id]
    [shown] = store.running_tasks(10)
    assert shown.started_at == running.started_at

    assert store.finish("node-a", [outcome_of(claim, ExecutionStatus.COMPLETED, store.now())]) == [True]
    assert stored_executions(pg_url) == [(claim.execution_id, "COMPLETED")]
    [done] = store.list_executions(task_id=task.id)
    assert (done.id, done.status, done.node, done.fence) == (
        claim.execution_id, ExecutionStatus.COMPLETED, "node-a", claim.fence,
    )  # fmt: skip
    assert (done.scheduled_for, done.started_at) == (running.scheduled_for, running.started_at)
    assert store.list_executions(status=ExecutionStatus.RUNNING) == []


def test_a_late_result_of_a_run_taken_over_writes_no_second_row(store: Store, pg_url: str) -> None:
    store.insert_tasks([due(store)])
    claim = claim_one(store)
    # The run's row written by another outcome first (as a reconciler's would be) ...
    assert store.finish("node-a", [outcome_of(claim, ExecutionStatus.FAILED, store.now())]) == [True]
    # ... and the same run's late result: fenced out, no second row, the first unchanged.
    assert store.finish("node-a", [outcome_of(claim, ExecutionStatus.COMPLETED, store.now())]) == [False]
    assert stored_executions(pg_url) == [(claim.execution_id, "FAILED")]


def test_an_execution_ended_early_is_no_longer_running_and_its_run_is_not_reaped(store: Store, pg_url: str) -> None:
    task = store.insert_tasks([due(store)])[0]
    claim = claim_one(store)
    at = store.now()
    assert store.end_execution("node-a", claim, ExecutionStatus.TIMED_OUT, at, None, "timeout") is True
    assert stored_executions(pg_url) == [(claim.execution_id, "TIMED_OUT")]
    [row] = store.list_executions(task_id=task.id)
    assert row.status is ExecutionStatus.TIMED_OUT and row.note == "timeout"
    assert store.get_task(task.id).status is Status.RUNNING  # the thread still holds it
    # The thread lets go: the task settles, the row stays as end_execution wrote it.
    assert store.finish("node-a", [outcome_of(claim, ExecutionStatus.COMPLETED, store.now())]) == [True]
    assert stored_executions(pg_url) == [(claim.execution_id, "TIMED_OUT")]


def test_a_nodes_own_results_are_plain_inserts_and_a_reapers_keep_on_conflict(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which statement writes what (the results alone cannot tell: the fallback writes the
    same rows): a node's own results the plain inserts, a reconciler's the ON CONFLICT."""
    from tickwork.store.pg_session import PgSession

    sent: list[str] = []
    fetch_all = PgSession.fetch_all

    def spy(self: PgSession, query: str, params: Any) -> Any:
        sent.append(query)
        return fetch_all(self, query, params)

    monkeypatch.setattr(PgSession, "fetch_all", spy)
    first, second = claim_due(store, 2)
    assert store.finish("node-a", [outcome_of(first, ExecutionStatus.COMPLETED, store.now())]) == [True]
    assert [q for q in sent if "outcomes" in q] == ["write_fresh_outcomes"]
    sent.clear()
    lost = outcome_of(second, ExecutionStatus.FAILED, store.now(), note="max_runtime")
    assert store.reap("node-a", [lost], expired_only=False) == [True]
    assert [q for q in sent if "outcomes" in q] == ["write_outcomes_batch"]


def test_a_batch_with_a_run_ended_early_still_writes_each_run_once(store: Store, pg_url: str) -> None:
    """A node writes its own results with plain inserts (write_fresh_outcomes): a batch
    holding one run whose row end_execution wrote is refused whole and goes again as
    write_outcomes_batch. Every result applies, that row stays as it was, the others
    are written once."""
    store.insert_tasks([due(store) for _ in range(5)])
    claims = store.claim("node-a", [NAME], 5, 30.0)
    assert len(claims) == 5
    stuck = claims[2]
    assert store.end_execution("node-a", stuck, ExecutionStatus.TIMED_OUT, store.now(), None, "timeout") is True
    outcomes = [outcome_of(c, ExecutionStatus.COMPLETED, store.now()) for c in claims]
    assert store.finish("node-a", outcomes) == [True] * 5
    assert stored_executions(pg_url) == sorted(
        (c.execution_id, "TIMED_OUT" if c is stuck else "COMPLETED") for c in claims
    )
    assert {store.get_task(c.task.id).status for c in claims} == {Status.COMPLETED}
    assert store.list_executions(status=ExecutionStatus.RUNNING) == []


def test_an_early_end_racing_the_nodes_own_result_leaves_one_row_per_run(store: Store, pg_url: str) -> None:
    """A stuck thread's early end and the same run's result (the thread let go at that
    instant) written at once, round after round, from two connections: each run ends
    with exactly one row, the early end's exactly when it reports True, and the result
    always applies to the task (an early end leaves the task as it is)."""
    claims = claim_due(store, 30)
    finished: dict[int, list[bool]] = {}

    def finish(claim: Claim) -> None:
        finished[claim.execution_id] = store.finish(
            "node-a", [outcome_of(claim, ExecutionStatus.COMPLETED, store.now())]
        )

    ended = race_early_ends(store, claims, finish)
    rows = dict(stored_executions(pg_url))
    assert sorted(rows) == sorted(c.execution_id for c in claims)  # one row per run, no more
    for claim in claims:
        assert rows[claim.execution_id] == ("TIMED_OUT" if ended[claim.execution_id] else "COMPLETED"), claim
        assert finished[claim.execution_id] == [True]
        assert store.get_task(claim.task.id).status is Status.COMPLETED


def claim_due(store: Store, count: int) -> list[Claim]:
    store.insert_tasks([due(store) for _ in range(count)])
    claims = store.claim("node-a", [NAME], count, 30.0)
    assert len(claims) == count
    return claims


def race_early_ends(store: Store, claims: list[Claim], other: Callable[[Claim], None]) -> dict[int, bool]:
    """For each claim in turn, node A's early end of its run and ``other`` at the same
    instant, on two threads; what each early end reported, by execution id."""
    start = threading.Barrier(2)
    ended: dict[int, bool] = {}

    def end(claim: Claim) -> None:
        start.wait(timeout=10)
        ended[claim.execution_id] = store.end_execution(
            "node-a", claim, ExecutionStatus.TIMED_OUT, store.now(), None, "timeout"
        )

    def at_once(claim: Claim) -> None:
        start.wait(timeout=10)
        other(claim)

    for claim in claims:
        threads = [threading.Thread(target=end, args=(claim,)), threading.Thread(target=at_once, args=(claim,))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
    return ended


def test_a_given_back_claim_leaves_no_run(store: Store, pg_url: str) -> None:
    task = store.insert_tasks([due(store)])[0]
    claim = claim_one(store)
    assert store.release("node-a", [claim]) == 1
    assert store.list_executions(task_id=task.id) == [] and stored_executions(pg_url) == []
    again = claim_one(store, "node-b")
    assert again.execution_id != claim.execution_id
    assert [r.id for r in store.list_executions(task_id=task.id)] == [again.execution_id]


def test_an_early_end_racing_a_reaper_leaves_one_row_per_run(store: Store, pg_url: str) -> None:
    """A stuck thread's early end (node A) and another node's reconciler (B) write the same
    run at the same instant, round after round: each run ends with exactly one row,
    the one of whichever write came first, and the early end reports True exactly when
    its row is the one kept. The reaper's settle always applies (an early end leaves the
    task as it is), so no task stays RUNNING."""
    claims = claim_due(store, 30)
    other = open_store(pg_url)  # node B: its own pool of connections
    reaped: dict[int, list[bool]] = {}

    def reap(claim: Claim) -> None:
        outcome = outcome_of(claim, ExecutionStatus.FAILED, other.now(), note="max_runtime")
        reaped[claim.execution_id] = other.reap("node-a", [outcome], expired_only=False)

    try:
        ended = race_early_ends(store, claims, reap)
    finally:
        other.close()
    rows = dict(stored_executions(pg_url))
    assert sorted(rows) == sorted(c.execution_id for c in claims)  # one row per run, no more
    for claim in claims:
        kept = rows[claim.execution_id]
        assert kept == ("TIMED_OUT" if ended[claim.execution_id] else "FAILED"), claim.execution_id
        assert reaped[claim.execution_id] == [True]
        assert store.get_task(claim.task.id).status is Status.FAILED


@pytest.fixture
def own_database() -> Iterator[str]:
    """A database of this test's own: it takes the schema back a version."""
    name = f"tickwork_upgrade_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_upgrade_moves_a_run_going_on_to_its_task_row(own_database: str) -> None:
    store = open_store(own_database)
    try:
        store.migrate()
        task = store.insert_tasks([due(store)])[0]
        claim = claim_one(store)
        [before] = store.list_executions(task_id=task.id)
        with psycopg.connect(own_database) as conn:  # the run as version 13 wrote it
            conn.execute(
                "INSERT INTO tickwork_executions"
                " (id, task_id, attempt, scheduled_for, started_at, status, node, fence, note)"
                " SELECT run_id, id, run_attempt, run_scheduled_for, run_started_at, 'RUNNING', lease_owner, version,"
                " 'stuck' "
                "FROM tickwork_tasks WHERE status = 'RUNNING'"
            )
            conn.execute("DROP VIEW tickwork_runs")
            conn.execute("DROP INDEX tickwork_executions_unsuccessful")  # migration 0015's
            for column in ("run_id", "run_attempt", "run_started_at", "run_scheduled_for", "run_note"):
                conn.execute(f"ALTER TABLE tickwork_tasks DROP COLUMN {column}")
            conn.execute("DELETE FROM tickwork_schema WHERE version >= 14")
        store.close()
        store = open_store(own_database)
        assert store.migrate() == 15
        assert stored_executions(own_database) == []
        assert store.list_executions(task_id=task.id) == [dataclasses.replace(before, note="stuck")]
        [taken] = store.claimed_since("node-a", before.started_at - timedelta(seconds=1))
        assert (taken.execution_id, taken.fence) == (claim.execution_id, claim.fence)
        assert store.finish("node-a", [outcome_of(taken, ExecutionStatus.COMPLETED, store.now())]) == [True]
        assert stored_executions(own_database) == [(claim.execution_id, "COMPLETED")]
    finally:
        store.close()


def claim_the_old_way(url: str, task_id: int, node: str, lease: float) -> int:
    """A claim as a node of the version before migration 0014 makes it (a rolling
    upgrade): a RUNNING execution row, nothing of the run on the task's row."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "WITH claimed AS (UPDATE tickwork_tasks t SET status = 'RUNNING', version = t.version + 1,"
            " lease_owner = %(node)s, lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s),"
            " attempt = t.attempt + 1, updated_at = now() WHERE id = %(id)s"
            " RETURNING t.*, nextval('tickwork_executions_id_seq') AS execution_id)"
            " INSERT INTO tickwork_executions (id, task_id, attempt, scheduled_for, started_at, status, node, fence)"
            " SELECT execution_id, id, attempt, scheduled_at, GREATEST(now(), next_run_at), 'RUNNING',"
            " %(node)s, version FROM claimed RETURNING id",
            {"node": node, "lease": lease, "id": task_id},
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("earlier_row", ["kept", "pruned"])
def test_a_run_claimed_by_a_node_of_the_version_before_is_read_and_reaped_by_its_row(
    store: Store, pg_url: str, earlier_row: str
) -> None:
    task = store.insert_tasks([due(store)])[0]
    first = claim_one(store)  # a run of this version: the task's row keeps its run_id
    assert store.finish("node-a", [outcome_of(first, ExecutionStatus.COMPLETED, store.now())]) == [True]
    with psycopg.connect(pg_url) as conn:  # the task due again (as a recurring task's next slot)
        conn.execute("UPDATE tickwork_tasks SET status = 'PENDING' WHERE id = %s", (task.id,))
        if earlier_row == "pruned":
            conn.execute("DELETE FROM tickwork_executions WHERE id = %s", (first.execution_id,))
    legacy = claim_the_old_way(pg_url, task.id, "old-node", 0.2)

    running = store.list_executions(status=ExecutionStatus.RUNNING)
    assert [(r.id, r.node) for r in running] == [(legacy, "old-node")]  # the row, once, not the stale run_id
    assert [r.id for r in store.find_executions(status=ExecutionStatus.RUNNING).runs] == [legacy]
    assert store.list_executions(task_id=task.id)[0].id == legacy  # the newest
    [shown] = store.running_tasks(10)
    assert shown.started_at == running[0].started_at

    [lost] = [c for c in wait_for_expired(store) if c.task.id == task.id]
    assert lost.execution_id == legacy
    assert store.reap("old-node", [outcome_of(lost, ExecutionStatus.FAILED, store.now())]) == [True]
    rows = stored_executions(pg_url)
    assert (legacy, "FAILED") in rows and len(rows) == (2 if earlier_row == "kept" else 1)
    [ended] = [r for r in store.list_executions(task_id=task.id) if r.id == legacy]
    assert (ended.started_at, ended.scheduled_for) == (running[0].started_at, running[0].scheduled_for)
    assert store.list_executions(status=ExecutionStatus.RUNNING) == []


def wait_for_expired(store: Store) -> list[Claim]:
    found = wait_for(lambda: store.expired(100), timeout=10)
    assert isinstance(found, list)
    return found
