"""Thread tasks that do not stop when asked (issue 16): a node in a thread of the test
process, on each store, with a task that ignores ``ctx.cancelled`` until the test lets
it go. A timeout ends the run's execution TIMED_OUT at its deadline; a run still going
two heartbeats after a cancel or timeout is reported in the log, its note and the
node's row; the task stays RUNNING and its slot busy until the thread returns, so no
second copy of it can start meanwhile."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from markupsafe import escape

from tests.conftest import wait_for
from tests.http_support import AUTH, EVIL_NAME, TOKEN, client_of
from tests.test_worker import Node as ThreadNode
from tickwork import App, Context, ExecutionStatus, Status
from tickwork.model import ErrorInfo, Kind, Node, StuckRun
from tickwork.node.stuck import STUCK_HEARTBEATS
from tickwork.schedules import outcome_of
from tickwork.store import NewTask, Store
from tickwork.web.auth import LOGIN_COOKIE

HEARTBEAT = 0.2
ADVICE = 'use isolation="process"'


class Stubborn:
    """A task body that ignores cancellation until ``release`` is set."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

    def __call__(self, ctx: Context) -> str:
        self.started.set()
        self.release.wait(60)  # blocked in a call that never looks at ctx.cancelled
        self.returned.set()
        return "late"


@pytest.fixture
def stubborn() -> Stubborn:
    return Stubborn()


@pytest.fixture
def app(store_url: str, stubborn: Stubborn) -> Iterator[App]:
    app = App(store_url, lease=2.0, heartbeat=HEARTBEAT, poll_interval=0.05, shutdown_grace=5.0)
    app.task(name="t.stubborn")(stubborn)

    @app.task(name="t.quick")
    def quick(ctx: Context) -> str:
        return "quick"

    @app.task(name="t.cooperative")
    def cooperative(ctx: Context) -> None:
        while not ctx.cancelled:
            time.sleep(0.01)  # the task's own work loop

    yield app
    stubborn.release.set()
    app.close()


