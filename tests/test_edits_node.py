"""Edits, retries and the ends of a schedule as a running node lives them, on both stores.

A node runs in a thread of the test process (as in tests/test_worker.py); the tasks
record what each run saw, so each test can tell which definition a run ran under.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.test_worker import Node
from tickwork import App, Context, ExecutionStatus, InvalidInput, InvalidState, Status

LEASE = 5.0


class Seen:
    """What the runs saw, and a gate a blocking run waits on."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.fail_next = True


@pytest.fixture
def app(store_url: str) -> Iterator[App]:
    app = App(store_url, lease=LEASE, heartbeat=0.2, poll_interval=0.05, shutdown_grace=5.0, misfire_grace=600)
    seen = Seen()
    app.seen = seen  # type: ignore[attr-defined]

    @app.task(name="e.record")
    def record(ctx: Context, v: int = 0) -> None:
        seen.runs.append({"task": ctx.task_id, "slot": ctx.scheduled_for, "v": v})

    @app.task(name="e.block")
    def block(ctx: Context, v: int = 0) -> None:
        seen.runs.append({"task": ctx.task_id, "slot": ctx.scheduled_for, "v": v})
        seen.started.set()
        assert seen.release.wait(20)

    @app.task(name="e.flaky")
    def flaky(ctx: Context) -> str:
        seen.runs.append({"task": ctx.task_id, "attempt": ctx.attempt})
        if seen.fail_next:
            seen.fail_next = False
            raise RuntimeError("first run fails")
        return "ok"

    yield app
    seen.release.set()
    app.close()


def seen_of(app: App) -> Seen:
    return app.seen  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def node(app: App) -> Iterator[Node]:
    n = Node(app)
    yield n
    seen_of(app).release.set()
    n.stop()


def test_max_runs_ends_a_recurring_task_completed_after_exactly_that_many_runs(app: App, node: Node) -> None:
    task = app.schedule("e.record", every=0.2, delay=0, max_runs=3)
    wait_for(lambda: app.get(task.id).status is Status.COMPLETED)
    runs = app.executions(task.id)
    assert [r.status for r in runs] == [ExecutionStatus.COMPLETED] * 3
    assert len([r for r in seen_of(app).runs if r["task"] == task.id]) == 3
    assert app.get(task.id).run_count == 3
    assert app.get(task.id).next_fire_times(3) == []


def test_until_takes_no_slot_after_it_and_then_completes(app: App, node: Node) -> None:
    now = app.store.now()
    until = now + timedelta(seconds=1.0)
    task = app.schedule("e.record", every=0.3, delay=0, until=until)
    wait_for(lambda: app.get(task.id).status is Status.COMPLETED)
    slots = [r.scheduled_for for r in app.executions(task.id) if r.status is ExecutionStatus.COMPLETED]
    assert slots, "at least the first slot ran"
    assert all(slot <= until for slot in slots)
    assert len(slots) == 4  # now, +0.3, +0.6, +0.9: the slot at +1.2 is after until


def test_update_of_a_running_task_finishes_the_run_as_claimed_then_takes_the_new_schedule(app: App, node: Node) -> None:
    seen = seen_of(app)
    task = app.schedule("e.block", every=3600, delay=0, kwargs={"v": 1})
    assert seen.started.wait(10)
    running = app.get(task.id)
    assert running.status is Status.RUNNING
    before_edit = app.store.now()
    edited = app.update(task.id, every=1800, kwargs={"v": 2})
    after_edit = app.store.now()
    assert edited.version == running.version  # the run's fence is untouched
    assert edited.replan_at is not None
    assert before_edit + timedelta(seconds=1800) - timedelta(seconds=1) <= edited.replan_at
    assert edited.replan_at <= after_edit + timedelta(seconds=1800) + timedelta(seconds=1)
    seen.release.set()
    wait_for(lambda: app.get(task.id).status is Status.PENDING)
    after = app.get(task.id)
    assert after.scheduled_at == edited.replan_at  # the new schedule's slot, not first slot + 3600 s
    assert after.replan_at is None
    assert after.interval == 1800 and after.kwargs == {"v": 2}
    [run] = app.executions(task.id)
    assert run.status is ExecutionStatus.COMPLETED and seen.runs[0]["v"] == 1  # ran as claimed
    seen.started.clear()
    app.trigger(task.id)
    assert seen.started.wait(10)
    assert seen.runs[-1]["v"] == 2  # the next run has the new arguments


def test_retry_runs_a_failed_task_again_with_a_fresh_attempt_and_its_history_kept(app: App, node: Node) -> None:
    task = app.schedule("e.flaky")
    wait_for(lambda: app.get(task.id).status is Status.FAILED)
    with pytest.raises(InvalidState):
        app.update(task.id, kwargs={})
    retried = app.retry(task.id)
    assert retried.status is Status.PENDING and retried.attempt == 0
    wait_for(lambda: app.get(task.id).status is Status.COMPLETED)
    runs = app.executions(task.id)
    assert [r.status for r in runs] == [ExecutionStatus.COMPLETED, ExecutionStatus.FAILED]  # newest first
    assert [r.attempt for r in runs] == [1, 1]
    with pytest.raises(InvalidState):
        app.retry(task.id)  # COMPLETED: nothing to retry


def test_retry_of_a_cancelled_recurring_task_runs_now_and_keeps_its_schedule(app: App, node: Node) -> None:
    task = app.schedule("e.record", every=3600)
    app.cancel(task.id)
    retried = app.retry(task.id)
    assert retried.status is Status.PENDING and retried.triggered
    slot = retried.scheduled_at
    wait_for(lambda: any(r["task"] == task.id for r in seen_of(app).runs))
    wait_for(lambda: app.get(task.id).status is Status.PENDING and app.get(task.id).run_count == 1)
    after = app.get(task.id)
    assert after.scheduled_at == slot  # the extra run did not consume the next slot
    assert not after.cancel_requested


def test_an_edit_that_ends_the_schedule_completes_a_waiting_task_at_once(app: App) -> None:
    task = app.schedule("e.record", every=60)
    ended = app.update(task.id, until=datetime.now(UTC) + timedelta(seconds=1))
    assert ended.status is Status.COMPLETED
    with pytest.raises(InvalidState):
        app.update(task.id, until=None)  # ended: an edit cannot bring it back (retry cannot either)


def test_replace_needs_a_key_and_a_key_holder_is_replaced_in_place(app: App) -> None:
    with pytest.raises(InvalidInput) as caught:
        app.schedule("e.record", every=60, replace=True)
    assert caught.value.field == "replace"
    first = app.schedule("e.record", every=60, key="k", kwargs={"v": 1})
    same = app.schedule("e.record", every=60, key="k", kwargs={"v": 2})
    assert same.existed and same.id == first.id and same.kwargs == {"v": 1}
    replaced = app.schedule("e.record", every=120, key="k", kwargs={"v": 2}, replace=True)
    assert replaced.existed and replaced.id == first.id and (replaced.kwargs, replaced.interval) == ({"v": 2}, 120)
    with pytest.raises(InvalidInput) as caught:
        app.schedule("e.flaky", every=60, key="k", replace=True)  # another task's key
    assert caught.value.field == "key"
