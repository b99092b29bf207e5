"""Results of sparse runs share writes: while a node sleeps idle to its next due time,
its recorder holds a result back for up to ``MAX_RESULT_HOLD_S`` (and ``claim_ahead``)
for those of runs ending soon after (``Pacer.result_hold``), but never a result whose
end a limit's waiting tasks need, nor past a due time a result sets, and never while
the node is busy or stopping."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import STORE_KINDS, url_of, wait_for
from tests.fake_store import FakeStore
from tests.test_worker import Node
from tickwork import App, Context, Status
from tickwork.model import ExecutionStatus, Kind, Outcome
from tickwork.node.claims import Claimer
from tickwork.node.health import StoreHealth
from tickwork.node.outcomes import RunResult, outcome_for
from tickwork.node.pacing import MAX_RESULT_HOLD_S, Pacer
from tickwork.node.recorder import Recorder
from tickwork.node.run import Run
from tickwork.node.settings import NodeSettings
from tickwork.node.worker import Worker
from tickwork.store import NewTask
from tickwork.wakeup import Wakeup

NODE = "hold-node"


class CountingFinish(FakeStore):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[int] = []  # outcomes per finish call

    def finish(self, node: str, outcomes: Sequence[Outcome]) -> list[bool]:
        self.writes.append(len(outcomes))
        return super().finish(node, outcomes)


def claimed_runs(store: FakeStore, n: int, **fields: Any) -> list[Run]:
    app = App("sqlite:///unused.db")  # for its registry: its store is never opened

    @app.task(name="t.job")
    def job(ctx: Context) -> None: ...

    now = store.now()
    store.insert_tasks(
        [NewTask(name="t.job", args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=now, next_run_at=now, **fields)] * n
    )
    definition = app.registry.get("t.job")
    assert definition is not None
    return [Run(c, definition) for c in store.claim(NODE, ["t.job"], n, 30.0)]


def ended(run: Run, store: FakeStore) -> Outcome:
    return outcome_for(run, RunResult(ExecutionStatus.COMPLETED), store.now())


def test_a_held_batch_takes_the_results_that_come_within_the_hold() -> None:
    store = CountingFinish()
    runs = claimed_runs(store, 3)
    written, holding = threading.Event(), threading.Event()

    def hold(batch: list[tuple[Run, Outcome]]) -> float:
        holding.set()
        return 5.0

    recorder: Recorder[Run] = Recorder(store, NODE, lambda done: written.set(), hold=hold)
    recorder.start()
    try:
        recorder.submit(runs[0], ended(runs[0], store))
        assert holding.wait(5)  # the first result is taken and held: the others come after it
        for run in runs[1:]:
            recorder.submit(run, ended(run, store))
        recorder.stop()  # the node stopping ends the hold at once
    finally:
        recorder.stop()
    assert store.writes == [3]
    assert written.is_set()


def test_without_a_hold_each_result_is_written_as_it_comes() -> None:
    store = CountingFinish()
    runs = claimed_runs(store, 2)
    recorder: Recorder[Run] = Recorder(store, NODE, lambda done: None)
    recorder.start()
    try:
        for count, run in enumerate(runs, 1):
            recorder.submit(run, ended(run, store))
            assert wait_for(lambda n=count: sum(store.writes) == n, timeout=5)
    finally:
        recorder.stop()
    assert store.writes == [1, 1]


def test_a_hold_ends_when_a_result_that_must_not_wait_joins_it() -> None:
    store = CountingFinish()
    plain, limited = claimed_runs(store, 1)[0], claimed_runs(store, 1, max_running=5)[0]
    recorder: Recorder[Run] = Recorder(
        store, NODE, lambda done: None, hold=lambda batch: 0.0 if any(r.limited for r, _ in batch) else 30.0
    )
    recorder.start()
    try:
        recorder.submit(plain, ended(plain, store))
        recorder.submit(limited, ended(limited, store))
        assert wait_for(lambda: store.writes == [2], timeout=5)  # not 30 s later
    finally:
        recorder.stop()


def test_a_result_that_cannot_end_the_hold_joins_it_without_waking_the_recorder() -> None:
    store = CountingFinish()
    runs = claimed_runs(store, 4)
    asked: list[int] = []  # the batch's size each time the hold is asked

    def hold(batch: list[tuple[Run, Outcome]]) -> float:
        asked.append(len(batch))
        return 30.0

    recorder: Recorder[Run] = Recorder(store, NODE, lambda done: None, hold=hold, urgent=lambda run, o: False)
    recorder.start()
    try:
        recorder.submit(runs[0], ended(runs[0], store))
        assert wait_for(lambda: asked == [1], timeout=5)
        for run in runs[1:]:
            recorder.submit(run, ended(run, store))
        recorder.stop()  # the node stopping ends the hold at once, with what came
    finally:
        recorder.stop()
    assert asked == [1]  # not asked again per result: none could end the hold
    assert store.writes == [4]


def test_an_urgent_result_wakes_the_hold_which_is_asked_again_with_it() -> None:
    store = CountingFinish()
    plain, limited = claimed_runs(store, 2), claimed_runs(store, 1, max_running=5)[0]
    recorder: Recorder[Run] = Recorder(
        store, NODE, lambda done: None,
        hold=lambda batch: 0.0 if any(r.limited for r, _ in batch) else 30.0, urgent=lambda run, o: run.limited,
    )  # fmt: skip
    recorder.start()
    try:
        recorder.submit(plain[0], ended(plain[0], store))
        assert wait_for(lambda: recorder._holding, timeout=5)
        recorder.submit(plain[1], ended(plain[1], store))  # joins without a wake
        recorder.submit(limited, ended(limited, store))  # wakes it: the hold ends now, not in 30 s
        assert wait_for(lambda: store.writes == [3], timeout=5)
    finally:
        recorder.stop()


# -- Pacer.result_hold -------------------------------------------------------------------


@pytest.fixture
def pacer() -> Iterator[tuple[Pacer, FakeStore]]:
    store = FakeStore()
    settings = NodeSettings(claim_ahead=0.05)
    claimer = Claimer(store, NODE, ["t.job"], settings, StoreHealth(30.0))
    yield Pacer(claimer, store, Wakeup(), lambda: 4, 1.0), store
    store.close()


def idle(pacer: Pacer, store: FakeStore) -> None:
    """A claim that left slots idle: the poll loop now sleeps to the next due time."""
    got = pacer.claimer.claim(4)
    assert got is not None and got.claimed < 4
    assert pacer.after_claim(got, 4) is not None


def test_an_idle_node_holds_a_result_for_a_while(pacer: tuple[Pacer, FakeStore]) -> None:
    p, store = pacer
    (run,) = claimed_runs(store, 1)
    batch = [(run, ended(run, store))]
    assert p.result_hold(batch) == 0.0  # no claim yet said the node is idle
    idle(p, store)
    assert p.result_hold(batch) == pytest.approx(min(0.05, MAX_RESULT_HOLD_S))
    p.wait(0)  # awake: deciding what to claim, it may want the slot
    assert p.result_hold(batch) == 0.0


def test_no_hold_for_a_limited_run_or_past_a_due_time_a_result_sets(pacer: tuple[Pacer, FakeStore]) -> None:
    p, store = pacer
    (limited,) = claimed_runs(store, 1, max_running=2)
    (plain,) = claimed_runs(store, 1)
    idle(p, store)
    assert p.result_hold([(limited, ended(limited, store))]) == 0.0
    soon: datetime = store.now() + timedelta(seconds=0.02)
    again = dataclasses.replace(ended(plain, store), task_status=Status.PENDING, next_run_at=soon)
    assert p.result_hold([(plain, again)]) == pytest.approx(0.02, abs=0.003)


def test_only_a_result_that_may_shorten_the_hold_ends_it(pacer: tuple[Pacer, FakeStore]) -> None:
    p, store = pacer
    (limited,) = claimed_runs(store, 1, max_running=2)
    (plain,) = claimed_runs(store, 1)
    done = ended(plain, store)
    again = dataclasses.replace(done, task_status=Status.PENDING, next_run_at=store.now())
    assert p.ends_hold(plain, done)  # the node is not idle: a hold would be 0 now
    idle(p, store)
    assert not p.ends_hold(plain, done)
    assert p.ends_hold(limited, ended(limited, store))
    assert p.ends_hold(plain, again)


# -- nodes --------------------------------------------------------------------------------


@pytest.fixture(params=STORE_KINDS)
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    app = App(url_of(request.param, request, tmp_path), lease=5.0, heartbeat=0.5, poll_interval=30.0)

    @app.task(name="t.job")
    def job(ctx: Context) -> None: ...

    yield app
    app.close()


def test_sparse_runs_on_an_idle_node_share_their_result_writes(app: App) -> None:
    counted: list[int] = []

    def count(worker: Worker) -> None:
        store = worker.recorder.store
        finish = store.finish

        def counting(node: str, outcomes: Sequence[Outcome]) -> list[bool]:
            counted.append(len(outcomes))
            return finish(node, outcomes)

        store.finish = counting  # type: ignore[method-assign]  # this store object only

    node = Node(app, concurrency=8, prepare=count)
    try:
        now = app.store.now()
        # 20 runs 10 ms apart; a claim looks 50 ms ahead and a result waits up to 50 ms
        tasks = app.schedule_many([{"task": "t.job", "at": now + timedelta(seconds=0.5 + i * 0.01)} for i in range(20)])
        assert wait_for(lambda: all(app.get(t.id).status is Status.COMPLETED for t in tasks), timeout=20)
    finally:
        node.stop()
    assert sum(counted) == 20
    assert len(counted) < 15, counted  # one write per run would be 20
