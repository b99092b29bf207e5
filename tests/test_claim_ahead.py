"""Claiming a little ahead (``claim_ahead``): a claim takes the plain tasks due within
that many seconds along with the due ones, and each run starts at its due time, never
before. Store level on every store and claim strategy, then nodes: start times, how
many claims sparse work costs, a cancel or a shutdown while a claimed run waits."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import STORE_KINDS, url_of, wait_for
from tests.test_sparse_claims import Node as CountingNode
from tests.test_worker import Node
from tickwork import App, Context, ExecutionStatus, Status
from tickwork.errors import InvalidInput
from tickwork.model import Kind
from tickwork.node.settings import NodeSettings
from tickwork.store import NewTask, Store, open_store

NODE = "ahead-node"


@pytest.fixture(params=[*STORE_KINDS, "postgres-optimistic"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    kind, _, strategy = request.param.partition("-")
    store = open_store(url_of(kind, request, tmp_path), claim=strategy or None)
    store.migrate()
    yield store
    store.close()


def due_in(store: Store, *seconds: float, **fields: Any) -> list[int]:
    now = store.now()
    tasks = [
        NewTask(name="t.job", args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=at, next_run_at=at, **fields)
        for at in (now + timedelta(seconds=s) for s in seconds)
    ]
    return [t.id for t in store.insert_tasks(tasks)]


def test_a_claim_ahead_takes_plain_tasks_due_within_it_and_no_later_ones(any_store: Store) -> None:
    soon, later = due_in(any_store, 5.0, 60.0)
    assert any_store.claim(NODE, ["t.job"], 10, 30.0) == []  # not due: nothing without ahead
    claims = any_store.claim(NODE, ["t.job"], 10, 30.0, ahead=10.0)
    assert [c.task.id for c in claims] == [soon]
    assert any_store.get_task(soon).status is Status.RUNNING
    assert any_store.get_task(later).status is Status.PENDING


def test_a_run_claimed_ahead_is_logged_as_starting_at_its_due_time(any_store: Store) -> None:
    (task_id,) = due_in(any_store, 5.0)
    (claim,) = any_store.claim(NODE, ["t.job"], 10, 30.0, ahead=10.0)
    (run,) = any_store.list_executions(task_id=task_id)
    assert run.status is ExecutionStatus.RUNNING
    assert run.started_at == claim.task.next_run_at  # not the claim's time, before it
    assert run.id == claim.execution_id


def test_tasks_with_a_limit_or_a_priority_are_not_claimed_ahead(any_store: Store) -> None:
    due_in(any_store, 5.0, max_running=1)
    due_in(any_store, 5.0, priority=5)
    assert any_store.claim(NODE, ["t.job"], 10, 30.0, ahead=10.0) == []


def test_recurring_tasks_are_claimed_only_once_due(any_store: Store) -> None:
    at = any_store.now() + timedelta(seconds=5)
    recurring = NewTask(
        name="t.job", args=[], kwargs={}, kind=Kind.RECURRING, scheduled_at=at, next_run_at=at, interval=60.0
    )
    any_store.insert_tasks([recurring])
    assert any_store.claim(NODE, ["t.job"], 10, 30.0, ahead=10.0) == []


def test_due_tasks_come_first_in_a_claim_ahead(any_store: Store) -> None:
    ahead, due = due_in(any_store, 5.0, -1.0)
    claims = any_store.claim(NODE, ["t.job"], 1, 30.0, ahead=10.0)
    assert [c.task.id for c in claims] == [due]
    assert any_store.get_task(ahead).status is Status.PENDING


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), "0.1", True])
def test_a_bad_claim_ahead_is_refused_naming_it(value: Any) -> None:
    with pytest.raises(InvalidInput) as raised:
        App("sqlite:///unused.db", claim_ahead=value)
    assert raised.value.field == "claim_ahead"


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan")])
def test_a_node_refuses_a_bad_claim_ahead_too(value: float) -> None:
    with pytest.raises(InvalidInput) as raised:
        NodeSettings(claim_ahead=value)
    assert raised.value.field == "claim_ahead"


# -- nodes --------------------------------------------------------------------------------


@pytest.fixture(params=STORE_KINDS)
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    app = App(
        url_of(request.param, request, tmp_path), lease=5.0, heartbeat=0.2, poll_interval=30.0,
        shutdown_grace=5.0, claim_ahead=1.0,
    )  # fmt: skip
    app.started_at = {}  # type: ignore[attr-defined]
    app.calls = []  # type: ignore[attr-defined]

    @app.task(name="t.job")
    def job(ctx: Context) -> None:
        app.started_at[ctx.task_id] = app.store.now()  # type: ignore[attr-defined]

    @app.task(name="t.limited", max_running=2)
    def limited(ctx: Context) -> None:
        app.started_at[ctx.task_id] = app.store.now()  # type: ignore[attr-defined]

    @app.task(name="t.never")
    def never(ctx: Context) -> None:
        app.calls.append(ctx.task_id)  # type: ignore[attr-defined]

    yield app
    app.close()


def ended(app: App, *ids: int) -> bool:
    return all(app.get(i).status in (Status.COMPLETED, Status.CANCELLED) for i in ids)


def test_a_node_starts_each_run_claimed_ahead_at_its_due_time_not_before(app: App) -> None:
    node = CountingNode(app, concurrency=8)
    try:
        now = app.store.now()
        items = [{"task": "t.job", "at": now + timedelta(seconds=0.3 + i * 0.05)} for i in range(6)]
        tasks = app.schedule_many(items)
        assert wait_for(lambda: ended(app, *(t.id for t in tasks)), timeout=20)
        claims, taking = node.claims, node.taking
    finally:
        node.stop()
    started: dict[int, datetime] = app.started_at  # type: ignore[attr-defined]
    for task in tasks:
        # the store's clock read in the task, against the due time it set: never early
        assert started[task.id] >= task.next_run_at, (task.id, started[task.id], task.next_run_at)
        (run,) = app.executions(task_id=task.id)
        assert run.started_at is not None and run.started_at >= task.next_run_at
    # six due times 50 ms apart, within one claim's second ahead: one claim took them
    # all; one each would take six. Around it, claims that find nothing: the first on
    # start, on PostgreSQL those of the node's start-up (its listening connection's first
    # notice and its becoming its group's keeper: traced, these can both land before the
    # schedule commits, each then a claim of its own), and one for the two slots the six
    # left free.
    assert taking == 1, f"{taking} claims took the 6 runs due within a second"
    assert claims <= 6, f"{claims} claims for 6 runs due within a second"


def test_tasks_not_claimed_ahead_still_start_on_time_between_those_that_were(app: App) -> None:
    """A claim that took a one-time task ahead did not take a recurring task or one under
    a limit due before it: the node still wakes for those (the poll interval is 30 s
    here: only its sleep to their due times can start them)."""
    node = Node(app, concurrency=8)
    try:
        now = app.store.now()
        first = app.schedule("t.job", at=now + timedelta(seconds=0.4))
        limited = app.schedule("t.limited", at=now + timedelta(seconds=0.5))
        recurring = app.schedule("t.job", every=3600, at=now + timedelta(seconds=0.6))
        last = app.schedule("t.job", at=now + timedelta(seconds=0.7))
        started: dict[int, datetime] = app.started_at  # type: ignore[attr-defined]
        wanted = (first, limited, recurring, last)
        assert wait_for(lambda: all(t.id in started for t in wanted), timeout=10)
    finally:
        node.stop()
    for task in wanted:
        late = (started[task.id] - task.next_run_at).total_seconds()
        assert 0 <= late < 2.0, (task.name, late)


def test_a_cancel_while_a_run_waits_for_its_due_time_ends_it_unrun(app: App) -> None:
    node = Node(app, concurrency=4)
    try:
        now = app.store.now()
        # the first, due now, wakes the node; the claim takes the second ahead of time
        first = app.schedule("t.job")
        waiting = app.schedule("t.never", at=now + timedelta(seconds=0.9))
        assert wait_for(lambda: app.get(waiting.id).status is Status.RUNNING, timeout=5)
        assert app.store.now() < waiting.next_run_at  # claimed ahead: it has not started
        app.cancel(waiting.id)
        assert wait_for(lambda: ended(app, first.id, waiting.id), timeout=10)
    finally:
        node.stop()
    assert app.get(waiting.id).status is Status.CANCELLED
    assert app.calls == []  # type: ignore[attr-defined]
    (run,) = app.executions(task_id=waiting.id)
    assert run.status is ExecutionStatus.CANCELLED
    # it never started: no start after its end (the claim logged its due time as its start)
    assert run.started_at is not None and run.finished_at is not None and run.started_at <= run.finished_at


def test_a_run_waiting_for_its_due_time_is_given_back_at_shutdown(app: App) -> None:
    node = Node(app, concurrency=4)
    stopped = False
    try:
        now = app.store.now()
        first = app.schedule("t.job")
        waiting = app.schedule("t.never", at=now + timedelta(seconds=0.9))
        assert wait_for(lambda: app.get(waiting.id).status is Status.RUNNING, timeout=5)
        assert wait_for(lambda: ended(app, first.id), timeout=10)
        stopper = threading.Thread(target=node.stop)
        stopper.start()
        stopper.join(10)
        stopped = not stopper.is_alive()
    finally:
        if not stopped:
            node.stop()
    assert stopped
    after = app.get(waiting.id)
    assert after.status is Status.PENDING and after.attempt == 0  # given back, not run
    assert app.calls == []  # type: ignore[attr-defined]
