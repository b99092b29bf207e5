"""A node in a thread of the test process: cancellation, timeouts, leases, shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import wait_for
from tickwork import App, Context, ExecutionStatus, InvalidState, Status
from tickwork.node.slots import Prefetch
from tickwork.node.worker import Worker


class Node:
    def __init__(self, app: App, concurrency: int = 4, prepare: Callable[[Worker], None] | None = None) -> None:
        self.worker = app.worker(concurrency=concurrency)
        if prepare is not None:
            prepare(self.worker)  # before any of its threads starts
        self.thread = threading.Thread(target=self.worker.run, kwargs={"install_signals": False})
        self.thread.start()
        assert self.worker.started.wait(10)

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive()


@pytest.fixture
def app(sqlite_url: str) -> Iterator[App]:
    app = App(sqlite_url, lease=2.0, heartbeat=0.1, poll_interval=0.1, shutdown_grace=5.0)
    app.gate = threading.Event()  # type: ignore[attr-defined]
    app.seen = []  # type: ignore[attr-defined]

    @app.task(name="t.cooperative")
    def cooperative(ctx: Context) -> str:
        app.gate.set()  # type: ignore[attr-defined]
        while not ctx.cancelled:
            time.sleep(0.01)  # the task's own work loop
        return "saw cancel"

    @app.task(name="t.raises_when_cancelled")
    def raising(ctx: Context) -> None:
        app.gate.set()  # type: ignore[attr-defined]
        while True:
            ctx.raise_if_cancelled()
            time.sleep(0.01)

    @app.task(name="t.async_forever")
    async def forever(ctx: Context) -> None:
        app.gate.set()  # type: ignore[attr-defined]
        await asyncio.Event().wait()

    @app.task(name="t.record")
    def record(ctx: Context) -> None:
        app.seen.append((ctx.task_id, ctx.scheduled_for, ctx.attempt, ctx.fence))  # type: ignore[attr-defined]

    @app.task(name="t.outlives_lease")
    def outlives_lease(ctx: Context, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.01)
        return "ok"

    yield app
    app.close()


def test_cancel_of_a_running_thread_task_is_cooperative_and_ends_cancelled(app: App) -> None:
    node = Node(app)
    task = app.schedule("t.cooperative")
    assert app.gate.wait(10)  # type: ignore[attr-defined]
    assert app.cancel(task.id).status is Status.RUNNING  # asked, not yet stopped
    wait_for(lambda: app.get(task.id).status is Status.CANCELLED)
    node.stop()
    [run] = app.executions(task.id)
    # It returned normally after seeing ctx.cancelled, and still ends CANCELLED.
    assert run.status is ExecutionStatus.CANCELLED and run.result is None


def test_raise_if_cancelled_ends_the_run_cancelled(app: App) -> None:
    node = Node(app)
    task = app.schedule("t.raises_when_cancelled", max_retries=3)
    assert app.gate.wait(10)  # type: ignore[attr-defined]
    app.cancel(task.id)
    wait_for(lambda: app.get(task.id).status is Status.CANCELLED)
    node.stop()
    assert [e.status for e in app.executions(task.id)] == [ExecutionStatus.CANCELLED]  # no retry


def test_cancel_of_a_running_async_task_cancels_its_asyncio_task(app: App) -> None:
    node = Node(app)
    task = app.schedule("t.async_forever")
    assert app.gate.wait(10)  # type: ignore[attr-defined]
    app.cancel(task.id)
    wait_for(lambda: app.get(task.id).status is Status.CANCELLED)
    node.stop()
    assert [e.status for e in app.executions(task.id)] == [ExecutionStatus.CANCELLED]


@pytest.mark.parametrize("name", ["t.cooperative", "t.async_forever"])
def test_timeout_cancels_the_run_and_records_timed_out_then_retries(app: App, name: str) -> None:
    node = Node(app)
    task = app.schedule(name, timeout=0.2, max_retries=1, retry_backoff=0.05)
    wait_for(lambda: app.get(task.id).status is Status.FAILED)
    node.stop()
    runs = sorted(app.executions(task.id), key=lambda e: e.attempt)
    assert [(e.attempt, e.status) for e in runs] == [(1, ExecutionStatus.TIMED_OUT), (2, ExecutionStatus.TIMED_OUT)]
    assert all(e.error is not None and "timeout" in e.error.message for e in runs)


def test_heartbeats_keep_a_run_longer_than_its_lease(app: App) -> None:
    node = Node(app)
    task = app.schedule("t.outlives_lease", kwargs={"seconds": 3 * app.lease / 2})
    wait_for(lambda: app.get(task.id).status.is_terminal)
    node.stop()
    [run] = app.executions(task.id)
    assert run.status is ExecutionStatus.COMPLETED and run.result == "ok"


def test_trigger_runs_a_recurring_task_now_without_consuming_its_slot(app: App) -> None:
    node = Node(app)
    task = app.schedule("t.record", every=3600)
    triggered = app.trigger(task.id)
    assert triggered.triggered and triggered.scheduled_at == task.scheduled_at
    wait_for(lambda: app.get(task.id).run_count == 1)
    node.stop()
    after = app.get(task.id)
    assert after.status is Status.PENDING and not after.triggered
    assert after.scheduled_at == task.scheduled_at  # the nominal slot is still ahead
    [(_, scheduled_for, _, _)] = app.seen  # type: ignore[attr-defined]
    assert scheduled_for == triggered.next_run_at and scheduled_for < task.scheduled_at


def test_context_carries_slot_attempt_and_fence(app: App) -> None:
    node = Node(app)
    task = app.schedule("t.record", delay=0.2)
    wait_for(lambda: app.get(task.id).status is Status.COMPLETED)
    node.stop()
    [(task_id, scheduled_for, attempt, fence)] = app.seen  # type: ignore[attr-defined]
    assert (task_id, scheduled_for, attempt) == (task.id, task.scheduled_at, 1)
    assert fence == app.get(task.id).version == task.version + 1


def test_shutdown_gives_back_claims_that_never_started(app: App) -> None:
    """Claims queued behind busy slots are released, not left to lease expiry."""
    worker = app.worker(concurrency=1)
    tasks = [app.schedule("t.record") for _ in range(3)]
    claims = app.store.claim(worker.node_id, worker.names, 3, app.lease)
    assert len(claims) == 3
    # Queue them as the poll loop would, without a pool thread having started any.
    from tickwork.node.run import Run

    for claim in claims:
        definition = app.registry.get(claim.task.name)
        assert definition is not None
        worker.runs.add_all([Run(claim, definition)])
    worker.release_unstarted()
    assert worker.running == 0
    for task in tasks:
        after = app.get(task.id)
        assert (after.status, after.attempt, after.lease_owner) == (Status.PENDING, 0, None)
        assert app.executions(task.id) == []
    worker.slots.shutdown()


def test_node_row_is_registered_while_running_and_removed_after(app: App) -> None:
    node = Node(app, concurrency=3)
    [row] = app.nodes()
    assert row.id == node.worker.node_id and row.capacity == 3
    node.stop()
    assert app.nodes() == []


def test_wakes_at_once_when_this_process_schedules(sqlite_url: str) -> None:
    """A long poll interval does not delay a task scheduled in the node's own process."""
    app = App(sqlite_url, poll_interval=30.0, heartbeat=0.5, lease=5.0)
    done = threading.Event()

    @app.task(name="t.flag")
    def flag(ctx: Context) -> None:
        done.set()

    node = Node(app)
    wait_for(lambda: app.nodes())
    app.schedule("t.flag")
    assert done.wait(10)  # far below the 30 s poll interval
    node.stop()
    app.close()


