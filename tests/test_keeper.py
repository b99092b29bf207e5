"""One keeper per group of nodes on PostgreSQL: it alone wakes for due times, calls on
the others when it cannot take what is due, and is replaced when it stops. The poll
interval is long here, so a follower can only start work when it is called on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.test_sparse_claims import counting
from tickwork import App, Context, Status
from tickwork.node.worker import Worker

POLL = 30.0


class AheadStore:
    """A node's store whose clock this node estimates ``ahead`` seconds fast (an offset
    measured under load): its due times come early by that much."""

    def __init__(self, store: Any, ahead: float) -> None:
        self._store, self._ahead = store, timedelta(seconds=ahead)

    def approximate_now(self) -> datetime:
        now: datetime = self._store.approximate_now()
        return now + self._ahead

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class Node:
    def __init__(self, url: str, concurrency: int, release: threading.Event, ahead: float = 0.0) -> None:
        self.app = make_app(url, release)
        self.worker: Worker = self.app.worker(concurrency=concurrency)
        if ahead:
            fast = AheadStore(self.worker.store, ahead)
            self.worker.claimer.store = self.worker.pacer.store = fast  # type: ignore[assignment]
        self.store = counting(self.worker)
        self.thread = threading.Thread(target=self.worker.run, kwargs={"install_signals": False})
        self.thread.start()
        assert self.worker.started.wait(10)

    @property
    def role(self) -> bool | None:
        return self.worker.pacer.role

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive()
        self.app.close()


def make_app(url: str, release: threading.Event) -> App:
    # claim_ahead=0: one claim per due time, which these tests count (claiming a little
    # ahead, which takes close due times together, is tests/test_claim_ahead.py's)
    app = App(url, lease=5.0, heartbeat=0.5, poll_interval=POLL, shutdown_grace=5.0, claim_ahead=0.0)

    @app.task(name="k.noop")
    def noop(ctx: Context) -> None: ...

    @app.task(name="k.blocks")
    def blocks(ctx: Context) -> None:
        assert release.wait(20)

    return app


@pytest.fixture
def nodes(pg_url: str) -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        if node.thread.is_alive():
            node.stop()


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # no run outlives its test


def start(nodes: list[Node], url: str, release: threading.Event, concurrency: int = 4, ahead: float = 0.0) -> Node:
    node = Node(url, concurrency, release, ahead)
    nodes.append(node)
    return node


def test_one_node_keeps_the_due_times_and_the_other_sleeps_through_them(
    pg_url: str, nodes: list[Node], release: threading.Event
) -> None:
    keeper = start(nodes, pg_url, release)
    assert wait_for(lambda: keeper.role is True, timeout=10)
    follower = start(nodes, pg_url, release)
    assert wait_for(lambda: follower.role is False, timeout=10)
    client = make_app(pg_url, release)
    try:
        before = follower.store.claims, keeper.store.claims
        now = client.store.now()
        n = 20
        items = [{"task": "k.noop", "at": now + timedelta(seconds=0.5 + i * 0.05)} for i in range(n)]
        ids = [t.id for t in client.schedule_many(items)]
        assert wait_for(lambda: all(client.get(i).status is Status.COMPLETED for i in ids), timeout=20)
        follower_claims = follower.store.claims - before[0]
        keeper_claims = keeper.store.claims - before[1]
        assert {run.node for i in ids for run in client.executions(i)} == {keeper.worker.node_id}
    finally:
        client.close()
    assert follower_claims <= 2  # the schedule's NOTIFY (news wakes every node), no due time
    assert keeper_claims >= n


def test_a_keeper_that_stops_is_replaced(pg_url: str, nodes: list[Node], release: threading.Event) -> None:
    first = start(nodes, pg_url, release)
    assert wait_for(lambda: first.role is True, timeout=10)
    second = start(nodes, pg_url, release)
    assert wait_for(lambda: second.role is False, timeout=10)
    first.stop()
    assert wait_for(lambda: second.role is True, timeout=10)
    client = make_app(pg_url, release)
    try:
        task = client.schedule("k.noop", at=client.store.now() + timedelta(seconds=0.5))
        assert wait_for(lambda: client.get(task.id).status is Status.COMPLETED, timeout=10)  # well within POLL
    finally:
        client.close()


def busy_keeper_and_follower(
    nodes: list[Node], url: str, release: threading.Event, client: App, *, ahead: float = 0.0
) -> Node:
    """A keeper of one slot, held by a run that waits for ``release``, and a follower
    beside it (returned): what comes due now is the follower's to run."""
    keeper = start(nodes, url, release, concurrency=1, ahead=ahead)
    assert wait_for(lambda: keeper.role is True, timeout=10)
    busy = client.schedule("k.blocks")
    assert wait_for(lambda: client.get(busy.id).status is Status.RUNNING, timeout=10)
    follower = start(nodes, url, release)
    assert wait_for(lambda: follower.role is False, timeout=10)
    return follower


@pytest.mark.parametrize("ahead", [0.0, 0.05], ids=["true clock", "estimate 50 ms fast"])
def test_a_full_keeper_calls_on_the_others_when_a_due_time_passes(
    pg_url: str, nodes: list[Node], release: threading.Event, ahead: float
) -> None:
    """With the keeper's estimate of the store's clock fast, a follower called on as
    soon as that estimate reached the due time would claim before the store saw the
    task due, find nothing and sleep its poll interval: the keeper learns the lag from
    its own claims and waits it out."""
    client = make_app(pg_url, release)
    try:
        follower = busy_keeper_and_follower(nodes, pg_url, release, client, ahead=ahead)
        due = client.schedule("k.noop", at=client.store.now() + timedelta(seconds=0.5))
        assert wait_for(lambda: client.get(due.id).status is Status.COMPLETED, timeout=10)  # well within POLL
        assert [run.node for run in client.executions(due.id)] == [follower.worker.node_id]
    finally:
        release.set()
        client.close()


def test_a_follower_wakes_for_the_due_times_its_own_results_set(
    pg_url: str, nodes: list[Node], release: threading.Event
) -> None:
    """A recurring task run by a follower: its next slot is set by the follower's own
    result, which no NOTIFY announces, so the follower itself wakes for it."""
    client = make_app(pg_url, release)
    try:
        follower = busy_keeper_and_follower(nodes, pg_url, release, client)
        recurring = client.schedule("k.noop", every=0.3)
        assert wait_for(lambda: len(client.executions(recurring.id)) >= 4, timeout=10)  # not one per POLL
        assert {run.node for run in client.executions(recurring.id)} == {follower.worker.node_id}
    finally:
        release.set()
        client.close()


def test_a_keeper_whose_claim_comes_back_full_calls_on_the_others(
    pg_url: str, nodes: list[Node], release: threading.Event
) -> None:
    keeper = start(nodes, pg_url, release, concurrency=2)
    assert wait_for(lambda: keeper.role is True, timeout=10)
    follower = start(nodes, pg_url, release, concurrency=2)
    assert wait_for(lambda: follower.role is False, timeout=10)
    client = make_app(pg_url, release)
    try:
        at = client.store.now() + timedelta(seconds=0.5)
        tasks = client.schedule_many([{"task": "k.blocks", "at": at} for _ in range(6)])

        def running() -> int:
            return sum(client.get(t.id).status is Status.RUNNING for t in tasks)

        assert wait_for(lambda: running() == 4, timeout=10)  # both nodes' slots: the follower was called on
        release.set()
        assert wait_for(lambda: all(client.get(t.id).status is Status.COMPLETED for t in tasks), timeout=20)
    finally:
        release.set()
        client.close()
