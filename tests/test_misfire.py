"""Missed executions: the decision function, and the policies applied by real nodes."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import wait_for
from tests.test_schedules import make_task
from tests.workers import Fleet, client_for, read_records
from tickwork import App, ExecutionStatus, InvalidInput, Kind, Misfire, Status
from tickwork.model import Task
from tickwork.schedules import CronSchedule, IntervalSchedule, Schedule, decide, schedule_of, settle


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


def all_slots(schedule: Schedule, first: datetime, until: datetime) -> list[datetime]:
    slots = []
    slot = first
    while slot <= until:
        slots.append(slot)
        slot = schedule.next_after(slot)
    return slots


def simulate(task: Task, now: datetime) -> tuple[list[datetime], list[datetime]]:
    """Nodes with their clock stopped at ``now``: claim, decide, run or skip, settle,
    until nothing is due. Returns the slots run and the slots skipped (expanded)."""
    schedule = schedule_of(task)
    assert schedule is not None
    runs: list[datetime] = []
    skipped: list[datetime] = []
    for _ in range(100_000):
        if task.next_run_at > now:
            return runs, skipped
        decision = decide(task, now)
        if decision.run:
            runs.append(task.scheduled_at)
            after = settle(task, ExecutionStatus.COMPLETED, now)
            task = dataclasses.replace(task, scheduled_at=after.scheduled_at, next_run_at=after.next_run_at)
        else:
            assert decision.skipped_first == task.scheduled_at
            assert decision.skipped_last is not None and decision.skipped_last < decision.next_slot
            block = all_slots(schedule, task.scheduled_at, decision.skipped_last)
            assert len(block) == decision.skipped
            skipped += block
            task = dataclasses.replace(task, scheduled_at=decision.next_slot, next_run_at=decision.next_slot)
    raise AssertionError("the decisions never caught up")


CRONS = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "*/30 * * * *", "15 1,13 * * *", "0 9 * * 1-5"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]


@st.composite
def tasks_and_outages(draw: st.DrawFn) -> tuple[Task, datetime]:
    start = draw(st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2026, 12, 31), timezones=st.just(UTC)))
    if draw(st.booleans()):
        schedule: Schedule = CronSchedule(draw(st.sampled_from(CRONS)), draw(st.sampled_from(ZONES)))
        cron = schedule
        assert isinstance(cron, CronSchedule)
        fields = {"cron": cron.expression, "timezone": cron.timezone, "interval": None}
    else:
        seconds = draw(st.sampled_from([1.0, 7.5, 60.0, 600.0, 3600.0]))
        schedule = IntervalSchedule(seconds)
        fields = {"interval": seconds, "cron": None}
    first = schedule.next_after(start)
    outage = draw(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=2)))
    task = make_task(
        **fields,
        scheduled_at=first,
        next_run_at=first,
        misfire=draw(st.sampled_from(list(Misfire))),
        misfire_grace=draw(st.sampled_from([0.0, 1.0, 60.0, 600.0])),
        max_catchup=draw(st.integers(min_value=1, max_value=40)),
        attempt=1,
    )
    return task, first + outage


@settings(max_examples=250, deadline=None)
@given(tasks_and_outages())
def test_every_slot_of_an_outage_is_run_or_skipped_exactly_once_in_order(case: tuple[Task, datetime]) -> None:
    task, now = case
    schedule = schedule_of(task)
    assert schedule is not None
    expected = all_slots(schedule, task.scheduled_at, now)
    runs, skipped = simulate(task, now)
    assert not set(runs) & set(skipped)  # no slot both run and skipped
    assert len(set(runs)) == len(runs)  # no slot run twice
    assert runs == sorted(runs)  # in order
    assert sorted(runs + skipped) == expected  # run + skipped = every slot of the outage
    horizon = now - timedelta(seconds=task.misfire_grace)
    missed_runs = [r for r in runs if r < horizon]
    if task.misfire is Misfire.SKIP:
        assert missed_runs == []
    elif task.misfire is Misfire.SINGLE_CATCHUP:
        assert len(missed_runs) <= 1
        if any(s < horizon for s in expected):
            assert missed_runs == [max(s for s in expected if s < horizon)]  # the latest missed one
    else:
        missed = [s for s in expected if s < horizon]
        assert missed_runs == missed[-task.max_catchup :]  # the newest ones, capped


def test_a_slot_late_by_less_than_the_grace_is_not_missed() -> None:
    task = make_task(misfire=Misfire.SKIP, misfire_grace=60.0)
    slot = task.scheduled_at
    assert decide(task, slot + timedelta(seconds=59)).run
    assert decide(task, slot + timedelta(seconds=60)).run
    assert not decide(task, slot + timedelta(seconds=61)).run


def test_one_time_tasks_run_however_late_unless_they_say_skip() -> None:
    late = datetime(2030, 1, 1, tzinfo=UTC)
    once = make_task(kind=Kind.ONE_TIME, interval=None, misfire=Misfire.CATCHUP)
    assert decide(once, late).run
    skipping = make_task(kind=Kind.ONE_TIME, interval=None, misfire=Misfire.SKIP)
    decision = decide(skipping, late)
    assert not decision.run and decision.skipped == 1


def test_a_triggered_run_is_never_a_misfire() -> None:
    assert decide(make_task(triggered=True, misfire=Misfire.SKIP), datetime(2030, 1, 1, tzinfo=UTC)).run


# -- real nodes ---------------------------------------------------------------------------


def half_hour_floor(moment: datetime) -> datetime:
    return moment.replace(minute=30 if moment.minute >= 30 else 0, second=0, microsecond=0)


def four_missed_half_hours() -> tuple[datetime, list[datetime]]:
    """An ``at`` two hours back whose four 30-minute slots up to now are all missed by
    more than the test's 5 s grace, while the next slot is still over 30 s away (near a
    half hour, wait until the clock is clear of it)."""
    wait_for(lambda: 10 <= (datetime.now(UTC) - half_hour_floor(datetime.now(UTC))).total_seconds() <= 1770, 40)
    newest = half_hour_floor(datetime.now(UTC))
    slots = [newest - timedelta(minutes=30 * i) for i in (3, 2, 1, 0)]
    return slots[0] - timedelta(minutes=1), slots


@pytest.mark.parametrize(
    ("policy", "runs"),
    [(Misfire.SKIP, []), (Misfire.SINGLE_CATCHUP, [3]), (Misfire.CATCHUP, [0, 1, 2, 3])],
)
def test_a_node_back_after_two_hours_applies_the_policy(
    client: App, fleet: Fleet, records: Path, policy: Misfire, runs: list[int]
) -> None:
    at, slots = four_missed_half_hours()
    task = client.schedule("test.record", cron="*/30 * * * *", at=at, misfire=policy, misfire_grace=5)
    assert task.scheduled_at == slots[0]  # every node was down since then
    node = fleet.start()
    upcoming = slots[-1] + timedelta(minutes=30)
    wait_for(lambda: client.get(task.id).scheduled_at == upcoming and client.get(task.id).status is Status.PENDING)
    assert node.terminate() == 0, node.output()
    ran = sorted(e.scheduled_for for e in client.executions(task.id, status="COMPLETED"))
    assert ran == [slots[i] for i in runs]
    assert sorted(datetime.fromisoformat(r["scheduled_for"]) for r in read_records(records)) == ran
    skipped = client.executions(task.id, status="SKIPPED")
    if len(runs) == 4:
        assert skipped == []
    else:
        [record] = skipped
        assert record.skipped == 4 - len(runs) and record.scheduled_for == slots[0]
        assert record.skipped_last == slots[3 - len(runs)]
        assert client.get(task.id).last_decision is not None


def test_catchup_after_an_hour_of_a_one_second_task_is_capped(client: App, fleet: Fleet) -> None:
    start = datetime.now(UTC) - timedelta(hours=1)
    task = client.schedule("test.record", every=1, at=start, misfire=Misfire.CATCHUP, max_catchup=100)
    node = fleet.start()
    wait_for(lambda: client.executions(task.id, status="SKIPPED"))
    [record] = client.executions(task.id, status="SKIPPED")
    assert record.scheduled_for == start and record.skipped is not None and record.skipped > 3000
    assert record.skipped_last == start + timedelta(seconds=record.skipped - 1)
    kept = [record.skipped_last + timedelta(seconds=i) for i in range(1, 101)]
    wait_for(lambda: len(client.executions(task.id, status="COMPLETED", limit=10_000)) >= 100)
    ran = [e.scheduled_for for e in client.executions(task.id, status="COMPLETED", limit=10_000)]
    assert sorted(ran)[:100] == kept  # the newest 100 missed slots, each once, oldest first
    assert len(set(ran)) == len(ran)
    # 3,500 skipped slots cost one record, not memory: the node stays at its idle size.
    status = Path(f"/proc/{node.proc.pid}/status").read_text()
    peak_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    assert peak_kb < 150 * 1024


def test_backfill_runs_each_slot_once_and_never_again(client: App, fleet: Fleet) -> None:
    task = client.schedule("test.record", cron="0 * * * *", at=datetime.now(UTC) + timedelta(days=1))
    start = datetime(2030, 1, 1, tzinfo=UTC) - timedelta(days=3650)
    end = start + timedelta(hours=9)
    first = client.backfill(task.id, start, end)
    assert [t.scheduled_at for t in first] == [start + timedelta(hours=i) for i in range(10)]
    assert client.backfill(task.id, start, end) == []  # waiting runs are not scheduled again
    fleet.start()
    wait_for(lambda: all(client.get(t.id).status is Status.COMPLETED for t in first))
    slots = sorted(e.scheduled_for for t in first for e in client.executions(t.id))
    assert slots == [start + timedelta(hours=i) for i in range(10)]
    assert client.backfill(task.id, start, end) == []  # completed slots are refused
    with pytest.raises(InvalidInput, match="recurring"):
        client.backfill(first[0].id, start, end)


def test_resume_without_catch_up_skips_what_was_missed_while_paused(client: App) -> None:
    at = datetime.now(UTC) - timedelta(hours=3)
    task = client.schedule("test.record", every=3600, at=at)
    client.pause(task.id)
    resumed = client.resume(task.id, catch_up=False)
    assert resumed.status is Status.PENDING and resumed.scheduled_at > datetime.now(UTC)
    [record] = client.executions(task.id, status="SKIPPED")
    assert record.skipped == 4 and record.scheduled_for == at  # at, +1 h, +2 h, +3 h
    assert resumed.last_decision is not None and "without catch-up" in resumed.last_decision


def test_a_retry_is_never_judged_missed() -> None:
    retry = make_task(kind=Kind.ONE_TIME, interval=None, misfire=Misfire.SKIP, misfire_grace=1.0, attempt=2)
    assert decide(retry, retry.scheduled_at + timedelta(hours=2)).run


def test_jitter_never_makes_an_on_time_slot_missed() -> None:
    task = make_task(misfire=Misfire.SKIP, misfire_grace=60.0, jitter=300.0)
    assert decide(task, task.scheduled_at + timedelta(seconds=300 + 59)).run
    assert not decide(task, task.scheduled_at + timedelta(seconds=300 + 61)).run


def test_missed_slots_across_a_half_hour_dst_change_are_the_forward_slots() -> None:
    # Lord Howe falls back 30 minutes on 2024-04-07 local (2024-04-06 15:00 UTC).
    first = datetime(2024, 4, 6, 9, 45, tzinfo=UTC)
    task = make_task(cron="45 * * * *", timezone="Australia/Lord_Howe", interval=None, misfire_grace=0.0)
    task = dataclasses.replace(task, scheduled_at=first, next_run_at=first)
    now = datetime(2024, 4, 6, 15, 23, tzinfo=UTC)
    schedule = schedule_of(task)
    assert schedule is not None
    real = all_slots(schedule, first, now)
    for policy in Misfire:
        runs, skipped = simulate(dataclasses.replace(task, misfire=policy, max_catchup=2), now)
        assert sorted(runs + skipped) == real, policy


def test_backfill_of_an_interval_task_stays_on_its_grid_and_refuses_the_future(client: App) -> None:
    anchor = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    task = client.schedule("test.record", every=3600, at=anchor)
    runs = client.backfill(task.id, anchor - timedelta(hours=5, minutes=30), anchor - timedelta(hours=2))
    assert [r.scheduled_at for r in runs] == [anchor - timedelta(hours=h) for h in (5, 4, 3, 2)]
    with pytest.raises(InvalidInput, match="future"):
        client.backfill(task.id, anchor - timedelta(hours=1), anchor + timedelta(hours=1))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_backfills_of_one_range_at_once_schedule_each_slot_once(
    kind: str, sqlite_url: str, request: pytest.FixtureRequest
) -> None:
    import threading

    url = sqlite_url if kind == "sqlite" else request.getfixturevalue("pg_url")
    apps = [client_for(url) for _ in range(2)]
    task = apps[0].schedule("test.record", cron="0 * * * *")
    start = datetime(2020, 1, 1, tzinfo=UTC)
    barrier = threading.Barrier(2)
    results: list[list[Task]] = []

    def backfill(app: App) -> None:
        barrier.wait(10)
        results.append(app.backfill(task.id, start, start + timedelta(hours=9)))

    threads = [threading.Thread(target=backfill, args=(app,)) for app in apps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    scheduled = [r for batch in results for r in batch]
    assert sorted({r.id for r in scheduled}) == sorted(r.id for r in apps[0].tasks(limit=100) if r.parent_id)
    assert len({r.id for r in scheduled}) == 10
    for app in apps:
        app.close()