class FakeClock:
    """A clock the test moves by hand; the store and the node both read it."""

    def __init__(self, start: datetime) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self.now += delta


def test_cron_runs_land_exactly_on_their_slots_in_the_task_zone(sqlite_url: str) -> None:
    # 2024-03-31 is spring-forward day in Berlin: 02:00 local does not exist.
    clock = FakeClock(datetime(2024, 3, 30, 23, 50, tzinfo=UTC))
    app = App(sqlite_url, clock=clock, poll_interval=0.05, heartbeat=0.5, lease=3600)
    slots: list[datetime] = []

    @app.task(name="t.slot")
    def slot(ctx: Context) -> None:
        slots.append(ctx.scheduled_for)

    task = app.schedule("t.slot", cron="0 * * * *", timezone="Europe/Berlin")
    node = Node(app)
    for expected_runs in range(1, 7):
        clock.advance(timedelta(minutes=60))
        wait_for(lambda n=expected_runs: app.get(task.id).run_count == n and app.get(task.id).status is Status.PENDING)
    node.stop()
    app.close()
    local = [s.astimezone(ZoneInfo("Europe/Berlin")) for s in slots]
    # every run is for a whole local hour, one hour apart in real time; 02:00 never exists
    assert all((t.minute, t.second, t.microsecond) == (0, 0, 0) for t in local)
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(slots))
    assert [t.hour for t in local] == [1, 3, 4, 5, 6, 7]


