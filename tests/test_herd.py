"""The thundering herd: jitter spreading one slot's dispatch, the queue gauges against a
known state, and a burst of due tasks drained by two nodes exactly once."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import wait_for
from tests.test_worker import FakeClock
from tests.workers import Fleet, read_records
from tickwork import App, Context, ExecutionStatus
from tickwork.metrics import QueueCollector


def test_jitter_spreads_one_cron_slot_over_its_window_without_moving_the_slot(sqlite_url: str) -> None:
    start = datetime(2026, 1, 5, 12, 0, 30, tzinfo=UTC)
    slot = datetime(2026, 1, 5, 12, 1, tzinfo=UTC)
    clock = FakeClock(start)
    app = App(sqlite_url, clock=clock, poll_interval=0.02, heartbeat=0.5, lease=3600)

    @app.task(name="t.tick")
    def tick(ctx: Context) -> None: ...

    tasks = app.schedule_many([{"task": "t.tick", "cron": "* * * * *", "jitter": 10} for _ in range(1000)])
    assert {t.scheduled_at for t in tasks} == {slot}
    worker = app.worker(concurrency=16)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        assert worker.started.wait(10)
        clock.advance(slot - start)
        due_times = [t.next_run_at for t in tasks]
        for _ in range(11):  # second by second through the 10 s jitter window
            clock.advance(timedelta(seconds=1))
            # every run due by now has ended before the clock moves on (not "depth 0 and
            # nothing running": a claim that has committed but not yet handed its runs to
            # the node looks like that too, and its runs would start a second late)
            due = sum(1 for d in due_times if d <= clock.now)
            wait_for(lambda n=due: len(app.executions(status="COMPLETED", limit=10_000)) == n, timeout=20)
    finally:
        worker.stop()
        thread.join(30)
    runs = app.executions(limit=10_000)
    assert len(runs) == 1000 and {r.status for r in runs} == {ExecutionStatus.COMPLETED}
    assert {r.scheduled_for for r in runs} == {slot}  # every run is for the exact slot
    assert all(r.started_at is not None and slot <= r.started_at < slot + timedelta(seconds=11) for r in runs)
    buckets = Counter(int((r.started_at - slot).total_seconds()) for r in runs if r.started_at is not None)
    assert len(buckets) >= 10 and max(buckets.values()) <= 200, buckets  # no second holds over 20 %
    after = app.tasks(limit=10_000)
    assert {t.scheduled_at for t in after} == {slot + timedelta(minutes=1)}  # the next slot, unjittered
    assert all(slot + timedelta(minutes=1) <= t.next_run_at < slot + timedelta(minutes=1, seconds=10) for t in after)
    app.close()


def scrape(collector: QueueCollector) -> dict[str, float]:
    """Each sample by name, and by name{queue} for the labelled ones."""
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            queue = sample.labels.get("queue")
            samples[f"{sample.name}{{{queue}}}" if queue else sample.name] = sample.value
    return samples


def test_queue_gauges_report_a_known_state_per_queue(store_url: str) -> None:
    app = App(store_url)

    @app.task(name="t.job")
    def job(ctx: Context) -> None: ...

    try:
        collector = QueueCollector(lambda: app.store)
        assert scrape(collector) == {
            "tickwork_queue_depth{default}": 0,  # always there, so a query of it finds data
            "tickwork_queue_oldest_age_seconds{default}": 0,
            "tickwork_nodes": 0,
        }
        now = app.store.now()
        app.schedule_many([{"task": "t.job", "at": now - timedelta(seconds=s)} for s in (40, 20, 10)])
        app.schedule("t.job", at=now - timedelta(seconds=5), queue="emails")
        app.schedule("t.job", delay=3600)
        app.store.claim("n1", ["t.job"], 1, 30.0)  # the 40 s one is claimed: no longer queued
        gauges = scrape(collector)
        assert gauges["tickwork_queue_depth{default}"] == 2 and gauges["tickwork_queue_depth{emails}"] == 1
        assert 20 <= gauges["tickwork_queue_oldest_age_seconds{default}"] < 30
        assert 5 <= gauges["tickwork_queue_oldest_age_seconds{emails}"] < 15
        app.pause_queue("emails")  # not claimable: no backlog to scale out for
        assert "tickwork_queue_depth{emails}" not in scrape(collector)
        served = QueueCollector(lambda: app.store, ["emails", "reports"])
        gauges = scrape(served)  # a node's served queues always have a series, 0 when empty
        assert (gauges["tickwork_queue_depth{emails}"], gauges["tickwork_queue_depth{reports}"]) == (0, 0)
        assert gauges["tickwork_queue_depth{default}"] == 2
    finally:
        app.close()


def test_two_nodes_drain_a_burst_of_20000_due_tasks_exactly_once(pg_url: str, records: Path) -> None:
    client = App(pg_url)
    from tests.apps.basic import app as test_app

    for definition in test_app.registry:
        client.registry.add(definition.name, definition.func, definition.options)
    fleet = Fleet(pg_url, records)
    try:
        # Both nodes up first: each claims up to 520 of such tiny runs at a time, and one
        # that started well before the other could otherwise take them all.
        nodes = [fleet.start(concurrency=8) for _ in range(2)]
        wait_for(lambda: len(client.nodes()) == 2, timeout=60)
        due = client.store.now()
        ids: set[int] = set()
        for _ in range(4):
            ids |= {t.id for t in client.schedule_many([{"task": "test.record", "at": due}] * 5000)}
        wait_for(lambda: client.stats().by_status.get("COMPLETED", 0) == 20_000, timeout=120)
        for node in nodes:
            assert node.terminate() == 0, node.output()
        assert client.stats().runs_last_hour == {"COMPLETED": 20_000}  # one execution each, all completed
        recorded = Counter(r["task_id"] for r in read_records(records))
        assert set(recorded) == ids and set(recorded.values()) == {1}
        assert len({r["pid"] for r in read_records(records)}) == 2
    finally:
        fleet.kill_all()
        client.close()
