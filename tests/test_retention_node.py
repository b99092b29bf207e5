"""Retention in the App's settings and in the node (tickwork/node/pruner.py): the
Pruner on the in-memory store with driven clocks, and real nodes pruning on their own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.driven_clock import DrivenClock
from tests.fake_store import FakeStore
from tickwork import App, Context, Status
from tickwork.errors import InvalidInput
from tickwork.model import ExecutionStatus, Kind, NewTask, PruneCounts
from tickwork.node import pruner
from tickwork.node.pruner import PRUNE_EVERY_S, Pruner
from tickwork.node.settings import NodeSettings
from tickwork.node.stats import NoStats
from tickwork.schedules import outcome_of

# -- settings ------------------------------------------------------------------------


def test_defaults_keep_thirty_days_and_twenty_runs() -> None:
    settings = App("sqlite:///unused.db").node_settings()
    assert (settings.retention, settings.keep_last) == (timedelta(days=30), 20)


def test_retention_none_keeps_everything_and_seconds_are_accepted() -> None:
    assert App("sqlite:///unused.db", retention=None).node_settings().retention is None
    app = App("sqlite:///unused.db", retention=3600, keep_last=0)
    assert (app.retention, app.node_settings().keep_last) == (timedelta(hours=1), 0)
    app.retention = timedelta(days=7)
    assert app.node_settings().retention == timedelta(days=7)


@pytest.mark.parametrize(
    ("given", "field"),
    [
        (dict(retention=-1), "retention"),
        (dict(retention=timedelta(0)), "retention"),
        (dict(retention="7d"), "retention"),
        (dict(keep_last=-1), "keep_last"),
        (dict(keep_last=2.5), "keep_last"),
        (dict(keep_last=True), "keep_last"),
    ],
)
def test_bad_retention_settings_name_the_field(given: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as e:
        App("sqlite:///unused.db", **given)
    assert e.value.field == field


# -- the Pruner on the fake store --------------------------------------------------------


class Recorder(NoStats):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def pruned(self, kind: str, count: int) -> None:
        self.seen.append((kind, count))


def ended(store: FakeStore, n: int) -> None:
    now = store.now()
    store.insert_tasks(
        [
            NewTask(name=f"t.{i}", args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=now, next_run_at=now)
            for i in range(n)
        ]
    )
    for i in range(n):
        [c] = store.claim("node-a", [f"t.{i}"], 1, 30.0)
        assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [True]


@pytest.fixture
def clocks() -> DrivenClock:
    return DrivenClock()


def make_pruner(store: FakeStore, clocks: DrivenClock, **settings: Any) -> tuple[Pruner, list[tuple[str, int]]]:
    stats = Recorder()
    return Pruner(store, NodeSettings(**settings), stats, clock=clocks.monotonic), stats.seen


def test_prunes_at_once_then_every_half_minute(clocks: DrivenClock) -> None:
    store = FakeStore(clocks.now)
    ended(store, 3)
    p, seen = make_pruner(store, clocks, retention=timedelta(hours=1))
    assert p.maybe_prune() == PruneCounts()  # due at start-up: nothing old yet
    clocks.wall += timedelta(hours=2)  # the rows are old now, but the next pass is not due
    assert p.maybe_prune() == PruneCounts()
    clocks.advance(PRUNE_EVERY_S)
    assert p.maybe_prune() == PruneCounts(executions=3, tasks=3)
    assert seen == [("executions", 3), ("tasks", 3)]
    assert store.list_tasks() == []


def test_retention_none_never_prunes(clocks: DrivenClock) -> None:
    store = FakeStore(clocks.now)
    ended(store, 2)
    clocks.advance(400 * 86400)
    p, seen = make_pruner(store, clocks, retention=None)
    assert p.maybe_prune() == PruneCounts() and seen == []
    assert len(store.list_tasks()) == 2


def test_a_pass_is_bounded_and_a_full_one_comes_back_soon(clocks: DrivenClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pruner, "BATCH_ROWS", 2)
    monkeypatch.setattr(pruner, "PASS_BATCHES", 2)
    store = FakeStore(clocks.now)
    ended(store, 7)
    clocks.advance(2 * 86400)
    p, _ = make_pruner(store, clocks, retention=timedelta(days=1))
    assert p.maybe_prune().tasks == 4  # two batches of two
    assert p.maybe_prune().tasks == 3  # more was left: due again at once
    assert p.maybe_prune() == PruneCounts()  # now on the half-minute rhythm
    assert store.list_tasks() == []


def test_a_failing_store_is_logged_not_raised(clocks: DrivenClock, caplog: pytest.LogCaptureFixture) -> None:
    store = FakeStore(clocks.now)

    def broken(*args: Any, **kwargs: Any) -> PruneCounts:
        raise ConnectionError("store away")

    store.prune = broken  # type: ignore[method-assign]
    p, _ = make_pruner(store, clocks)
    assert p.maybe_prune() == PruneCounts()
    assert "prune pass failed" in caplog.text


# -- real nodes ----------------------------------------------------------------------------


@pytest.fixture
def fast_pruning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pruner, "PRUNE_EVERY_S", 0.1)


@pytest.fixture
def node_app(store_url: str, fast_pruning: None) -> Iterator[App]:
    app = App(
        store_url, lease=2.0, heartbeat=0.1, poll_interval=0.05, shutdown_grace=5.0,
        retention=timedelta(seconds=0.3), keep_last=2,
    )  # fmt: skip

    @app.task(name="retention.noop")
    def noop(ctx: Context) -> None:
        pass

    yield app
    app.close()


def run_node(app: App) -> tuple[threading.Thread, Any]:
    worker = app.worker(concurrency=2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    assert worker.started.wait(10)
    return thread, worker


def history_is_trimmed(app: App, task_id: int) -> bool:
    runs = app.executions(task_id, limit=1000)  # newest first
    ended = [e.finished_at for e in runs[2:] if e.finished_at is not None]
    return not ended or min(ended) > app.store.now() - timedelta(seconds=1.5)


def test_a_node_prunes_on_its_own(node_app: App) -> None:
    app = node_app
    once = [app.schedule("retention.noop") for _ in range(5)]
    recurring = app.schedule("retention.noop", every=timedelta(seconds=0.05))
    thread, worker = run_node(app)
    try:
        wait_for(lambda: all(app.store.get_task(t.id) is None for t in once), timeout=30)
        wait_for(lambda: app.get(recurring.id).run_count >= 60, timeout=60)
        # what is left of its history: the newest keep_last (2), or younger than about
        # the retention (0.3 s) plus a pass or two; never the first of its 60 runs
        wait_for(lambda: history_is_trimmed(app, recurring.id), timeout=30)
        assert app.get(recurring.id).status in (Status.PENDING, Status.RUNNING)
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_prometheus_counts_pruned_rows_by_kind() -> None:
    from prometheus_client import REGISTRY

    from tickwork.metrics import PrometheusStats

    def value(kind: str) -> float:
        return REGISTRY.get_sample_value("tickwork_pruned_rows_total", {"kind": kind}) or 0.0

    before = value("executions"), value("tasks")
    PrometheusStats().pruned("executions", 7)
    PrometheusStats().pruned("tasks", 2)
    assert (value("executions"), value("tasks")) == (before[0] + 7, before[1] + 2)
