"""A node under a store that misbehaves: a row locked by another session, renewals that
never return, results the store cannot take for a while (issue 13, defects 9, 10, 12)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from tests.conftest import wait_for
from tests.test_worker import Node
from tickwork import App, Context, ExecutionStatus, Status
from tickwork.model import Kind
from tickwork.store import NewTask, Store


@pytest.fixture
def locked_row(pg_url: str) -> Iterator[Any]:
    """Hold ``SELECT … FOR UPDATE`` on a task row from a session of the test's own."""
    conn = psycopg.connect(pg_url)

    def lock(task_id: int) -> None:
        conn.execute("SELECT id FROM tickwork_tasks WHERE id = %s FOR UPDATE", (task_id,))

    yield lock
    conn.rollback()
    conn.close()


def due(store: Store, name: str, seconds_ago: float) -> NewTask:
    when = store.now() - timedelta(seconds=seconds_ago)
    return NewTask(name=name, args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=when, next_run_at=when)


@pytest.mark.parametrize("claim", ["skip_locked", "optimistic"])
def test_a_row_locked_by_another_session_does_not_stall_the_claim(pg_url: str, locked_row: Any, claim: str) -> None:
    app = App(pg_url, claim=claim)
    store = app.store
    oldest, other = store.insert_tasks([due(store, "x.job", 20), due(store, "x.job", 10)])
    locked_row(oldest.id)
    (claimed,) = store.claim("node-a", ["x.job"], 1, 30.0)  # the oldest is held: the next one, without waiting
    assert claimed.task.id == other.id
    assert store.claim("node-a", ["x.job"], 1, 30.0) == []
    assert store.get_task(oldest.id).status is Status.PENDING  # type: ignore[union-attr]
    app.close()


@pytest.mark.parametrize("claim", ["skip_locked", "optimistic"])
def test_a_node_neither_stalls_nor_spins_on_a_row_locked_elsewhere(pg_url: str, locked_row: Any, claim: str) -> None:
    app = App(pg_url, claim=claim, poll_interval=0.2, heartbeat=0.5, lease=5.0)

    @app.task(name="x.job")
    def job(ctx: Context) -> None:
        return None

    held = app.schedule("x.job", delay=0)
    locked_row(held.id)
    claims = []
    real_claim = app.store.claim

    def counting_claim(*args: Any, **kwargs: Any) -> Any:
        claims.append(time.monotonic())
        return real_claim(*args, **kwargs)

    app.store.claim = counting_claim  # type: ignore[method-assign]
    node = Node(app)
    try:
        others = [app.schedule("x.job", delay=0) for _ in range(5)]
        later = app.schedule("x.job", delay=2.0)  # the window in which a spinning node would claim thousands of times
        wait_for(lambda: all(app.get(t.id).status is Status.COMPLETED for t in [*others, later]))
        assert app.get(held.id).status is Status.PENDING
        # Polls every 0.2 s, plus one claim per wake-up by a schedule or a finished run.
        assert len(claims) < 60, f"{len(claims)} claims in {claims[-1] - claims[0]:.1f} s"
    finally:
        node.stop()
        app.close()


def test_a_renewal_that_never_returns_stops_the_run_before_its_lease_ends(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    lease = 3.0
    app = App(sqlite_url, lease=lease, heartbeat=0.25, poll_interval=0.1)
    seen: dict[str, float] = {}

    @app.task(name="x.long")
    def long(ctx: Context) -> None:
        seen["started"] = time.monotonic()
        while not ctx.cancelled:
            time.sleep(0.01)
        seen["stopped"] = time.monotonic()

    partition = threading.Event()
    healed = threading.Event()
    real_renew = app.store.renew

    def renew(*args: Any, **kwargs: Any) -> Any:
        if partition.is_set():
            healed.wait(30)  # a socket that neither answers nor fails
        return real_renew(*args, **kwargs)

    app.store.renew = renew  # type: ignore[method-assign]
    node = Node(app)
    try:
        with caplog.at_level(logging.WARNING, logger="tickwork"):
            task = app.schedule("x.long")
            wait_for(lambda: "started" in seen)
            partition.set()
            cut_at = time.monotonic()
            wait_for(lambda: "stopped" in seen)
            # Stopped at 0.8 of the lease after its last renewal, which was at most one
            # heartbeat before the cut: never as late as the lease's end.
            assert seen["stopped"] - cut_at < lease
            wait_for(lambda: app.get(task.id).status is Status.FAILED)
        (execution,) = app.executions(task.id)
        assert execution.status is ExecutionStatus.FAILED and "lease" in (execution.error.message or "")  # type: ignore[union-attr]
        assert any("cannot renew leases" in r.getMessage() for r in caplog.records)
    finally:
        healed.set()
        node.stop()
        app.close()


def test_a_result_the_store_cannot_take_for_a_while_is_kept_until_it_can(pg_url: str) -> None:
    app = App(pg_url, lease=2.0, heartbeat=0.2, poll_interval=0.1)

    @app.task(name="x.quick")
    def quick(ctx: Context) -> str:
        return "done"

    refusals = []
    real_finish = app.store.finish

    def read_only_for_a_while(*args: Any, **kwargs: Any) -> Any:
        if len(refusals) < 12:  # a few seconds of back-off, past the lease: renewals keep it
            refusals.append(time.monotonic())
            raise psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction")
        return real_finish(*args, **kwargs)

    app.store.finish = read_only_for_a_while  # type: ignore[method-assign]
    node = Node(app)
    try:
        task = app.schedule("x.quick")
        wait_for(lambda: app.get(task.id).status is Status.COMPLETED)
        assert refusals[-1] - refusals[0] > app.lease  # the result outlived a lease unwritten
        (execution,) = app.executions(task.id)  # written once, never declared lost and run again
        assert execution.status is ExecutionStatus.COMPLETED and execution.result == "done"
        assert app.get(task.id).run_count == 1
    finally:
        node.stop()
        app.close()


def test_a_claim_that_waited_on_a_lock_keeps_the_lease_it_was_given(sqlite_url: str) -> None:
    """The lease starts when the claim runs, not when it was sent: a claim kept waiting
    by another process's write lock for longer than a lease must not be taken for lost."""
    lease = 3.0
    app = App(sqlite_url, lease=lease, heartbeat=0.25, poll_interval=0.1)

    @app.task(name="x.second")
    def second(ctx: Context) -> str:
        time.sleep(1.0)
        return "whole"

    task = app.schedule("x.second", delay=1.0)
    holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    node = Node(app)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the node's claims wait behind it
        held_at = time.monotonic()
        wait_for(lambda: time.monotonic() - held_at > lease + 1.0, timeout=10)  # the fault's duration
        holder.execute("ROLLBACK")
        wait_for(lambda: app.get(task.id).status is Status.COMPLETED)
        (execution,) = app.executions(task.id)
        assert execution.status is ExecutionStatus.COMPLETED and execution.result == "whole"
    finally:
        holder.close()
        node.stop()
        app.close()
