"""The node's parts, unit-tested: an in-memory store (tests/fake_store.py) and a driven
clock, no database, no node thread started. Each test runs on the test's thread alone
and checks that it leaves no thread behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.driven_clock import DrivenClock
from tests.fake_store import FakeStore
from tickwork.context import Context
from tickwork.model import ExecutionStatus, Kind, Misfire, Overlap, Status
from tickwork.node.outcomes import RunResult, cancelled_result, outcome_for
from tickwork.node.reconciler import reconcile
from tickwork.node.run import TRANSITIONS, CancelReason, IllegalTransition, Run, RunState
from tickwork.node.settings import NodeSettings
from tickwork.node.worker import Worker
from tickwork.registry import Registry, TaskOptions
from tickwork.store.base import NewTask

LEASE = 10.0
SETTINGS = NodeSettings(lease=LEASE, heartbeat=2.0, poll_interval=1.0, shutdown_grace=0.0)


class RecordingStats:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def run_started(self, task: str, late_by: float) -> None:
        self.events.append(("started", task))

    def run_ended(self, task: str, status: str, seconds: float | None, queue: str = "default") -> None:
        self.events.append(("ended", status))

    def stale_write(self, write: str) -> None:
        self.events.append(("stale", write))

    def recovered(self, reason: str, count: int) -> None:
        self.events.append(("recovered", reason))

    def running(self, count: int) -> None:
        self.events.append(("running", count))

    def slots(self, count: int) -> None:
        self.events.append(("slots", count))


@pytest.fixture(autouse=True)
def no_thread_left() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert left == [], f"threads left behind: {left}"


@pytest.fixture
def clock() -> DrivenClock:
    return DrivenClock()


@pytest.fixture
def store(clock: DrivenClock) -> FakeStore:
    return FakeStore(clock=clock.now)


def registry(**options: Any) -> Registry:
    reg = Registry()

    def noop(ctx: Context) -> str:
        return "ok"

    reg.add("t.noop", noop, TaskOptions(**options))
    return reg


def worker(store: FakeStore, clock: DrivenClock, *, concurrency: int = 2, **kwargs: Any) -> Worker:
    return Worker(
        store, kwargs.pop("reg", None) or registry(), SETTINGS, concurrency=concurrency, clock=clock.monotonic, **kwargs
    )


def due(store: FakeStore, clock: DrivenClock, n: int, **fields: Any) -> list[int]:
    when = clock.now() - timedelta(seconds=1)
    kind = Kind.RECURRING if "interval" in fields else Kind.ONE_TIME
    new = [NewTask(name="t.noop", args=[], kwargs={}, kind=kind, scheduled_at=when, next_run_at=when, **fields)]
    return [t.id for t in store.insert_tasks(new * n)]


# -- the Run state machine ---------------------------------------------------------------

PATH_TO = {
    RunState.QUEUED: [],
    RunState.RUNNING: [RunState.RUNNING],
    RunState.RECORDING: [RunState.RUNNING, RunState.RECORDING],
    RunState.DONE: [RunState.RUNNING, RunState.DONE],
    RunState.RELEASED: [RunState.RELEASED],
}


def test_every_allowed_transition_of_a_run_is_taken_and_every_other_refused(
    store: FakeStore, clock: DrivenClock
) -> None:
    due(store, clock, 1)
    [claim] = store.claim("n", ["t.noop"], 1, LEASE)
    definition = registry().get("t.noop")
    assert definition is not None
    for start in RunState:
        for to in RunState:
            run = Run(claim, definition)
            for step in PATH_TO[start]:
                run.advance(step)
            assert run.state is start
            if to in TRANSITIONS[start]:
                run.advance(to)
                assert run.state is to
            else:
                with pytest.raises(IllegalTransition):
                    run.advance(to)
                assert run.state is start  # a refused move changes nothing


def test_start_and_give_back_race_has_exactly_one_winner(store: FakeStore, clock: DrivenClock) -> None:
    due(store, clock, 1)
    [claim] = store.claim("n", ["t.noop"], 1, LEASE)
    definition = registry().get("t.noop")
    assert definition is not None
    run = Run(claim, definition)
    assert run.advance_from(RunState.QUEUED, RunState.RELEASED)
    assert not run.advance_from(RunState.QUEUED, RunState.RUNNING)  # the slot thread comes too late
    assert run.released and not run.started
    with pytest.raises(IllegalTransition):
        run.advance_from(RunState.RECORDING, RunState.QUEUED)


def test_cancel_reasons_map_to_their_results(store: FakeStore, clock: DrivenClock) -> None:
    due(store, clock, 1, timeout=5.0)
    [claim] = store.claim("n", ["t.noop"], 1, LEASE)
    definition = registry().get("t.noop")
    assert definition is not None
    expected = {
        CancelReason.TIMEOUT: (ExecutionStatus.TIMED_OUT, "timeout"),
        CancelReason.MAX_RUNTIME: (ExecutionStatus.TIMED_OUT, "max_runtime"),
        CancelReason.CANCEL: (ExecutionStatus.CANCELLED, "cancelled on request"),
        CancelReason.REPLACED: (ExecutionStatus.CANCELLED, "replaced: the next slot came due"),
        CancelReason.CANCEL_RUN: (ExecutionStatus.CANCELLED, "run cancelled on request; the schedule goes on"),
        CancelReason.LOST: (ExecutionStatus.FAILED, "lost"),
        CancelReason.LOCK_LOST: (ExecutionStatus.FAILED, "lock_lost"),
        CancelReason.SHUTDOWN: (ExecutionStatus.FAILED, "shutdown"),
    }
    assert set(expected) == set(CancelReason)
    for reason, (status, note) in expected.items():
        run = Run(claim, definition)
        run.request_cancel(reason)
        run.request_cancel(CancelReason.CANCEL)  # a later request never changes the first reason
        result = cancelled_result(run)
        assert (result.status, result.note) == (status, note), reason
    run = Run(claim, definition)
    run.request_cancel(CancelReason.SHUTDOWN)
    outcome = outcome_for(run, cancelled_result(run), clock.now())
    assert outcome.attempt == 0 and outcome.task_status is Status.PENDING  # interrupted: due again, no attempt used


# -- dispatch, prefetch, give-back --------------------------------------------------------


def test_a_poll_turn_claims_only_the_free_slots_then_prefetch_adds_more(store: FakeStore, clock: DrivenClock) -> None:
    due(store, clock, 200)
    node = worker(store, clock, concurrency=2)
    assert node.poll_once() is None  # both slots filled: go again at once
    assert node.running == 2 and store.queue_depth()[0] == 198
    assert node.poll_once() == (SETTINGS.poll_interval, True)  # no slot free: sleep until one frees
    assert node.running == 2
    for _ in range(50):  # runs far shorter than a round trip: hold the cap
        node.prefetch.observe_refill(0.01)
        node.prefetch.observe_run(0.0001)
    assert node.prefetch.extra() == 128  # PREFETCH_CAP_PER_SLOT * concurrency
    assert node.poll_once() is None
    assert node.running == 130 and store.queue_depth()[0] == 70
    assert all(run.state is RunState.QUEUED for run in node.runs.runs())  # no slot thread ran any


def test_a_claimed_run_is_run_recorded_and_forgotten(store: FakeStore, clock: DrivenClock) -> None:
    [task_id] = due(store, clock, 1)
    stats = RecordingStats()
    node = worker(store, clock, stats=stats)
    node.poll_once()
    [run] = node.runs.runs()
    node.runner.execute(run)  # on this thread, as a slot thread would
    assert run.state is RunState.RECORDING and node.running == 1  # the slot is held until written
    node.recorder.start()
    node.recorder.stop()
    assert run.state is RunState.DONE and node.running == 0
    assert store.get_task(task_id).status is Status.COMPLETED  # type: ignore[union-attr]
    [execution] = store.list_executions(task_id=task_id)
    assert execution.status is ExecutionStatus.COMPLETED and execution.result == "ok"
    assert ("ended", "COMPLETED") in stats.events and ("running", 0) in stats.events


def test_shutdown_gives_back_claims_that_never_started(store: FakeStore, clock: DrivenClock) -> None:
    ids = due(store, clock, 3)
    node = worker(store, clock, concurrency=3)
    node.poll_once()
    first = node.runs.runs()[0]
    assert first.advance_from(RunState.QUEUED, RunState.RUNNING)  # one run is going on
    assert node.release_unstarted() == 2
    assert node.runs.runs() == [first]
    for task_id in ids:
        task = store.get_task(task_id)
        assert task is not None
        if task_id == first.task_id:
            assert task.status is Status.RUNNING
        else:
            assert (task.status, task.attempt, task.lease_owner) == (Status.PENDING, 0, None)
            assert store.list_executions(task_id=task_id) == []


# -- leases -------------------------------------------------------------------------------


def test_a_heartbeat_renews_every_run_and_an_unrenewed_run_stops_before_its_lease_ends(
    store: FakeStore, clock: DrivenClock
) -> None:
    due(store, clock, 2)
    node = worker(store, clock)
    node.poll_once()
    runs = node.runs.runs()
    clock.advance(3.0)
    node.leases.heartbeat()
    assert all(r.renewed_at == clock.monotonic() for r in runs)
    deadline = node.leases.cancel_unrenewed(clock.monotonic())
    assert deadline == pytest.approx(clock.monotonic() + 0.8 * LEASE)
    clock.advance(0.8 * LEASE - 0.01)  # the store stops answering: no renewal meanwhile
    assert node.leases.cancel_unrenewed(clock.monotonic()) is not None
    assert all(r.cancel_reason is None for r in runs)
    clock.advance(0.02)
    assert node.leases.cancel_unrenewed(clock.monotonic()) is None
    assert all(r.cancel_reason is CancelReason.LOST for r in runs)


def test_a_run_whose_lease_was_taken_over_is_cancelled_and_counted_stale(store: FakeStore, clock: DrivenClock) -> None:
    [task_id] = due(store, clock, 1)
    stats = RecordingStats()
    node = worker(store, clock, stats=stats)
    node.poll_once()
    [run] = node.runs.runs()
    run.advance(RunState.RUNNING)
    clock.advance(LEASE + 1)  # this node froze; another node's reconciler reaps the run
    assert reconcile(store, own=[]) == 1
    node.leases.heartbeat()
    assert run.cancel_reason is CancelReason.LOST
    assert ("stale", "heartbeat") in stats.events
    reaped = store.get_task(task_id)
    assert reaped is not None and (reaped.status, reaped.lost_runs) == (Status.PENDING, 1)  # run again, lost 1/3


def test_a_cancel_request_reaches_the_run_through_its_renewal(store: FakeStore, clock: DrivenClock) -> None:
    [task_id] = due(store, clock, 1)
    node = worker(store, clock)
    node.poll_once()
    [run] = node.runs.runs()
    run.advance(RunState.RUNNING)
    store.cancel(task_id)
    node.leases.heartbeat()
    assert run.cancel_reason is CancelReason.CANCEL and run.cancel_flag.is_set()


# -- timeouts and overlap -------------------------------------------------------------------


def test_the_nearer_of_timeout_and_max_runtime_stops_the_run(store: FakeStore, clock: DrivenClock) -> None:
    due(store, clock, 1, timeout=5.0, max_runtime=3.0)
    node = worker(store, clock)
    node.poll_once()
    [run] = node.runs.runs()
    run.advance(RunState.RUNNING)
    node.runner._set_deadlines(run)
    assert (run.deadline, run.deadline_reason) == (clock.monotonic() + 3.0, CancelReason.MAX_RUNTIME)
    clock.advance(2.9)
    assert node.leases.enforce_timeouts(clock.monotonic()) == pytest.approx(clock.monotonic() + 0.1)
    assert run.cancel_reason is None
    clock.advance(0.1)
    assert node.leases.enforce_timeouts(clock.monotonic()) is None
    assert run.cancel_reason is CancelReason.MAX_RUNTIME
    assert cancelled_result(run).status is ExecutionStatus.TIMED_OUT


def test_overlap_replace_stops_a_run_when_its_next_slot_comes_due(store: FakeStore, clock: DrivenClock) -> None:
    due(store, clock, 1, interval=60.0, overlap=Overlap.REPLACE)
    node = worker(store, clock)
    node.poll_once()
    [run] = node.runs.runs()
    run.advance(RunState.RUNNING)
    node.runner._set_deadlines(run)
    assert run.deadline is None and run.replace_at == pytest.approx(clock.monotonic() + 59.0)
    clock.advance(59.0)
    node.leases.enforce_timeouts(clock.monotonic())
    assert run.cancel_reason is CancelReason.REPLACED
    outcome = outcome_for(run, RunResult(ExecutionStatus.CANCELLED, note="replaced"), clock.now())
    assert outcome.task_status is Status.PENDING  # the schedule goes on


def test_a_queued_run_is_not_timed_out_before_it_starts(store: FakeStore, clock: DrivenClock) -> None:
    due(store, clock, 1, timeout=1.0)
    node = worker(store, clock)
    node.poll_once()
    [run] = node.runs.runs()
    run.deadline = clock.monotonic()  # as if set: a queued run is still not judged
    clock.advance(5.0)
    assert node.leases.enforce_timeouts(clock.monotonic()) is None
    assert run.cancel_reason is None


# -- a bug in one run's handling never strands its slot ------------------------------------


def test_a_skip_whose_outcome_cannot_be_built_is_recorded_failed_and_frees_its_slot(
    store: FakeStore, clock: DrivenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tickwork.node.runner

    def broken(*args: object, **kwargs: object) -> object:
        raise OverflowError("a stored value the policy cannot use")

    monkeypatch.setattr(tickwork.node.runner, "skipped_outcome", broken)
    [task_id] = due(store, clock, 1, interval=60.0, misfire=Misfire.SKIP, misfire_grace=1.0)
    clock.advance(600.0)  # ten slots missed: the policy skips rather than runs
    node = worker(store, clock)
    node.poll_once()
    [run] = node.runs.runs()
    node.runner.execute(run)
    assert run.state is RunState.RECORDING
    node.recorder.start()
    node.recorder.stop()
    assert run.state is RunState.DONE and node.running == 0
    [execution] = store.list_executions(task_id=task_id)
    assert execution.status is ExecutionStatus.FAILED and execution.error is not None
    assert execution.error.type == "OverflowError"


def test_a_slot_thread_survives_a_failing_run(store: FakeStore, clock: DrivenClock) -> None:
    from tickwork.node.slots import RunThreads

    done = threading.Event()
    seen: list[int] = []

    def target(run: Run) -> None:
        seen.append(run.execution_id)
        if len(seen) == 1:
            raise RuntimeError("bug")
        done.set()

    due(store, clock, 2)
    definition = registry().get("t.noop")
    assert definition is not None
    threads = RunThreads(1, target)
    for claim in store.claim("n", ["t.noop"], 2, LEASE):
        threads.submit(Run(claim, definition))
    assert done.wait(5)  # the one thread went on to the second run
    threads.shutdown()
    for thread in [t for t in threading.enumerate() if t.name.startswith("tickwork-run-")]:
        thread.join(5)
    assert len(seen) == 2


def test_a_run_whose_lease_aged_while_it_waited_for_a_slot_is_never_started(
    store: FakeStore, clock: DrivenClock
) -> None:
    """The node was frozen (SIGSTOP, a VM pause) with a run queued: on waking, a slot
    thread may reach it before the monitor does. It must not start: another node may
    own it by now."""
    [task_id] = due(store, clock, 1)
    ran: list[int] = []
    reg = Registry()
    reg.add("t.noop", lambda ctx: ran.append(ctx.task_id), TaskOptions())
    node = worker(store, clock, reg=reg)
    node.poll_once()
    [run] = node.runs.runs()
    clock.advance(0.8 * LEASE + 0.1)  # frozen: no heartbeat, no monitor
    node.runner.execute(run)
    assert ran == [] and run.cancel_reason is CancelReason.LOST
    assert run.state is RunState.DONE and node.running == 0  # dropped: nothing written
    [execution] = store.list_executions(task_id=task_id)
    assert execution.status is ExecutionStatus.RUNNING  # left to the reconciler, which counts it lost


def test_a_queued_run_renewed_by_heartbeats_starts_however_long_it_waited(store: FakeStore, clock: DrivenClock) -> None:
    due(store, clock, 1)
    node = worker(store, clock)
    node.poll_once()
    [run] = node.runs.runs()
    for _ in range(10):  # ten heartbeats' worth of waiting, each renewing it
        clock.advance(SETTINGS.heartbeat)
        node.leases.heartbeat()
    node.runner.execute(run)
    assert run.cancel_reason is None and run.state is RunState.RECORDING


def test_the_queue_is_sampled_twice_a_minute_on_the_reconcilers_thread(store: FakeStore, clock: DrivenClock) -> None:
    from tickwork.node.sampler import SAMPLE_EVERY_S

    due(store, clock, 2)
    node = worker(store, clock)
    sampler = node.reconciler.sampler
    assert sampler is not None and sampler.maybe_sample() is True
    clock.advance(SAMPLE_EVERY_S - 0.1)
    assert sampler.maybe_sample() is False
    clock.advance(0.2)
    assert sampler.maybe_sample() is True
    due(store, clock, 1)
    clock.advance(SAMPLE_EVERY_S)
    assert sampler.maybe_sample() is True
    samples = store.queue_samples(clock.now() - timedelta(minutes=5))
    assert [s.minute.second for s in samples] == [0] * len(samples) and 1 <= len(samples) <= 3
    assert samples[0].depth == 2  # the first sample of its minute is the one kept
    assert len({s.minute for s in samples}) == len(samples)  # one per minute


def test_a_stuck_runs_note_waits_for_its_timeout_to_be_written(
    store: FakeStore, clock: DrivenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeout's end sets the execution's note: a note written before a failed end
    would be overwritten by the end's retry, so it waits for it."""
    [task_id] = due(store, clock, 1, timeout=1.0)
    node = worker(store, clock)
    node.poll_once()
    [run] = node.runs.runs()
    run.advance(RunState.RUNNING)
    run.started_at = clock.now()
    run.request_cancel(CancelReason.TIMEOUT)
    watch = node.leases.stuck
    watch.judge(clock.monotonic())  # the deadline: the execution's end is queued
    clock.advance(2 * SETTINGS.heartbeat)
    watch.judge(clock.monotonic())  # two heartbeats on: reported, its note queued
    assert watch.take_fresh() is True and watch.take_fresh() is False

    def away(*args: object) -> bool:
        raise OSError("the store is away")

    real_end = store.end_execution
    monkeypatch.setattr(store, "end_execution", away)
    watch.write(store)
    [running] = store.list_executions(task_id=task_id)
    assert running.status is ExecutionStatus.RUNNING and running.note is None  # the note waited
    monkeypatch.setattr(store, "end_execution", real_end)
    watch.write(store)
    [ended] = store.list_executions(task_id=task_id)
    assert ended.status is ExecutionStatus.TIMED_OUT
    assert ended.note is not None and ended.note.startswith("timeout; the thread did not stop within 2 heartbeats")
    assert store.get_task(task_id).status is Status.RUNNING  # type: ignore[union-attr]  # until the thread returns
    assert [s.execution_id for s in watch.report(clock.now())] == [run.execution_id]