def test_a_result_that_is_not_json_costs_only_that_result(app: App) -> None:
    @app.task(name="t.bad_result")
    def bad_result(ctx: Context) -> dict[object, str]:
        return {1: "a", "b": "c"}

    node = Node(app)
    bad = app.schedule("t.bad_result")
    good = [app.schedule("t.record") for _ in range(5)]
    wait_for(lambda: all(app.get(t.id).status is Status.COMPLETED for t in [bad, *good]))
    node.stop()
    [run] = app.executions(bad.id)
    assert run.status is ExecutionStatus.COMPLETED and run.result is None
    assert run.note is not None and "result not stored" in run.note and "keys must be strings" in run.note
    assert all(e.status is ExecutionStatus.COMPLETED for t in good for e in app.executions(t.id))


def test_claim_failures_back_off_instead_of_spinning(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []

    def failing_claim(*args: object, **kwargs: object) -> list[object]:
        calls.append(time.monotonic())
        raise OSError("database unavailable")

    app.schedule("t.record")  # always due: a spinning loop would call claim back to back
    node = Node.__new__(Node)
    node.worker = app.worker(concurrency=2)
    monkeypatch.setattr(node.worker.store, "claim", failing_claim)
    node.thread = threading.Thread(target=node.worker.run, kwargs={"install_signals": False})
    node.thread.start()
    wait_for(lambda: len(calls) >= 4)
    node.stop()
    gaps = [b - a for a, b in itertools.pairwise(calls[:4])]
    # the pause grows with each failure in a row: poll_interval x 1, 2, 3
    assert all(gap >= app.poll_interval * n for n, gap in enumerate(gaps, start=1)), gaps


def test_an_undecodable_row_is_failed_and_does_not_block_the_others(app: App) -> None:
    import sqlite3

    poisoned = app.schedule("t.record")
    healthy = [app.schedule("t.record") for _ in range(3)]
    raw = sqlite3.connect(app.url.removeprefix("sqlite:///"))
    raw.execute("UPDATE tickwork_tasks SET misfire = 'FROM_THE_FUTURE' WHERE id = ?", (poisoned.id,))
    raw.commit()
    raw.close()
    node = Node(app)
    wait_for(lambda: all(app.get(t.id).status is Status.COMPLETED for t in healthy))
    node.stop()
    with pytest.raises(ValueError):  # still undecodable, but no longer in line to be claimed
        app.get(poisoned.id)
    raw = sqlite3.connect(app.url.removeprefix("sqlite:///"))
    [(status,)] = raw.execute("SELECT status FROM tickwork_tasks WHERE id = ?", (poisoned.id,)).fetchall()
    raw.close()
    assert status == "FAILED"


def test_shutdown_interrupts_after_grace_without_using_an_attempt(sqlite_url: str) -> None:
    app = App(sqlite_url, lease=5.0, heartbeat=0.1, poll_interval=0.1, shutdown_grace=0.2)
    started = threading.Event()

    @app.task(name="t.long")
    def long(ctx: Context) -> None:
        started.set()
        while not ctx.cancelled:
            time.sleep(0.01)

    task = app.schedule("t.long")  # max_retries=0: a lost attempt would end it FAILED
    node = Node(app)
    assert started.wait(10)
    node.stop()
    after = app.get(task.id)
    assert (after.status, after.attempt, after.lease_owner) == (Status.PENDING, 0, None)
    assert after.next_run_at <= app.store.now()  # due again at once, on another node
    [run] = app.executions(task.id)
    assert run.status is ExecutionStatus.FAILED and run.note == "shutdown"
    assert run.error is not None and run.error.type == "Interrupted"
    app.close()


def test_a_written_run_never_removes_a_newer_run_of_the_same_task(app: App) -> None:
    from tickwork.node.run import Run

    worker = app.worker(concurrency=2)
    task = app.schedule("t.record")
    [first] = app.store.claim(worker.node_id, worker.names, 1, app.lease)
    definition = app.registry.get("t.record")
    assert definition is not None
    old_run = Run(first, definition)
    newer = Run(dataclasses.replace(first, execution_id=first.execution_id + 1000), definition)
    worker.runs.add_all([newer])
    worker.runner.forget([old_run])  # the earlier run's result landed after the task was re-claimed
    assert worker.runs.runs() == [newer]
    worker.slots.shutdown()
    assert task.id == newer.task_id


def test_a_failing_policy_ends_the_task_failed_instead_of_leaking_its_slot(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tickwork.node.outcomes

    def broken(*args: object, **kwargs: object) -> object:
        raise ZeroDivisionError("policy bug")

    monkeypatch.setattr(tickwork.node.outcomes, "outcome_of", broken)
    node = Node(app, concurrency=1)
    first = app.schedule("t.record")
    second = app.schedule("t.record")
    wait_for(lambda: app.get(second.id).status.is_terminal)  # the single slot was freed
    node.stop()
    assert app.get(first.id).status is Status.FAILED
    [run] = app.executions(first.id)
    assert run.error is not None and run.error.type == "ZeroDivisionError"


def test_prefetch_follows_how_long_runs_take() -> None:
    policy = Prefetch(concurrency=8, cap=32)
    assert policy.extra() == 0  # nothing observed yet: only the free slots
    policy.observe_refill(0.002)
    policy.observe_run(30.0)
    assert policy.extra() == 0  # long runs: hold nothing back from other nodes
    for _ in range(20):  # runs far shorter than a round trip, refill after refill: the cap
        for _ in range(100):
            policy.observe_run(0.0001)
        policy.observe_refill(0.002)
    assert policy.extra() == 32
    assert Prefetch(concurrency=8, cap=0).extra() == 0


def refills_of_tiny_runs(policy: Prefetch) -> None:
    """Five refills of 30 ms, 480 runs of 20 µs before each: W1's steady part."""
    for _ in range(5):
        for _ in range(480):
            policy.observe_run(0.00002)
        policy.observe_refill(0.03)


def test_prefetch_is_not_dragged_down_by_a_few_runs_a_claim_paused() -> None:
    """A claim that decodes a batch holds the GIL: the few runs it paused take
    milliseconds, the hundreds around them microseconds. The runs of a refill count as
    their mean: the node still holds the cap, where one sample at a time had sunk it."""
    policy = Prefetch(concurrency=16, cap=1024)
    refills_of_tiny_runs(policy)
    assert policy.extra() == 1024
    for _ in range(480):
        policy.observe_run(0.00002)
    for _ in range(16):  # the runs paused by the claim end last, just before it is read
        policy.observe_run(0.008)
    policy.observe_refill(0.03)
    assert policy.extra() == 1024


def test_a_nodes_first_slow_runs_do_not_hold_its_prefetch_down() -> None:
    """A node's first runs are slow (code run for the first time): counted by their
    number, a few of them weigh little once the next refill brings hundreds of fast ones."""
    policy = Prefetch(concurrency=16, cap=1024)
    policy.observe_refill(0.015)
    for _ in range(2):
        policy.observe_run(0.002)
    assert 0 < policy.extra() < 1024  # all it knows: two slow runs
    for _ in range(300):
        policy.observe_run(0.00002)
    policy.observe_refill(0.015)
    assert policy.extra() == 1024


def test_prefetch_falls_back_when_runs_grow_long() -> None:
    policy = Prefetch(concurrency=8, cap=512)
    for _ in range(100):
        policy.observe_run(0.0001)
    policy.observe_refill(0.01)
    assert policy.extra() == 512
    for _ in range(3):  # runs of 10 s now, a refill each
        policy.observe_run(10.0)
        policy.observe_refill(0.01)
    assert policy.extra() == 0


def test_prefetch_falls_back_at_once_when_long_runs_follow_short_ones() -> None:
    """Runs that turn long count as soon as they end, before the next refill: the node
    stops claiming ahead on the strength of the short runs it saw before."""
    policy = Prefetch(concurrency=16, cap=1024)
    refills_of_tiny_runs(policy)
    assert policy.extra() == 1024
    for _ in range(16):  # each slot's run now takes 10 s; no claim (refill) since
        policy.observe_run(10.0)
    assert policy.extra() < 16


def test_prefetch_keeps_its_estimate_through_refills_with_no_run_ended() -> None:
    """Refills with nothing ended (all claims skipped, or claimed ahead) change no weight:
    the estimate does not dwindle to nothing and swing to the cap."""
    policy = Prefetch(concurrency=8, cap=512)
    for _ in range(100):
        policy.observe_run(0.5)
    policy.observe_refill(0.01)
    before = policy.extra()
    for _ in range(2_000):
        policy.observe_refill(0.01)
    assert policy.run_s == 0.5 and policy.extra() == before == 0


def test_a_prefetched_run_records_when_it_really_started(app: App) -> None:
    node = Node(app, concurrency=1)
    tasks = [app.schedule("t.outlives_lease", kwargs={"seconds": 0.05}) for _ in range(6)]
    wait_for(lambda: all(app.get(t.id).status is Status.COMPLETED for t in tasks))
    node.stop()
    runs = sorted((e for t in tasks for e in app.executions(t.id)), key=lambda e: e.started_at or e.scheduled_for)
    # one slot: each run starts after the previous one finished, whenever it was claimed
    for previous, following in itertools.pairwise(runs):
        assert previous.finished_at is not None and following.started_at is not None
        assert following.started_at >= previous.finished_at


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_an_error_text_the_store_cannot_hold_is_cleaned_not_lost(
    kind: str, sqlite_url: str, request: pytest.FixtureRequest
) -> None:
    url = sqlite_url if kind == "sqlite" else request.getfixturevalue("pg_url")
    app = App(url, lease=2.0, heartbeat=0.1, poll_interval=0.1)

    @app.task(name="t.record")
    def record(ctx: Context) -> None:
        pass

    @app.task(name="t.nul_error")
    def nul_error(ctx: Context) -> None:
        raise ValueError("bad\x00byte \udc80")

    node = Node(app)
    bad = app.schedule("t.nul_error")
    good = app.schedule("t.record")
    wait_for(lambda: app.get(bad.id).status is Status.FAILED and app.get(good.id).status is Status.COMPLETED)
    node.stop()
    [run] = app.executions(bad.id)
    assert run.error is not None and run.error.type == "ValueError"
    assert run.error.message == "bad\\x00byte \\udc80"
    app.close()


def test_a_prefetched_run_whose_lease_was_lost_never_starts(app: App) -> None:
    from tickwork.node.run import CancelReason, Run

    ran: list[int] = []

    @app.task(name="t.must_not_run")
    def must_not_run(ctx: Context) -> None:
        ran.append(ctx.task_id)

    worker = app.worker(concurrency=1)
    app.schedule("t.must_not_run")
    [claim] = app.store.claim(worker.node_id, worker.names, 1, app.lease)
    definition = app.registry.get("t.must_not_run")
    assert definition is not None
    run = Run(claim, definition)
    worker.runs.add_all([run])
    run.request_cancel(CancelReason.LOST)  # the monitor found its lease gone while it waited
    worker.runner.execute(run)
    assert ran == [] and worker.running == 0
    worker.slots.shutdown()


def test_single_catchup_after_downtime_runs_the_latest_missed_slot_and_records_the_rest(sqlite_url: str) -> None:
    start = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    clock = FakeClock(start)
    app = App(sqlite_url, clock=clock, poll_interval=0.05, heartbeat=0.5, lease=3600)
    slots: list[datetime] = []

    @app.task(name="t.slot")
    def slot(ctx: Context) -> None:
        slots.append(ctx.scheduled_for)

    task = app.schedule("t.slot", every=60, at=start)  # SINGLE_CATCHUP is the default
    clock.advance(timedelta(minutes=60, seconds=30))  # every node was down for an hour
    node = Node(app)
    wait_for(lambda: len(slots) == 2 and app.get(task.id).status is Status.PENDING)
    node.stop()
    assert slots == [start + timedelta(minutes=59), start + timedelta(minutes=60)]
    after = app.get(task.id)
    assert after.scheduled_at == start + timedelta(minutes=61)  # then on schedule again
    assert after.last_decision is not None and "59 missed slots skipped" in after.last_decision
    [skipped] = app.executions(task.id, status="SKIPPED")
    assert (skipped.skipped, skipped.scheduled_for, skipped.skipped_last) == (
        59,
        start,
        start + timedelta(minutes=58),
    )
    app.close()


def test_overlap_replace_cancels_the_running_run_when_the_next_slot_comes_due(app: App) -> None:
    @app.task(name="t.slow_tick", overlap="replace")
    def slow_tick(ctx: Context) -> None:
        app.seen.append(ctx.scheduled_for)  # type: ignore[attr-defined]
        while not ctx.cancelled:
            time.sleep(0.01)  # never done on its own: only the next slot stops it

    task = app.schedule("t.slow_tick", every=0.5, misfire_grace=60)
    node = Node(app)
    wait_for(lambda: len(app.executions(task.id, status="CANCELLED")) >= 2)
    node.stop()
    after = app.get(task.id)
    assert after.status in (Status.PENDING, Status.RUNNING)  # a replaced run ends, the task goes on
    replaced = sorted(app.executions(task.id, status="CANCELLED"), key=lambda e: e.scheduled_for)
    assert all(e.note is not None and e.note.startswith("replaced") for e in replaced)
    slots = [e.scheduled_for for e in replaced]
    assert slots[:2] == [task.scheduled_at, task.scheduled_at + timedelta(seconds=0.5)]  # each next slot ran


def test_by_default_a_recurring_task_never_runs_twice_at_once(app: App) -> None:
    @app.task(name="t.slower_than_its_interval")
    def slower(ctx: Context) -> None:
        app.seen.append((ctx.scheduled_for, time.monotonic()))  # type: ignore[attr-defined]
        time.sleep(0.3)  # the task's own work, longer than its interval

    task = app.schedule("t.slower_than_its_interval", every=0.1, misfire_grace=60)
    node = Node(app, concurrency=4)
    wait_for(lambda: len(app.seen) >= 3)  # type: ignore[attr-defined]
    node.stop()
    starts = [t for _, t in app.seen]  # type: ignore[attr-defined]
    assert all(b - a >= 0.3 for a, b in itertools.pairwise(starts))  # one after the other, never overlapping
    assert all(e.status is ExecutionStatus.COMPLETED for e in app.executions(task.id))


def test_a_one_time_task_with_skip_that_missed_its_grace_ends_failed_with_a_record(sqlite_url: str) -> None:
    start = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    clock = FakeClock(start)
    app = App(sqlite_url, clock=clock, poll_interval=0.05, heartbeat=0.5, lease=3600)
    ran: list[int] = []

    @app.task(name="t.once")
    def once(ctx: Context) -> None:
        ran.append(ctx.task_id)

    skipping = app.schedule("t.once", misfire="SKIP")
    late_anyway = app.schedule("t.once")  # the default: a one-time task runs however late
    clock.advance(timedelta(minutes=5))
    node = Node(app)
    wait_for(lambda: app.get(skipping.id).status.is_terminal and app.get(late_anyway.id).status.is_terminal)
    node.stop()
    assert app.get(skipping.id).status is Status.FAILED and ran == [late_anyway.id]
    [record] = app.executions(skipping.id)
    assert record.status is ExecutionStatus.SKIPPED and record.skipped == 1 and record.scheduled_for == start
    app.close()


@pytest.mark.parametrize("name", ["t.cooperative_tick", "t.async_tick"])
def test_cancel_run_only_stops_the_current_run_and_keeps_the_schedule(app: App, name: str) -> None:
    started = threading.Event()

    @app.task(name="t.cooperative_tick")
    def cooperative_tick(ctx: Context) -> None:
        started.set()
        while not ctx.cancelled:
            time.sleep(0.01)

    @app.task(name="t.async_tick")
    async def async_tick(ctx: Context) -> None:
        started.set()
        await asyncio.Event().wait()

    task = app.schedule(name, every=3600, at=app.store.now())
    with pytest.raises(InvalidState, match="cancel the current run of"):
        app.cancel(task.id, run_only=True)  # nothing is running yet
    node = Node(app)
    assert started.wait(10)
    wait_for(lambda: app.get(task.id).status is Status.RUNNING)
    assert app.cancel(task.id, run_only=True).status is Status.RUNNING
    wait_for(lambda: app.get(task.id).status is Status.PENDING)
    node.stop()
    after = app.get(task.id)
    assert after.scheduled_at == task.scheduled_at + timedelta(hours=1)  # the schedule goes on
    assert not after.cancel_requested and not after.cancel_run_only
    [run] = app.executions(task.id)
    assert run.status is ExecutionStatus.CANCELLED and run.note is not None and "schedule goes on" in run.note


class Escape(BaseException):
    """A BaseException of the task's own, neither SystemExit nor KeyboardInterrupt."""


@pytest.mark.parametrize("kind", ["thread", "async"])
def test_base_exceptions_from_task_code_end_the_run_failed_and_free_the_slot(app: App, kind: str) -> None:
    raised = {"exit": SystemExit(3), "interrupt": KeyboardInterrupt(), "escape": Escape("out")}

    @app.task(name="t.raise_base")
    def raise_base(ctx: Context, which: str) -> None:
        raise raised[which]

    @app.task(name="t.raise_base_async")
    async def raise_base_async(ctx: Context, which: str) -> None:
        raise raised[which]

    name = "t.raise_base" if kind == "thread" else "t.raise_base_async"
    node = Node(app, concurrency=1)  # one slot: a wedged slot would stall everything after it
    try:
        tasks = [app.schedule(name, kwargs={"which": which}) for which in raised]
        after = app.schedule("t.record")
        wait_for(lambda: all(app.get(t.id).status is Status.FAILED for t in tasks))
        wait_for(lambda: app.get(after.id).status is Status.COMPLETED)
        for task, error in zip(tasks, raised.values(), strict=True):
            (execution,) = app.executions(task.id)
            assert execution.status is ExecutionStatus.FAILED
            assert execution.error is not None and execution.error.type == type(error).__qualname__
    finally:
        node.stop()  # a graceful stop returns: no run is left behind


def test_a_recurring_tasks_next_slot_is_not_slept_past_while_other_due_times_are_known(sqlite_url: str) -> None:
    """The node sleeps through the due times it read; a result that makes its task due
    again (a recurring task's next slot) must wake it, not wait out a 30 s poll
    interval behind a far-off due time it already knew."""
    app = App(sqlite_url, poll_interval=30.0, heartbeat=0.1)
    runs: list[float] = []

    @app.task(name="t.tick")
    def tick(ctx: Context) -> None:
        runs.append(time.monotonic())

    @app.task(name="t.later")
    def later(ctx: Context) -> None:
        pass

    app.schedule("t.later", delay=3600)  # a due time the node holds and sleeps toward
    node = Node(app)
    try:
        app.schedule("t.tick", every=0.2)
        wait_for(lambda: len(runs) >= 4, timeout=10)  # within one poll interval, not four
    finally:
        node.stop()
        app.close()
