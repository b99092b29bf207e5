"""What a node asks the store on sparse work: one claim per due instant, none for a run
that merely ends, while a run that frees a limit or a slot others wait for still makes
the node claim at once (the poll interval is long here: only the wake-ups can start
what the tests wait for)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.test_worker import Node as WorkerNode
from tickwork import App, Context, Status
from tickwork.node.worker import Worker

POLL = 30.0


class CountingStore:
    """The node's store, counting the claims made through it, and those that took work."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.claims = 0
        self.taking = 0

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        self.claims += 1
        got = self._store.claim(*args, **kwargs)
        self.taking += bool(got)
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def counting(worker: Worker) -> CountingStore:
    """Count the claims ``worker`` makes (set before it starts)."""
    store = CountingStore(worker.claimer.store)
    worker.claimer.store = store  # type: ignore[assignment]
    return store


class Node(WorkerNode):
    def __init__(self, app: App, concurrency: int) -> None:
        self.store: CountingStore | None = None
        super().__init__(app, concurrency, prepare=self._count)

    def _count(self, worker: Worker) -> None:
        self.store = counting(worker)

    @property
    def claims(self) -> int:
        assert self.store is not None
        return self.store.claims

    @property
    def taking(self) -> int:
        """Claims that took at least one task."""
        assert self.store is not None
        return self.store.taking


@pytest.fixture
def app(sqlite_url: str) -> Iterator[App]:
    app = App(sqlite_url, lease=5.0, heartbeat=0.5, poll_interval=POLL, shutdown_grace=5.0)
    app.release = threading.Event()  # type: ignore[attr-defined]

    @app.task(name="t.noop")
    def noop(ctx: Context) -> None: ...

    @app.task(name="t.held", max_running=1)
    def held(ctx: Context) -> None:
        assert app.release.wait(20)  # type: ignore[attr-defined]

    @app.task(name="t.slow")
    def slow(ctx: Context) -> None:
        assert app.release.wait(20)  # type: ignore[attr-defined]

    yield app
    app.close()


def done(app: App, ids: list[int]) -> bool:
    return all(app.get(i).status is Status.COMPLETED for i in ids)


def test_sparse_runs_cost_one_claim_per_due_instant_not_one_more_per_finished_run(app: App) -> None:
    n, gap = 30, 0.04
    node = Node(app, concurrency=4)
    try:
        wait_for(lambda: node.claims >= 1)  # the first claim, on start
        before = node.claims
        now = app.store.now()
        items = [{"task": "t.noop", "at": now + timedelta(seconds=0.3 + i * gap)} for i in range(n)]
        ids = [t.id for t in app.schedule_many(items)]  # one wake-up for all
        assert wait_for(lambda: done(app, ids), timeout=20)
        claims = node.claims - before
    finally:
        node.stop()
    # One claim per instant, and one for the news of the schedule (a wake a hair early
    # may cost one more); a claim on every finished run as well would make it about 2 n.
    assert claims <= n * 1.3 + 3, f"{claims} claims for {n} sparse runs"


def test_the_end_of_a_run_that_holds_a_limit_starts_what_the_limit_held_back(app: App) -> None:
    node = Node(app, concurrency=4)
    try:
        first, second = app.schedule("t.held"), app.schedule("t.held")
        assert wait_for(lambda: Status.RUNNING in (app.get(first.id).status, app.get(second.id).status))
        # the other is held back by max_running=1
        app.release.set()  # type: ignore[attr-defined]
        assert wait_for(lambda: done(app, [first.id, second.id]), timeout=10)  # well within POLL
    finally:
        node.stop()


def test_a_slot_freed_on_a_full_node_claims_what_became_due_meanwhile(app: App) -> None:
    node = Node(app, concurrency=1)
    try:
        busy = app.schedule("t.slow")
        assert wait_for(lambda: app.get(busy.id).status is Status.RUNNING)
        waiting = app.schedule("t.noop", at=app.store.now() + timedelta(seconds=0.2))
        assert wait_for(lambda: app.store.now() > waiting.next_run_at + timedelta(seconds=0.2))
        app.release.set()  # type: ignore[attr-defined]
        assert wait_for(lambda: done(app, [busy.id, waiting.id]), timeout=10)  # well within POLL
    finally:
        node.stop()