def stuck_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The stuck-run reports (the run's own ended line quotes its note too)."""
    return [r.getMessage() for r in caplog.records if r.module == "stuck" and "did not stop within" in r.getMessage()]


def test_a_timeout_ends_the_execution_at_its_deadline_and_the_task_waits_for_the_thread(
    app: App, stubborn: Stubborn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tickwork")
    node = ThreadNode(app, concurrency=1)
    try:
        task = app.schedule("t.stubborn", timeout=0.3)
        assert stubborn.started.wait(10)
        # The execution ends TIMED_OUT at the deadline, while the thread is still blocked...
        wait_for(lambda: [e for e in app.executions(task.id) if e.status is ExecutionStatus.TIMED_OUT], timeout=10)
        seen = app.store.now()
        assert not stubborn.returned.is_set()
        [run] = app.executions(task.id)
        assert run.started_at is not None and run.finished_at is not None and run.error is not None
        # Not before the deadline, and stamped when the monitor judged it (already past by
        # the time it was seen), not when the thread lets go (it has not yet).
        assert run.started_at + timedelta(seconds=0.3) <= run.finished_at <= seen
        assert "timeout of 0.3 s" in run.error.message
        # ... and the task stays RUNNING under this node, its slot busy: no second copy can start.
        assert app.get(task.id).status is Status.RUNNING
        other = app.schedule("t.quick")
        assert node.worker.running == 1
        # Two heartbeats on: reported in the log, the run's note and the node's row.
        wait_for(lambda: stuck_warnings(caplog), timeout=10)
        [warning] = stuck_warnings(caplog)
        assert f"execution {run.id}" in warning and ADVICE in warning and "of its timeout" in warning
        wait_for(lambda: ADVICE in (app.executions(task.id)[0].note or ""), timeout=10)
        wait_for(lambda: [s.execution_id for n in app.nodes() for s in n.stuck] == [run.id], timeout=10)
        [row] = app.nodes()
        assert row.running == 1 and row.stuck[0].task_name == "t.stubborn" and row.stuck[0].reason == "timeout"
        assert app.get(other.id).status is Status.PENDING  # never claimed into the stuck slot
        assert app.get(task.id).status is Status.RUNNING
        stubborn.release.set()
        # The thread returns: the task moves on (no retries: FAILED), the slot is free.
        wait_for(lambda: app.get(other.id).status is Status.COMPLETED, timeout=10)
        wait_for(lambda: app.get(task.id).status is Status.FAILED, timeout=10)
        [after] = app.executions(task.id)
        assert (after.status, after.finished_at, after.result) == (ExecutionStatus.TIMED_OUT, run.finished_at, None)
        assert (
            after.note is not None
            and after.note.startswith("timeout; the thread did not stop")
            and ADVICE in after.note
        )
        assert app.get(task.id).last_status is ExecutionStatus.TIMED_OUT
        wait_for(lambda: all(not n.stuck for n in app.nodes()), timeout=10)
        assert any("its thread returned" in r.getMessage() for r in caplog.records)
    finally:
        stubborn.release.set()
        node.stop()


def test_a_cancel_the_thread_ignores_is_reported_and_the_task_ends_when_the_thread_does(
    app: App, stubborn: Stubborn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tickwork")
    node = ThreadNode(app, concurrency=2)
    try:
        task = app.schedule("t.stubborn")
        assert stubborn.started.wait(10)
        asked = time.monotonic()
        app.cancel(task.id)
        wait_for(lambda: stuck_warnings(caplog), timeout=10)
        assert time.monotonic() - asked >= STUCK_HEARTBEATS * HEARTBEAT - 0.05  # given its two heartbeats
        assert "of its cancel" in stuck_warnings(caplog)[0]
        wait_for(lambda: ADVICE in (app.executions(task.id)[0].note or ""), timeout=10)
        [run] = app.executions(task.id)
        assert run.status is ExecutionStatus.RUNNING  # it is: nothing pretends otherwise
        assert app.get(task.id).status is Status.RUNNING and app.get(task.id).cancel_requested
        assert node.worker.running == 1  # one slot busy with the stuck thread, one free
        quick = app.schedule("t.quick")
        wait_for(lambda: app.get(quick.id).status is Status.COMPLETED, timeout=10)
        stubborn.release.set()
        wait_for(lambda: app.get(task.id).status is Status.CANCELLED, timeout=10)
        [ended] = app.executions(task.id)
        assert ended.status is ExecutionStatus.CANCELLED and ended.result is None
        assert ended.note is not None and "cancelled on request" in ended.note and ADVICE in ended.note
        assert len(stuck_warnings(caplog)) == 1
    finally:
        stubborn.release.set()
        node.stop()


def test_a_thread_that_stops_when_asked_is_never_reported(app: App, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tickwork")
    node = ThreadNode(app, concurrency=1)
    try:
        task = app.schedule("t.cooperative", timeout=0.2)
        wait_for(lambda: app.get(task.id).status is Status.FAILED, timeout=10)
        assert [e.status for e in app.executions(task.id)] == [ExecutionStatus.TIMED_OUT]
        quick = app.schedule("t.quick")
        wait_for(lambda: app.get(quick.id).status is Status.COMPLETED, timeout=10)
        # The run is gone from the node: nothing is left to report.
        wait_for(lambda: not node.worker.runs.runs(), timeout=10)
        assert stuck_warnings(caplog) == []
        assert all(not n.stuck for n in app.nodes())
        assert "thread" not in (app.executions(task.id)[0].note or "")
    finally:
        node.stop()


# -- where an operator sees them: the node's row, the API and the nodes page -------------


def test_the_node_row_carries_its_stuck_runs_and_an_execution_takes_a_later_note(store: Store) -> None:
    now = store.now()
    store.register_node(Node("node-a", "host", 1, now, now, 4, 0))
    stuck = StuckRun(7, 70, EVIL_NAME, "timeout", now)
    store.node_heartbeat("node-a", 2, [stuck])
    [row] = store.list_nodes()
    assert (row.running, row.stuck) == (2, (stuck,))
    assert row.to_dict()["stuck"][0]["task_name"] == EVIL_NAME
    store.node_heartbeat("node-a", 1)
    assert store.list_nodes()[0].stuck == ()
    [task] = store.insert_tasks([NewTask(name="t", args=[], kwargs={}, kind=Kind.ONE_TIME,
                                         scheduled_at=now, next_run_at=now)])  # fmt: skip
    [claim] = store.claim("node-a", ["t"], 1, 30.0)
    error = ErrorInfo("TimeoutError", "run exceeded its timeout of 1 s")
    stale = dataclasses.replace(claim, task=dataclasses.replace(claim.task, version=claim.fence + 1))
    assert store.end_execution("node-b", claim, ExecutionStatus.TIMED_OUT, now, error, "timeout") is False
    assert store.end_execution("node-a", stale, ExecutionStatus.TIMED_OUT, now, error, "timeout") is False
    assert store.list_executions(task_id=task.id)[0].status is ExecutionStatus.RUNNING  # fenced: untouched
    assert store.end_execution("node-a", claim, ExecutionStatus.TIMED_OUT, now, error, "timeout") is True
    assert store.end_execution("node-a", claim, ExecutionStatus.TIMED_OUT, now, error, "again") is False  # once
    assert store.get_task(task.id).status is Status.RUNNING  # type: ignore[union-attr]  # the task waits
    store.note_execution(claim.task.id, claim.execution_id, "first \udcff")  # a lone surrogate is cleaned, not refused
    store.note_execution(claim.task.id, claim.execution_id, "second")
    [run] = store.list_executions(task_id=task.id)
    assert run.note is not None and run.note == "timeout; first \\udcff; second"  # cleaned as every text
    assert run.status is ExecutionStatus.TIMED_OUT and run.error == error
    finished = outcome_of(claim, ExecutionStatus.TIMED_OUT, store.now(), error=error, note="late")
    assert store.finish("node-a", [finished]) == [True]  # the task moves on; the row stays as ended
    [kept] = store.list_executions(task_id=task.id)
    assert (kept.note, kept.finished_at) == (run.note, run.finished_at)


def test_the_api_and_the_nodes_page_show_stuck_threads(web_app: App) -> None:
    store = web_app.store
    now = store.now()
    store.register_node(Node("node-a", "host", 1, now, now, 4, 0))
    store.node_heartbeat("node-a", 1, [StuckRun(7, 70, EVIL_NAME, "cancel", now)])
    with client_of(web_app, token=TOKEN) as client:
        [node] = client.get("/api/v1/nodes", headers=AUTH).json()["items"]
        assert node["stuck"] == [
            {
                "task_id": 7,
                "execution_id": 70,
                "task_name": EVIL_NAME,
                "reason": "cancel",
                "since": node["stuck"][0]["since"],
            }
        ]
        client.get("/login")
        nonce = client.cookies.get(LOGIN_COOKIE)
        client.post("/login", data={"token": TOKEN, "csrf": nonce, "next": "/"}, follow_redirects=False)
        page = client.get("/nodes").text
    row = page.split('<tr data-node="node-a">', 1)[1].split("</tr>", 1)[0]
    assert 'data-stuck="70"' in row and "stuck thread" in row and "(cancel)" in row
    assert str(escape(EVIL_NAME)) in row and EVIL_NAME not in page  # markup shown as text
    assert 'isolation="process"' in page
