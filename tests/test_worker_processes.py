"""Integration tests with real worker processes on one SQLite file (see test_postgres_nodes
for many nodes on PostgreSQL)."""

from __future__ import annotations

import itertools
import signal
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.workers import Fleet, read_records
from tickwork import App, ExecutionStatus, Status


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


def finished(app: App, task_id: int) -> bool:
    return app.get(task_id).status.is_terminal


def test_one_time_task_runs_once_and_completes(client: App, fleet: Fleet, records: Path) -> None:
    task = client.schedule("test.record")
    worker = fleet.start()
    wait_for(lambda: finished(client, task.id))
    assert worker.terminate() == 0, worker.output()
    assert client.get(task.id).status is Status.COMPLETED
    runs = client.executions(task.id)
    assert [e.status for e in runs] == [ExecutionStatus.COMPLETED]
    assert runs[0].fence == 1 and runs[0].attempt == 1 and runs[0].finished_at is not None
    assert [r["task_id"] for r in read_records(records)] == [task.id]


def test_delayed_task_does_not_run_before_its_delay(client: App, fleet: Fleet, records: Path) -> None:
    before = datetime.now(UTC)
    task = client.schedule("test.async_record", delay=1.5)
    assert task.scheduled_at - before >= timedelta(seconds=1.5)
    fleet.start()
    wait_for(lambda: finished(client, task.id))
    [run] = client.executions(task.id)
    assert run.status is ExecutionStatus.COMPLETED and run.result == 1
    assert run.started_at is not None and run.started_at >= task.scheduled_at
    [rec] = read_records(records)
    assert rec["at"] >= task.scheduled_at.timestamp()


def test_recurring_runs_are_exactly_on_their_schedule(client: App, fleet: Fleet) -> None:
    task = client.schedule("test.record", every=0.4)
    fleet.start()
    wait_for(lambda: len(client.executions(task.id, status="COMPLETED")) >= 6)
    runs = sorted(client.executions(task.id, status="COMPLETED"), key=lambda e: e.scheduled_for)
    slots = [e.scheduled_for for e in runs]
    assert slots[0] == task.scheduled_at
    assert all(b - a == timedelta(seconds=0.4) for a, b in itertools.pairwise(slots)), slots
    assert all(e.started_at is not None and e.started_at >= e.scheduled_for for e in runs)
    assert client.get(task.id).status in (Status.PENDING, Status.RUNNING)  # never completes


def test_failing_task_is_retried_with_growing_delays_then_failed(client: App, fleet: Fleet, records: Path) -> None:
    task = client.schedule("test.fail", max_retries=3, retry_backoff=0.2)
    fleet.start()
    wait_for(lambda: finished(client, task.id))
    final = client.get(task.id)
    assert final.status is Status.FAILED and final.last_status is ExecutionStatus.FAILED
    runs = sorted(client.executions(task.id), key=lambda e: e.attempt)
    assert [e.attempt for e in runs] == [1, 2, 3, 4]
    assert all(e.status is ExecutionStatus.FAILED for e in runs)
    assert all(e.error is not None and e.error.type == "RuntimeError" for e in runs)
    assert runs[0].error is not None and "failure on attempt 1" in runs[0].error.message
    for previous, following, backoff in zip(runs[:-1], runs[1:], (0.2, 0.4, 0.8), strict=True):
        assert previous.finished_at is not None and following.started_at is not None
        assert following.started_at - previous.finished_at >= timedelta(seconds=backoff)
    assert len(read_records(records)) == 4


def test_sigterm_lets_running_runs_finish_and_claims_nothing_more(client: App, fleet: Fleet, records: Path) -> None:
    slow = [client.schedule("test.slow", kwargs={"seconds": 1.5}, priority=10) for _ in range(2)]
    waiting = [client.schedule("test.record") for _ in range(10)]
    worker = fleet.start(concurrency=2)
    wait_for(lambda: len([r for r in read_records(records) if r.get("phase") == "start"]) == 2)
    assert worker.terminate() == 0, worker.output()
    for task in slow:
        assert client.get(task.id).status is Status.COMPLETED
        [run] = client.executions(task.id)
        assert run.status is ExecutionStatus.COMPLETED and run.result == "done"
    for task in waiting:
        after = client.get(task.id)
        assert after.status is Status.PENDING and after.attempt == 0 and after.lease_owner is None
        assert client.executions(task.id) == []
    assert client.nodes() == []  # the node removed its row on the way out
    assert "gave back" in worker.output() or "stopped" in worker.output()


def test_four_processes_run_each_of_2000_tasks_exactly_once(client: App, fleet: Fleet, records: Path) -> None:
    tasks = client.schedule_many([{"task": "test.record"} for _ in range(2000)])
    ids = {t.id for t in tasks}
    # No prefetch: each claims only its free slots, so the four race for every batch (with
    # it, a node warmed up on these tiny runs could drain them all before the others start).
    procs = [fleet.start(concurrency=8, args=("--prefetch", "0")) for _ in range(4)]
    wait_for(lambda: len(client.tasks(status="COMPLETED", limit=10_000)) == 2000, timeout=120)
    for p in procs:
        assert p.terminate() == 0, p.output()
    runs = client.executions(limit=10_000)
    per_task = Counter(e.task_id for e in runs)
    assert set(per_task) == ids and set(per_task.values()) == {1}
    assert {e.status for e in runs} == {ExecutionStatus.COMPLETED}
    assert client.tasks(status="RUNNING", limit=10_000) == []
    recorded = Counter(r["task_id"] for r in read_records(records))
    assert set(recorded) == ids and set(recorded.values()) == {1}
    assert len({r["pid"] for r in read_records(records)}) > 1  # the work really was shared


def test_killed_node_run_is_recovered_by_another_node(client: App, fleet: Fleet, records: Path) -> None:
    fast_lease = {"TICKWORK_TEST_LEASE": "1", "TICKWORK_TEST_HEARTBEAT": "0.2"}
    task = client.schedule("test.slow", kwargs={"seconds": 0.5}, retry_backoff=0.1)  # no retries: lost runs rerun
    doomed = fleet.start(env={**fast_lease, "TICKWORK_TEST_GRACE": "0"})
    # The first attempt is killed mid-run; SIGKILL leaves its lease to expire.
    wait_for(lambda: any(r.get("phase") == "start" for r in read_records(records)))
    doomed.kill()
    rescuer = fleet.start(env=fast_lease)
    wait_for(lambda: finished(client, task.id))
    assert rescuer.terminate() == 0, rescuer.output()
    runs = sorted(client.executions(task.id), key=lambda e: e.id)
    assert [(e.attempt, e.status) for e in runs] == [(1, ExecutionStatus.FAILED), (1, ExecutionStatus.COMPLETED)]
    assert runs[0].note is not None and runs[0].note.startswith("lost")
    assert runs[0].error is not None and runs[0].error.type == "LeaseExpired"
    assert client.get(task.id).status is Status.COMPLETED


def test_a_second_signal_exits_at_once(client: App, fleet: Fleet, records: Path) -> None:
    task = client.schedule("test.slow", kwargs={"seconds": 120})
    worker = fleet.start(env={"TICKWORK_TEST_GRACE": "120"})
    wait_for(lambda: any(r.get("phase") == "start" for r in read_records(records)))
    worker.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "stopping" in worker.output())  # the first signal began a graceful stop
    assert worker.proc.poll() is None  # ... which waits for the 120 s run
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(10) == 128 + signal.SIGTERM
    assert client.get(task.id).status is Status.RUNNING  # left to its lease and the reconciler
