"""Many worker processes on one PostgreSQL database."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import psycopg
import pytest

from tests.conftest import wait_for
from tests.workers import Fleet, read_records
from tickwork import App, ExecutionStatus, Status


@pytest.fixture
def db_url(pg_url: str) -> str:
    return pg_url


def count(app: App, status: str) -> int:
    return len(app.tasks(status=status, limit=10_000))


@pytest.mark.parametrize("claim", ["skip_locked", "optimistic"])
def test_four_nodes_run_each_of_10000_tasks_exactly_once(client: App, fleet: Fleet, records: Path, claim: str) -> None:
    """The four nodes are up before the tasks come: each claims up to 1,040 of such tiny
    runs at a time, so three that started first could otherwise take them all."""
    nodes = [fleet.start(concurrency=16, env={"TICKWORK_TEST_CLAIM": claim}) for _ in range(4)]
    wait_for(lambda: len(client.nodes()) == 4, timeout=60)
    ids: set[int] = set()
    for _ in range(2):
        ids |= {t.id for t in client.schedule_many([{"task": "test.record"} for _ in range(5000)])}
    wait_for(lambda: count(client, "COMPLETED") == 10_000, timeout=180)
    for node in nodes:
        assert node.terminate() == 0, node.output()
    runs = client.executions(limit=10_000)
    assert len(runs) == 10_000
    assert Counter(e.task_id for e in runs) == Counter(ids)
    assert {e.status for e in runs} == {ExecutionStatus.COMPLETED}
    assert count(client, "RUNNING") == 0
    recorded = Counter(r["task_id"] for r in read_records(records))
    assert set(recorded) == ids and set(recorded.values()) == {1}
    assert len({r["pid"] for r in read_records(records)}) == 4  # every node took part
    assert all("Traceback" not in node.output() for node in nodes)


def test_a_task_scheduled_now_wakes_idle_nodes_long_before_their_poll(client: App, fleet: Fleet) -> None:
    idle = {"TICKWORK_TEST_POLL": "30"}
    fleet.start(env=idle)
    fleet.start(env=idle)
    first = client.schedule("test.record")
    wait_for(lambda: client.get(first.id).status is Status.COMPLETED, timeout=30)
    wait_for(lambda: len(client.nodes()) == 2)
    # Both nodes now sleep for up to 30 s; only the notification can wake them.
    task = client.schedule("test.record")
    wait_for(lambda: client.get(task.id).status is Status.COMPLETED, timeout=2)
    delayed = client.schedule("test.record", delay=1.0)  # a nearer due time also shortens their sleep
    wait_for(lambda: client.get(delayed.id).status is Status.COMPLETED, timeout=3)
    [run] = client.executions(delayed.id)
    assert run.started_at is not None and run.started_at >= delayed.scheduled_at


def test_dropped_connections_are_reestablished_and_results_written_fenced(
    client: App, fleet: Fleet, records: Path, pg_url: str
) -> None:
    node = fleet.start(env={"TICKWORK_TEST_LEASE": "10", "TICKWORK_TEST_HEARTBEAT": "0.3"})
    slow = client.schedule("test.slow", kwargs={"seconds": 1.5})
    wait_for(lambda: any(r.get("phase") == "start" for r in read_records(records)))
    # What a server restart does to clients: every connection to the database is cut.
    with psycopg.connect(pg_url, autocommit=True) as admin:
        cut = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert cut is not None and cut[0] >= 1
    after = client.schedule("test.record")
    wait_for(lambda: client.get(slow.id).status is Status.COMPLETED and client.get(after.id).status is Status.COMPLETED)
    assert node.proc.poll() is None  # the node lived through it
    [run] = client.executions(slow.id)
    assert run.status is ExecutionStatus.COMPLETED and run.result == "done" and run.attempt == 1
    # Its listening connection was cut too: the log says so, and says when it listens again.
    assert wait_for(lambda: "listening for notifications again after" in node.output(), timeout=10), node.output()
    assert "listening for notifications failed" in node.output()
    assert node.terminate() == 0, node.output()
