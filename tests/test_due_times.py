"""How a node sleeps between claims (``Claimer.sleep_for``): from due times read once and
slept through one after another, asked again only when they run out, grow a poll
interval old, or may be stale (``forget_upcoming``, which the poll loop calls whenever
anything but a freed slot wakes it). Driven clock, in-memory store."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.driven_clock import DrivenClock
from tests.fake_store import FakeStore
from tickwork.model import Kind
from tickwork.node.claims import Claimer
from tickwork.node.health import StoreHealth
from tickwork.node.settings import NodeSettings
from tickwork.store.base import DueTime, NewTask
from tickwork.wakeup import Rang, Wakeup

POLL = 5.0


class CountingStore(FakeStore):
    def __init__(self, clock: DrivenClock) -> None:
        super().__init__(clock=clock.now)
        self.reads = 0

    def upcoming_due(self, *args: Any, **kwargs: Any) -> list[DueTime]:
        self.reads += 1
        return super().upcoming_due(*args, **kwargs)


@pytest.fixture
def clock() -> DrivenClock:
    return DrivenClock()


@pytest.fixture
def store(clock: DrivenClock) -> CountingStore:
    return CountingStore(clock)


@pytest.fixture
def claimer(store: CountingStore, clock: DrivenClock) -> Claimer:
    settings = NodeSettings(poll_interval=POLL, claim_ahead=0.0)  # claiming ahead: below
    return Claimer(store, "n1", ["t.job"], settings, StoreHealth(30.0, clock.monotonic), clock=clock.monotonic)


def due_in(store: FakeStore, clock: DrivenClock, *seconds: float) -> None:
    tasks = []
    for s in seconds:
        at = clock.now() + timedelta(seconds=s)
        tasks.append(NewTask(name="t.job", args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=at, next_run_at=at))
    store.insert_tasks(tasks)


def test_due_instants_are_slept_through_from_one_read(
    claimer: Claimer, store: CountingStore, clock: DrivenClock
) -> None:
    due_in(store, clock, 1.0, 2.0, 3.0)
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(1.0)
    for expected in (1.0, 1.0):
        clock.advance(1.0)  # the claim at that instant took its task (or another node did)
        assert claimer.sleep_for(4, clock.now()) == pytest.approx(expected)
    assert store.reads == 1


def test_a_time_at_or_before_the_claim_is_passed_over_not_spun_on(
    claimer: Claimer, store: CountingStore, clock: DrivenClock
) -> None:
    due_in(store, clock, -1.0, 2.0)  # the first was due and the claim did not get it: held elsewhere
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(2.0)


def test_the_times_are_read_again_when_they_run_out(claimer: Claimer, store: CountingStore, clock: DrivenClock) -> None:
    due_in(store, clock, 1.0)
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(1.0)
    due_in(store, clock, 3.0)  # added by another process, unannounced
    clock.advance(1.0)
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(2.0)
    assert store.reads == 2


def test_the_times_are_read_again_after_a_poll_interval(
    claimer: Claimer, store: CountingStore, clock: DrivenClock
) -> None:
    due_in(store, clock, 1.0, 30.0)
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(1.0)
    clock.advance(1.0)
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(POLL)  # the cap
    due_in(store, clock, 8.0)  # unannounced: found once the times are a poll interval old
    clock.advance(POLL)
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(3.0)
    assert store.reads == 2


def test_forgetting_the_times_reads_them_again(claimer: Claimer, store: CountingStore, clock: DrivenClock) -> None:
    due_in(store, clock, 3.0)
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(3.0)
    due_in(store, clock, 0.5)  # scheduled here, or announced by a NOTIFY
    claimer.forget_upcoming()
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(0.5)
    assert store.reads == 2


def test_a_full_node_sleeps_the_poll_interval_without_asking(
    claimer: Claimer, store: CountingStore, clock: DrivenClock
) -> None:
    due_in(store, clock, 0.1)
    assert claimer.sleep_for(0, clock.now()) == POLL
    assert store.reads == 0


def test_the_alarm_tells_a_freed_slot_from_news_and_from_the_time_running_out() -> None:
    alarm = Wakeup()
    alarm.slot_freed()
    assert alarm.wait(0) is Rang.SLOT_FREED  # rang, but nothing new is due because of it
    alarm.slot_freed()
    alarm.set()
    assert alarm.wait(0) is Rang.NEWS
    assert alarm.wait(0) is Rang.TIMEOUT  # reset by the wait


class AheadStore(CountingStore):
    """A store whose clock runs 5 ms behind the node's estimate of it (the estimate is a
    local clock plus an offset measured under load)."""

    AHEAD = timedelta(milliseconds=5)

    def approximate_now(self) -> datetime:
        return super().approximate_now() + self.AHEAD


def test_a_claim_passes_over_only_what_the_store_saw_as_due(clock: DrivenClock) -> None:
    from tickwork.node.claims import CLOCK_SLACK_S

    store = AheadStore(clock)
    settings = NodeSettings(poll_interval=POLL, lease=30.0, claim_ahead=0.0)
    claimer = Claimer(store, "n1", ["t.job"], settings, StoreHealth(30.0, clock.monotonic), clock=clock.monotonic)
    due_in(store, clock, 0.0)
    taken = claimer.claim(4)
    assert taken is not None and taken.claimed == 1
    # the store's clock was seen 5 ms behind the estimate; the task taken was due by then
    assert taken.seen_at == clock.now()  # the task taken was due then, by the store's clock
    due_in(store, clock, 0.003)  # due by the estimate, not yet by the store's clock
    missed = claimer.claim(4)
    assert missed is not None and missed.claimed == 0
    # the driven clock stood still: the claim asked at the estimate's now
    assert missed.seen_at == store.approximate_now() - AheadStore.AHEAD - timedelta(seconds=CLOCK_SLACK_S)
    # not passed over: the node asks again as soon as it may be due for the store
    assert claimer.sleep_for(4, missed.seen_at) == 0.0


def test_a_run_that_ends_while_the_node_sleeps_idle_to_a_due_time_does_not_wake_it(
    claimer: Claimer, store: CountingStore, clock: DrivenClock
) -> None:
    """After a claim that drained what was due, the poll loop sleeps, slots idle, to the
    next due time: a freed slot would change nothing, so it is not even woken. Once it is
    awake again (deciding, or waiting for slots on a full node), a freed slot wakes it."""
    from tickwork.node.pacing import Pacer

    alarm = Wakeup()
    pacer = Pacer(claimer, store, alarm, lambda: 4, POLL)
    due_in(store, clock, 0.0, 2.0)
    drained = claimer.claim(4)
    assert drained is not None and drained.claimed == 1
    assert pacer.after_claim(drained, 4) == (pytest.approx(2.0), True)
    pacer.run_forgotten(limited=False)
    assert alarm.wait(0) is Rang.TIMEOUT  # not rung
    pacer.run_forgotten(limited=True)  # a limit may have released held-back tasks: news
    assert alarm.wait(0) is Rang.NEWS
    pacer.wait(0)  # the sleep ends: awake
    pacer.run_forgotten(limited=False)
    assert alarm.wait(0) is Rang.SLOT_FREED


# -- claiming ahead (NodeSettings.claim_ahead) ----------------------------------------------


def ahead_claimer(store: CountingStore, clock: DrivenClock, ahead: float) -> Claimer:
    settings = NodeSettings(poll_interval=POLL, claim_ahead=ahead)
    return Claimer(store, "n1", ["t.job"], settings, StoreHealth(30.0, clock.monotonic), clock=clock.monotonic)


def test_one_claim_takes_the_due_times_within_its_reach_and_the_sleep_runs_past_them(
    store: CountingStore, clock: DrivenClock
) -> None:
    from tickwork.node.claims import WAKE_LEAD_S

    claimer = ahead_claimer(store, clock, 0.2)
    due_in(store, clock, 0.0, 0.05, 0.15, 0.5)
    taken = claimer.claim(8)
    assert taken is not None and taken.claimed == 3  # due now and within 0.2 s; not 0.5
    # the next wake is for the task at 0.5 s (a round trip early), not for those claimed
    assert claimer.sleep_for(5, taken.seen_at) == pytest.approx(0.5 - WAKE_LEAD_S)


def test_a_task_claimed_only_once_due_is_not_slept_past_by_a_claim_ahead(
    store: CountingStore, clock: DrivenClock
) -> None:
    """A recurring task (or one of the lane) due within the reach of a claim is not taken
    ahead: the node must still wake for it, not sleep to the next time after those the
    claim took."""
    claimer = ahead_claimer(store, clock, 0.2)
    due_in(store, clock, 0.0, 0.15)
    at = clock.now() + timedelta(seconds=0.1)
    store.insert_tasks(
        [NewTask(name="t.job", args=[], kwargs={}, kind=Kind.RECURRING, scheduled_at=at, next_run_at=at, interval=60.0)]
    )
    taken = claimer.claim(8)
    assert taken is not None and taken.claimed == 2  # the one-time tasks
    assert claimer.sleep_for(6, taken.seen_at) == pytest.approx(0.1)
    clock.advance(0.1)
    again = claimer.claim(6)
    assert again is not None and again.claimed == 1  # the recurring task, once due


def test_a_node_wakes_a_round_trip_early_only_for_a_task_it_can_claim_ahead(
    store: CountingStore, clock: DrivenClock
) -> None:
    from tickwork.node.claims import WAKE_LEAD_S

    claimer = ahead_claimer(store, clock, 0.2)
    due_in(store, clock, 1.0)
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(1.0 - WAKE_LEAD_S)
    at = clock.now() + timedelta(seconds=0.5)
    store.insert_tasks(
        [NewTask(name="t.job", args=[], kwargs={}, kind=Kind.RECURRING, scheduled_at=at, next_run_at=at, interval=60.0)]
    )
    claimer.forget_upcoming()
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(0.5)  # recurring: claimed once due


def test_an_early_claim_that_did_not_get_its_task_leaves_the_node_to_sleep_to_the_time(
    store: CountingStore, clock: DrivenClock
) -> None:
    """Held elsewhere, a task the node woke early for is not taken: the node then sleeps
    to its due time instead of spinning on the early wake."""
    from tickwork.node.claims import WAKE_LEAD_S

    claimer = ahead_claimer(store, clock, 0.2)
    due_in(store, clock, 1.0)
    assert claimer.sleep_for(4, clock.now()) == pytest.approx(1.0 - WAKE_LEAD_S)  # the times read now
    store.claim("other-node", ["t.job"], 1, 30.0, ahead=5.0)  # another node takes it meanwhile
    clock.advance(1.0 - WAKE_LEAD_S)
    got = claimer.claim(4)
    assert got is not None and got.claimed == 0
    assert claimer.sleep_for(4, got.seen_at) == pytest.approx(WAKE_LEAD_S)


def test_a_node_with_one_free_slot_claims_only_what_is_due(store: CountingStore, clock: DrivenClock) -> None:
    """Its last slot is kept for what falls due first: a run claimed ahead would hold it."""
    claimer = ahead_claimer(store, clock, 0.2)
    due_in(store, clock, 0.1)
    got = claimer.claim(1)
    assert got is not None and got.claimed == 0
    got = claimer.claim(2)
    assert got is not None and got.claimed == 1


def test_sparse_due_times_cost_one_claim_per_reach_not_one_each(store: CountingStore, clock: DrivenClock) -> None:
    """Due times 10 ms apart for a second, a claim looking 50 ms ahead: the node, sleeping
    as ``sleep_for`` says between claims, makes about one claim per 50 ms."""
    claimer = ahead_claimer(store, clock, 0.05)
    due_in(store, clock, *(0.01 * i for i in range(1, 101)))
    claims = taken = 0
    while taken < 100:
        got = claimer.claim(16)
        assert got is not None
        claims, taken = claims + 1, taken + got.claimed
        clock.advance(max(claimer.sleep_for(16 - got.claimed, got.seen_at), 0.001))
    assert claims <= 25, claims  # one per due time would be 100
