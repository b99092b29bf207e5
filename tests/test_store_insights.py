"""The dashboard's insight reads (tickwork/store/insights.py) on every store and the fake:
per task name statistics against hand-computed values, their windows and their bounds,
runs per minute, the runs page's filters and the tasks each node runs.

Runs are made the way nodes make them (insert, claim, finish) with the outcome's
``started_at`` and ``finished_at`` chosen, so every duration and lateness is known."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import FAKE, STORE_KINDS
from tests.fake_store import FakeStore
from tickwork.errors import InvalidInput
from tickwork.model import ExecutionStatus, Kind, Outcome, Status
from tickwork.store import NewTask, Store, open_store
from tickwork.store.insights import grouped

A, B = "insights.a", "insights.b"
C, F, T, X = ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.CANCELLED
ENDS = {C: Status.COMPLETED, F: Status.FAILED, T: Status.FAILED, X: Status.CANCELLED}


@pytest.fixture(params=[*STORE_KINDS, FAKE])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == FAKE:
        s: Store = FakeStore()
    elif request.param == "sqlite":
        s = open_store(f"sqlite:///{tmp_path / 'tickwork.db'}")
    else:
        s = open_store(str(request.getfixturevalue("pg_url")))
    s.migrate()
    yield s
    s.close()


def ran(store: Store, name: str, status: ExecutionStatus, *, ended: datetime, late: float, took: float) -> int:
    """One run of a new one-time task: it started ``late`` s after its slot, took
    ``took`` s and ended at ``ended``. Returns its task id."""
    slot = ended - timedelta(seconds=late + took)
    new = NewTask(name=name, args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=slot, next_run_at=slot)
    [task] = store.insert_tasks([new])
    [claim] = store.claim("node-a", [name], 1, 30.0)
    assert claim.task.id == task.id
    outcome = Outcome(
        task_id=task.id,
        fence=claim.task.version,
        execution_id=claim.execution_id,
        status=status,
        task_status=ENDS[status],
        scheduled_at=slot,
        next_run_at=slot,
        attempt=claim.task.attempt,
        triggered=False,
        finished_at=ended,
        started_at=slot + timedelta(seconds=late),
    )
    assert store.finish("node-a", [outcome]) == [True]
    return task.id


def ago(store: Store, seconds: float) -> datetime:
    return store.now() - timedelta(seconds=seconds)


def history(store: Store) -> dict[str, datetime]:
    """A: five runs in the last hour and one more two hours ago; B: one
    cancelled run in the last hour; and one run still going (counted nowhere)."""
    hour = [(C, 1, 0.5, 900), (F, 2, 0.5, 800), (C, 3, 1, 700), (T, 4, 2, 600), (C, 10, 3, 500)]
    ends = [ago(store, seconds) for *_, seconds in hour]
    for (status, took, late, _), ended in zip(hour, ends, strict=True):
        ran(store, A, status, ended=ended, late=late, took=took)
    ran(store, A, C, ended=ago(store, 2 * 3600), late=5, took=20)
    ran(store, B, X, ended=ago(store, 300), late=0, took=0.25)
    store.insert_tasks(
        [NewTask(name=A, args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=ago(store, 1), next_run_at=ago(store, 1))]
    )
    store.claim("node-b", [A], 1, 30.0)
    return {"newest_success": ends[-1]}


def test_name_stats_over_the_last_hour_match_hand_computed_values(store: Store) -> None:
    known = history(store)
    report = store.task_name_stats(3600, 10_000)
    assert [s.name for s in report.names] == [A, B] and not report.truncated
    a, b = report.names
    assert (a.runs, a.succeeded, a.failed, a.success_rate) == (5, 3, 2, pytest.approx(0.6))
    assert a.last_success == known["newest_success"]
    # durations 1 2 3 4 10: p50 3, p95 at rank 3.8 = 4 + 0.8 * 6; lateness 0.5 0.5 1 2 3
    assert a.p50_duration == pytest.approx(3) and a.p95_duration == pytest.approx(8.8)
    assert a.p50_lateness == pytest.approx(1) and a.p95_lateness == pytest.approx(2.8)
    assert (b.runs, b.succeeded, b.failed, b.success_rate, b.last_success) == (1, 0, 0, 0.0, None)
    assert b.p50_duration == pytest.approx(0.25) and b.p95_duration == pytest.approx(0.25)
    assert b.p50_lateness == pytest.approx(0) and b.p95_lateness == pytest.approx(0)


def test_the_day_window_takes_in_older_runs(store: Store) -> None:
    history(store)
    [a] = store.task_name_stats(86400, 10_000, name=A).names
    assert (a.runs, a.succeeded, a.failed) == (6, 4, 2)
    # durations 1 2 3 4 10 20: rank 2.5 -> 3.5, rank 4.75 -> 17.5; lateness 0.5 0.5 1 2 3 5
    assert a.p50_duration == pytest.approx(3.5) and a.p95_duration == pytest.approx(17.5)
    assert a.p50_lateness == pytest.approx(1.5) and a.p95_lateness == pytest.approx(4.5)
    assert store.task_name_stats(60, 10_000).names == []
    assert store.task_name_stats(86400, 10_000, name="nobody").names == []


def test_name_stats_walk_only_the_newest_executions(store: Store) -> None:
    history(store)
    # The newest two executions: B's cancelled run and A's run still going (not ended).
    report = store.task_name_stats(86400, 2)
    assert [(s.name, s.runs) for s in report.names] == [(B, 1)] and report.truncated
    report = store.task_name_stats(86400, 3)
    assert sorted((s.name, s.runs) for s in report.names) == [(A, 1), (B, 1)]
    for bad in [0, -1, True, 2.5]:
        with pytest.raises(InvalidInput, match="limit"):
            store.task_name_stats(3600, bad)  # type: ignore[arg-type]
    for bad_window in [0, -5, float("nan"), 10**9]:
        with pytest.raises(InvalidInput, match="window_s"):
            store.task_name_stats(bad_window, 10)


def test_throughput_counts_runs_per_minute_by_status(store: Store) -> None:
    for status, seconds in [(C, 30), (C, 40), (F, 50), (C, 150), (T, 2990), (C, 5000)]:
        ran(store, A, status, ended=ago(store, seconds), late=0, took=1)
    flow = store.throughput(3600, 60, 10_000)
    assert flow.buckets == 60 and flow.bucket_s == 60 and not flow.truncated
    assert set(flow.counts) == {"COMPLETED", "FAILED", "TIMED_OUT"}
    assert flow.counts["COMPLETED"][59] == 2 and flow.counts["COMPLETED"][57] == 1
    assert flow.counts["FAILED"][59] == 1 and flow.counts["TIMED_OUT"][10] == 1
    assert sum(map(sum, flow.counts.values())) == 5  # the run ended 5000 s ago is outside
    assert store.throughput(3600, 60, 2).truncated  # the newest two: one in the hour
    with pytest.raises(InvalidInput, match="bucket_s"):
        store.throughput(3600, 0.5, 10)


def test_find_executions_filters_by_name_status_and_slot(store: Store) -> None:
    history(store)
    now = store.now()
    page = store.find_executions(name=A, limit=100)
    assert len(page.runs) == 7 and set(page.names.values()) == {A}
    assert [e.id for e in page.runs] == sorted((e.id for e in page.runs), reverse=True)
    assert {e.status for e in store.find_executions(name=A, status=C).runs} == {C}
    assert len(store.find_executions(name=A, status=C).runs) == 4
    recent = store.find_executions(since=now - timedelta(hours=1))
    assert len(recent.runs) == 7 and B in recent.names.values()
    older = store.find_executions(until=now - timedelta(hours=1))
    assert [page.names[e.task_id] for e in older.runs] == [A] and older.runs[0].status is C
    assert store.find_executions(name="nobody").runs == []
    assert len(store.find_executions(limit=2).runs) == 2
    assert len(store.find_executions(scan=1).runs) == 1
    for bad in [0, -1, True]:
        with pytest.raises(InvalidInput, match="limit"):
            store.find_executions(limit=bad)
        with pytest.raises(InvalidInput, match="scan"):
            store.find_executions(scan=bad)
        with pytest.raises(InvalidInput, match="limit"):
            store.running_tasks(bad)


def test_running_tasks_by_node(store: Store) -> None:
    for name in [A, B, A]:
        store.insert_tasks(
            [
                NewTask(
                    name=name,
                    args=[],
                    kwargs={},
                    kind=Kind.ONE_TIME,
                    scheduled_at=ago(store, 5),
                    next_run_at=ago(store, 5),
                )
            ]
        )
    first = store.claim("node-b", [A], 1, 30.0)
    second = store.claim("node-a", [A, B], 5, 30.0)
    assert len(first) == 1 and len(second) == 2
    running = store.running_tasks(10)
    assert [r.node for r in running] == ["node-a", "node-a", "node-b"]
    assert all(r.started_at is not None and r.attempt == 1 for r in running)
    by_node = grouped(running)
    assert [r.task_id for r in by_node["node-b"]] == [first[0].task.id]
    assert sorted(r.task_id for r in by_node["node-a"]) == sorted(c.task.id for c in second)
    assert len(store.running_tasks(1)) == 1


# -- the queue's depth over time ------------------------------------------------------------


def test_a_minute_keeps_its_first_queue_sample_for_the_whole_cluster(store: Store) -> None:
    now = store.now()
    due = now - timedelta(seconds=30)
    store.insert_tasks([NewTask(name="q", args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=due,
                                next_run_at=due)] * 3)  # fmt: skip
    store.sample_queue()
    store.insert_tasks([NewTask(name="q", args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=due, next_run_at=due)])
    store.sample_queue()  # another node, the same minute: the first sample stays
    samples = store.queue_samples(now - timedelta(minutes=2))
    assert len(samples) in (1, 2)  # two only if the minute turned between the samples
    first = samples[0]
    assert first.depth == 3 and first.oldest_age is not None and 29 <= first.oldest_age < 90
    assert first.minute.second == 0 and first.minute.microsecond == 0 and first.minute.tzinfo is not None
    assert store.queue_samples(now + timedelta(minutes=2)) == []


def test_queue_samples_older_than_a_day_are_forgotten() -> None:
    from tests.driven_clock import DrivenClock

    clock = DrivenClock()
    store = FakeStore(clock=clock.now)
    store.sample_queue()
    clock.advance(25 * 3600)
    store.sample_queue()
    samples = store.queue_samples(clock.now() - timedelta(days=3))
    assert [s.minute for s in samples] == [clock.now().replace(second=0, microsecond=0)]
