"""Unit tests of the pure schedule arithmetic in ``tickwork.schedules`` (DESIGN.md §2).

No store, no sleeps, no wall clock: every time is an explicit, aware datetime.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tickwork.errors import InvalidCron, InvalidInput, InvalidTimezone, TickworkError
from tickwork.model import ExecutionStatus, Kind, Misfire, OnLost, Overlap, Status, Task
from tickwork.schedules import (
    MAX_RETRY_DELAY,
    CronSchedule,
    IntervalSchedule,
    jitter_offset,
    next_fires,
    next_slot,
    retry_delay,
    settle,
)

# ---------------------------------------------------------------------------------------
# Shared data, helpers and strategies
# ---------------------------------------------------------------------------------------

EXPRESSIONS = [
    "* * * * *",
    "*/7 * * * *",
    "30 2 * * *",
    "30 1 * * *",
    "0 9 * * 1-5",
    "15 */3 * * *",
    "@hourly",
    "@daily",
    "@weekly",
    "@monthly",
    "@yearly",
]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
DST_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
US = timedelta(microseconds=1)

utc_times = st.datetimes(
    min_value=datetime(2000, 1, 1),
    max_value=datetime(2060, 1, 1),
    timezones=st.just(UTC),
)


@functools.cache
def _transitions(zone: str, year: int) -> tuple[datetime, ...]:
    """Exact UTC instants at which ``zone`` changes its offset during ``year``."""
    zi = ZoneInfo(zone)

    def offset(t: datetime) -> timedelta | None:
        return t.astimezone(zi).utcoffset()

    found = []
    day = timedelta(days=1)
    t = datetime(year, 1, 1, tzinfo=UTC)
    while t.year == year:
        u = t + day
        if offset(t) != offset(u):
            lo, hi = t, u
            while hi - lo > US:
                mid = lo + (hi - lo) // 2
                if offset(mid) == offset(lo):
                    lo = mid
                else:
                    hi = mid
            found.append(hi)
        t = u
    return tuple(found)


@st.composite
def near_dst_transition(draw: st.DrawFn) -> tuple[str, datetime]:
    """A DST zone and a UTC instant within three hours of one of its transitions."""
    zone = draw(st.sampled_from(DST_ZONES))
    year = draw(st.integers(min_value=2000, max_value=2059))
    transitions = _transitions(zone, year)
    assert transitions, f"{zone} has no DST transition in {year}"
    transition = draw(st.sampled_from(transitions))
    offset = draw(st.timedeltas(min_value=timedelta(hours=-3), max_value=timedelta(hours=3)))
    return zone, transition + offset


def make_task(**overrides: Any) -> Task:
    """A RECURRING 60 s interval task, PENDING, as a worker would have claimed it."""
    fields: dict[str, Any] = {
        "id": 7,
        "name": "job",
        "args": [],
        "kwargs": {},
        "key": None,
        "kind": Kind.RECURRING,
        "cron": None,
        "timezone": "UTC",
        "interval": 60.0,
        "scheduled_at": T0,
        "next_run_at": T0,
        "status": Status.RUNNING,
        "misfire": Misfire.SINGLE_CATCHUP,
        "misfire_grace": 60.0,
        "jitter": 0.0,
        "timeout": None,
        "max_retries": 0,
        "retry_backoff": 1.0,
        "priority": 0,
        "version": 3,
        "lease_owner": "node-a",
        "lease_expires_at": T0 + timedelta(seconds=30),
        "cancel_requested": False,
        "triggered": False,
        "attempt": 1,
        "run_count": 0,
        "last_status": None,
        "created_at": T0 - timedelta(days=1),
        "updated_at": T0,
        "max_catchup": 100,
        "overlap": Overlap.SKIP,
        "last_decision": None,
        "parent_id": None,
        "on_lost": OnLost.RETRY,
        "cancel_run_only": False,
        "max_runtime": None,
        "until": None,
        "max_runs": None,
        "origin": None,
        "declared_at": None,
        "revision": 0,
        "replan_at": None,
        "replan_run_at": None,
        "removed_at": None,
        "max_lost": 3,
        "lost_runs": 0,
        "queue": "default",
        "lock": None,
        "max_running": None,
        "rate_limit": None,
        "existed": False,
    }
    unknown = set(overrides) - set(fields)
    assert not unknown, f"make_task: unknown Task fields {unknown}"
    fields.update(overrides)
    assert set(fields) == {f.name for f in dataclasses.fields(Task)}
    return Task(**fields)


def fires_on(expr: str, zone: str, day: date) -> list[datetime]:
    """Every fire of ``expr`` during the local calendar ``day`` in ``zone``, by next_after."""
    zi = ZoneInfo(zone)
    start = datetime.combine(day, time(0), zi).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(0), zi).astimezone(UTC)
    schedule = CronSchedule(expr, zone)
    out = []
    t = start - US
    for _ in range(2000):
        t = schedule.next_after(t)
        if t >= end:
            return out
        out.append(t)
    raise AssertionError("runaway iteration")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# 1. next_after is strictly later
# ---------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(expr=st.sampled_from(EXPRESSIONS), zone=st.sampled_from(ZONES), t=utc_times)
def test_cron_next_after_is_strictly_later(expr: str, zone: str, t: datetime) -> None:
    schedule = CronSchedule(expr, zone)
    nxt = schedule.next_after(t)
    assert nxt.utcoffset() == timedelta(0)
    assert nxt > t
    # It is the *first* fire after t: nothing fires in (t, nxt).
    if nxt - US > t:
        assert schedule.next_after(nxt - US) == nxt


@settings(max_examples=300, deadline=None)
@given(expr=st.sampled_from([*EXPRESSIONS, "45 1 * * *", "15 2 * * *"]), where=near_dst_transition())
def test_cron_next_after_is_strictly_later_around_dst_transitions(expr: str, where: tuple[str, datetime]) -> None:
    zone, t = where
    schedule = CronSchedule(expr, zone)
    nxt = schedule.next_after(t)
    assert nxt > t
    if nxt - US > t:
        assert schedule.next_after(nxt - US) == nxt


def test_cron_next_after_accepts_any_aware_datetime_and_returns_utc() -> None:
    schedule = CronSchedule("0 9 * * *", "Europe/Berlin")
    berlin = datetime(2024, 6, 1, 8, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    assert schedule.next_after(berlin) == utc(2024, 6, 1, 7, 0)
    assert schedule.next_after(berlin).tzinfo == UTC
    assert schedule.next_after(utc(2024, 6, 1, 7, 0)) == utc(2024, 6, 2, 7, 0)


@settings(max_examples=200, deadline=None)
@given(
    seconds=st.one_of(
        st.sampled_from([0.1, 1.5, 7, 3600]),
        st.floats(min_value=1e-6, max_value=1e7, allow_nan=False, allow_infinity=False),
        st.integers(min_value=1, max_value=10**7),
    ),
    t=utc_times,
)
def test_interval_next_after_is_strictly_later(seconds: float, t: datetime) -> None:
    nxt = IntervalSchedule(seconds).next_after(t)
    assert nxt > t
    assert nxt - t == timedelta(seconds=seconds)


# ---------------------------------------------------------------------------------------
# 2. No drift
# ---------------------------------------------------------------------------------------

DRIFT_FIRES = 10_000


@pytest.mark.parametrize("seconds", [0.1, 1.5, 7, 3600, 0.001, 2.5e-5, 86_400.000_001])
@pytest.mark.parametrize("start", [utc(2024, 1, 1), utc(2024, 3, 10, 6, 59, 59, 999_999)])
def test_interval_fires_never_drift_via_next_after(seconds: float, start: datetime) -> None:
    schedule = IntervalSchedule(seconds)
    step = timedelta(seconds=seconds)
    fire = start
    for k in range(1, DRIFT_FIRES + 1):
        fire = schedule.next_after(fire)
        assert fire - start == k * step, f"drift at fire {k}"


@pytest.mark.parametrize("seconds", [0.1, 1.5, 7, 3600])
def test_interval_fires_never_drift_via_fire_times(seconds: float) -> None:
    start = utc(2024, 11, 3, 5, 0, 0, 123_456)
    fires = list(next_fires(IntervalSchedule(seconds), start, DRIFT_FIRES))
    assert len(fires) == DRIFT_FIRES
    step = timedelta(seconds=seconds)
    assert fires == [start + k * step for k in range(1, DRIFT_FIRES + 1)]


@settings(max_examples=25, deadline=None)
@given(
    seconds=st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False),
    start=utc_times,
)
def test_interval_fires_never_drift_hypothesis(seconds: float, start: datetime) -> None:
    step = timedelta(seconds=seconds)
    assume(start + DRIFT_FIRES * step <= datetime.max.replace(tzinfo=UTC) - step)
    for k, fire in enumerate(next_fires(IntervalSchedule(seconds), start, DRIFT_FIRES), start=1):
        assert fire - start == k * step


def test_cron_fire_times_are_successive_next_after() -> None:
    schedule = CronSchedule("*/7 * * * *", "America/New_York")
    start = utc(2024, 11, 3, 4, 50)
    fires = list(next_fires(schedule, start, 50))
    assert len(fires) == 50
    assert all(a < b for a, b in zip([start, *fires], fires, strict=False))
    assert fires[0] == utc(2024, 11, 3, 4, 56)  # 00:56 EDT


# ---------------------------------------------------------------------------------------
# 3. DST
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "day", "expected"),
    [
        ("Europe/Berlin", date(2024, 3, 31), utc(2024, 3, 31, 1, 0)),  # 03:00 CEST
        ("America/New_York", date(2024, 3, 10), utc(2024, 3, 10, 7, 0)),  # 03:00 EDT
    ],
)
def test_nonexistent_wall_time_fires_once_at_end_of_gap(zone: str, day: date, expected: datetime) -> None:
    fires = fires_on("30 2 * * *", zone, day)
    assert fires == [expected]
    local = fires[0].astimezone(ZoneInfo(zone))
    assert (local.hour, local.minute) == (3, 0)


@pytest.mark.parametrize(
    ("zone", "expr", "day", "expected"),
    [
        ("Europe/Berlin", "30 2 * * *", date(2024, 10, 27), utc(2024, 10, 27, 0, 30)),  # 02:30 CEST
        ("America/New_York", "30 2 * * *", date(2024, 11, 3), utc(2024, 11, 3, 7, 30)),  # 02:30 EST
        ("America/New_York", "30 1 * * *", date(2024, 11, 3), utc(2024, 11, 3, 5, 30)),  # 01:30 EDT
    ],
)
def test_repeated_wall_time_fires_once_at_first_occurrence(zone: str, expr: str, day: date, expected: datetime) -> None:
    assert fires_on(expr, zone, day) == [expected]


def test_ordinary_days_fire_once_for_fixed_times() -> None:
    for zone in DST_ZONES:
        for day in (date(2024, 1, 15), date(2024, 7, 15)):
            assert len(fires_on("30 2 * * *", zone, day)) == 1
            assert len(fires_on("30 1 * * *", zone, day)) == 1


def test_half_hourly_fires_in_both_passes_of_repeated_hour_new_york() -> None:
    fires = fires_on("*/30 * * * *", "America/New_York", date(2024, 11, 3))
    assert len(fires) == 50  # a 25-hour day
    assert len(set(fires)) == 50
    repeated = [f for f in fires if utc(2024, 11, 3, 5) <= f < utc(2024, 11, 3, 7)]
    assert repeated == [
        utc(2024, 11, 3, 5, 0),
        utc(2024, 11, 3, 5, 30),
        utc(2024, 11, 3, 6, 0),
        utc(2024, 11, 3, 6, 30),
    ]
    ny = ZoneInfo("America/New_York")
    assert [(f.astimezone(ny).hour, f.astimezone(ny).minute) for f in repeated] == [(1, 0), (1, 30), (1, 0), (1, 30)]


def test_half_hourly_fires_in_both_passes_of_repeated_hour_berlin() -> None:
    fires = fires_on("*/30 * * * *", "Europe/Berlin", date(2024, 10, 27))
    assert len(fires) == 50
    repeated = [f for f in fires if utc(2024, 10, 27, 0) <= f < utc(2024, 10, 27, 2)]
    assert repeated == [
        utc(2024, 10, 27, 0, 0),
        utc(2024, 10, 27, 0, 30),
        utc(2024, 10, 27, 1, 0),
        utc(2024, 10, 27, 1, 30),
    ]


def test_half_hourly_on_spring_forward_day_skips_the_gap() -> None:
    fires = fires_on("*/30 * * * *", "America/New_York", date(2024, 3, 10))
    assert len(fires) == 46  # a 23-hour day
    assert utc(2024, 3, 10, 6, 30) in fires  # 01:30 EST
    assert utc(2024, 3, 10, 7, 0) in fires  # 03:00 EDT


@pytest.mark.parametrize(
    "start",
    [
        utc(2024, 11, 3, 5, 30),  # exactly the first 01:30
        utc(2024, 11, 3, 6, 0),  # 01:00 EST, second pass
        utc(2024, 11, 3, 6, 10),  # 01:10 EST, second pass
        utc(2024, 11, 3, 6, 30),  # 01:30 EST, the second occurrence itself
        utc(2024, 11, 3, 6, 45, 0, 1),
    ],
)
def test_next_after_from_inside_second_pass_goes_to_next_day(start: datetime) -> None:
    schedule = CronSchedule("30 1 * * *", "America/New_York")
    nxt = schedule.next_after(start)
    assert nxt == utc(2024, 11, 4, 6, 30)  # 01:30 EST next day
    assert nxt > start


# ---------------------------------------------------------------------------------------
# 4. latest_until
# ---------------------------------------------------------------------------------------


def _check_latest_until(schedule: CronSchedule | IntervalSchedule, slot: datetime, now: datetime) -> datetime:
    latest = schedule.latest_until(slot, now)
    assert slot <= latest <= now
    assert schedule.next_after(latest) > now
    return latest


@settings(max_examples=200, deadline=None)
@given(
    seconds=st.one_of(
        st.sampled_from([0.1, 1.5, 7, 3600]),
        st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False),
    ),
    slot=utc_times,
    gap=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400)),
)
def test_interval_latest_until(seconds: float, slot: datetime, gap: timedelta) -> None:
    schedule = IntervalSchedule(seconds)
    step = timedelta(seconds=seconds)
    now = slot + gap
    latest = _check_latest_until(schedule, slot, now)
    # A fire time: on the grid of the slot.
    assert (latest - slot) % step == timedelta(0)


def test_interval_latest_until_exact_values() -> None:
    schedule = IntervalSchedule(10)
    assert schedule.latest_until(T0, T0) == T0
    assert schedule.latest_until(T0, T0 + timedelta(seconds=9.999999)) == T0
    assert schedule.latest_until(T0, T0 + timedelta(seconds=10)) == T0 + timedelta(seconds=10)
    assert schedule.latest_until(T0, T0 + timedelta(hours=1, seconds=5)) == T0 + timedelta(seconds=3600)


@pytest.mark.parametrize(
    ("expr", "zone", "slot", "now", "expected"),
    [
        ("0 9 * * *", "UTC", utc(2024, 1, 1, 9), utc(2024, 1, 1, 9), utc(2024, 1, 1, 9)),
        ("0 9 * * *", "UTC", utc(2024, 1, 1, 9), utc(2024, 1, 5, 8, 59, 59), utc(2024, 1, 4, 9)),
        ("0 9 * * *", "UTC", utc(2024, 1, 1, 9), utc(2024, 1, 5, 9), utc(2024, 1, 5, 9)),
        # Across spring forward in Berlin: 02:30 does not exist on 03-31, fires at 03:00 CEST.
        ("30 2 * * *", "Europe/Berlin", utc(2024, 3, 29, 1, 30), utc(2024, 3, 31, 1, 10), utc(2024, 3, 31, 1, 0)),
        ("30 2 * * *", "Europe/Berlin", utc(2024, 3, 29, 1, 30), utc(2024, 3, 31, 0, 59), utc(2024, 3, 30, 1, 30)),
        # Across fall back in New York: 01:30 fires once, at its first (EDT) occurrence.
        ("30 1 * * *", "America/New_York", utc(2024, 11, 1, 5, 30), utc(2024, 11, 3, 6, 40), utc(2024, 11, 3, 5, 30)),
        ("30 1 * * *", "America/New_York", utc(2024, 11, 1, 5, 30), utc(2024, 11, 4, 6, 29), utc(2024, 11, 3, 5, 30)),
        ("30 1 * * *", "America/New_York", utc(2024, 11, 1, 5, 30), utc(2024, 11, 4, 6, 30), utc(2024, 11, 4, 6, 30)),
        # Wildcard minute fires in both passes of the repeated hour.
        ("*/30 * * * *", "America/New_York", utc(2024, 11, 3, 4), utc(2024, 11, 3, 6, 10), utc(2024, 11, 3, 6)),
        ("*/30 * * * *", "America/New_York", utc(2024, 11, 3, 4), utc(2024, 11, 3, 5, 59), utc(2024, 11, 3, 5, 30)),
        ("@monthly", "Australia/Lord_Howe", utc(2019, 12, 31, 13), utc(2024, 4, 15), utc(2024, 3, 31, 13)),
    ],
)
def test_cron_latest_until(expr: str, zone: str, slot: datetime, now: datetime, expected: datetime) -> None:
    schedule = CronSchedule(expr, zone)
    assert schedule.next_after(slot - US) == slot, "test data: slot must be a fire time"
    latest = _check_latest_until(schedule, slot, now)
    assert latest == expected
    assert schedule.next_after(latest - US) == latest  # a fire time


@settings(max_examples=100, deadline=None)
@given(
    expr=st.sampled_from([*EXPRESSIONS, "*/30 * * * *"]),
    where=near_dst_transition(),
    gap=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
)
def test_cron_latest_until_around_dst(expr: str, where: tuple[str, datetime], gap: timedelta) -> None:
    zone, t = where
    schedule = CronSchedule(expr, zone)
    slot = schedule.next_after(t - timedelta(days=1))
    now = max(slot, t) + gap
    latest = _check_latest_until(schedule, slot, now)
    assert schedule.next_after(latest - US) == latest


# ---------------------------------------------------------------------------------------
# 5. Bad input
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("61 * * * *", "minute"),
        ("*/0 * * * *", "minute"),
        ("0 0 31 2 *", "never fires"),
        ("0 0 30 2 *", "never fires"),
        ("* * * *", "5 fields"),
        ("", "5 fields"),
    ],
)
def test_invalid_cron_names_field_and_value(expr: str, needle: str) -> None:
    with pytest.raises(InvalidCron) as info:
        CronSchedule(expr, "UTC")
    err = info.value
    assert isinstance(err, TickworkError)
    assert isinstance(err, InvalidInput)
    assert err.field == "cron"
    assert err.value == expr
    message = str(err)
    assert "cron" in message
    assert repr(expr) in message
    assert needle in message.lower()


def test_invalid_timezone_names_field_and_value() -> None:
    with pytest.raises(InvalidTimezone) as info:
        CronSchedule("* * * * *", "Mars/Olympus")
    err = info.value
    assert isinstance(err, TickworkError)
    assert err.field == "timezone"
    assert "timezone" in str(err)
    assert "Mars/Olympus" in str(err)


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), -0.5])
def test_invalid_interval_names_field_and_value(seconds: float) -> None:
    with pytest.raises(InvalidInput) as info:
        IntervalSchedule(seconds)
    err = info.value
    assert isinstance(err, TickworkError)
    assert err.field == "every"
    assert "every" in str(err)
    assert repr(seconds) in str(err)
    if math.isnan(seconds):
        assert "nan" in str(err)


def test_valid_macros_and_case_insensitive_macros_parse() -> None:
    assert CronSchedule("@DAILY", "UTC").next_after(utc(2024, 1, 1, 0, 0)) == utc(2024, 1, 2)
    assert CronSchedule(" @hourly ", "UTC").next_after(utc(2024, 1, 1, 0, 0)) == utc(2024, 1, 1, 1)


# ---------------------------------------------------------------------------------------
# 6. retry_delay
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "backoff", "expected"),
    [
        (1, 1.0, 1.0),
        (2, 1.0, 2.0),
        (3, 1.0, 4.0),
        (5, 0.5, 8.0),
        (9, 1.0, 256.0),
        (10, 1.0, 300.0),
        (3, 100.0, 300.0),
        (1000, 1.0, 300.0),
        (1, 0.25, 0.25),
    ],
)
def test_retry_delay_values(attempt: int, backoff: float, expected: float) -> None:
    assert retry_delay(attempt, backoff) == expected


@settings(max_examples=200, deadline=None)
@given(
    attempt=st.integers(min_value=1, max_value=500),
    backoff=st.floats(min_value=0.001, max_value=1000, allow_nan=False),
)
def test_retry_delay_is_capped_exponential(attempt: int, backoff: float) -> None:
    expected = backoff * 2 ** (attempt - 1) if attempt < 60 else math.inf
    assert retry_delay(attempt, backoff) == min(expected, MAX_RETRY_DELAY)
    assert retry_delay(attempt, backoff) <= retry_delay(attempt + 1, backoff)


def test_retry_delay_cap_is_300() -> None:
    assert MAX_RETRY_DELAY == 300


@pytest.mark.parametrize("attempt", [0, -1])
def test_retry_delay_rejects_attempt_below_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="attempt"):
        retry_delay(attempt, 1)


# ---------------------------------------------------------------------------------------
# 7. jitter_offset
# ---------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    task_id=st.integers(min_value=0, max_value=2**53),
    slot=utc_times,
    jitter=st.floats(min_value=0.5, max_value=86_400, allow_nan=False),
)
def test_jitter_offset_in_range_and_deterministic(task_id: int, slot: datetime, jitter: float) -> None:
    offset = jitter_offset(task_id, slot, jitter)
    assert timedelta(0) <= offset < timedelta(seconds=jitter)
    assert jitter_offset(task_id, slot, jitter) == offset
    # The same instant in another zone is the same slot.
    assert jitter_offset(task_id, slot.astimezone(ZoneInfo("Asia/Kolkata")), jitter) == offset


@pytest.mark.parametrize(("task_id", "jitter"), [(2, 0.000001), (342, 0.01)])
def test_jitter_offset_is_strictly_below_jitter_after_rounding(task_id: int, jitter: float) -> None:
    slot = utc(2024, 1, 1)
    assert jitter_offset(task_id, slot, jitter) < timedelta(seconds=jitter)


@settings(max_examples=300, deadline=None)
@given(
    task_id=st.integers(min_value=0, max_value=2**31),
    slot=utc_times,
    jitter=st.floats(min_value=1e-6, max_value=0.05, allow_nan=False),
)
def test_small_jitter_offsets_stay_below_jitter(task_id: int, slot: datetime, jitter: float) -> None:
    assert timedelta(0) <= jitter_offset(task_id, slot, jitter) < timedelta(seconds=jitter)


@settings(max_examples=50, deadline=None)
@given(task_id=st.integers(min_value=0, max_value=2**31), slot=utc_times)
def test_jitter_offset_zero_without_jitter(task_id: int, slot: datetime) -> None:
    assert jitter_offset(task_id, slot, 0) == timedelta(0)
    assert jitter_offset(task_id, slot, 0.0) == timedelta(0)


def test_jitter_offset_varies_across_slots_and_tasks() -> None:
    jitter = 30.0
    slots = [T0 + k * timedelta(seconds=60) for k in range(200)]
    by_slot = [jitter_offset(7, s, jitter) for s in slots]
    assert len(set(by_slot)) > 150
    assert all(timedelta(0) <= o < timedelta(seconds=jitter) for o in by_slot)
    # Spread over the window, not clustered at one end.
    assert min(by_slot) < timedelta(seconds=jitter / 4)
    assert max(by_slot) > timedelta(seconds=3 * jitter / 4)
    by_task = {jitter_offset(task_id, T0, jitter) for task_id in range(200)}
    assert len(by_task) > 150


# ---------------------------------------------------------------------------------------
# 8. settle and next_slot
# ---------------------------------------------------------------------------------------

NOW = T0 + timedelta(seconds=5)


def test_make_task_defaults_are_consistent() -> None:
    task = make_task()
    assert task.kind is Kind.RECURRING
    assert task.interval == 60.0
    assert make_task(attempt=3).attempt == 3


def test_one_time_completed() -> None:
    task = make_task(kind=Kind.ONE_TIME, interval=None, max_retries=2)
    s = settle(task, ExecutionStatus.COMPLETED, NOW)
    assert s.status is Status.COMPLETED
    assert s.scheduled_at == task.scheduled_at
    assert s.triggered is False


@pytest.mark.parametrize("outcome", [ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT])
@pytest.mark.parametrize("kind", [Kind.ONE_TIME, Kind.RECURRING])
@pytest.mark.parametrize(("attempt", "max_retries", "backoff"), [(1, 1, 1.0), (2, 3, 1.5), (3, 3, 2.0), (12, 20, 1.0)])
def test_failure_with_retries_left_retries_same_slot(
    outcome: ExecutionStatus, kind: Kind, attempt: int, max_retries: int, backoff: float
) -> None:
    task = make_task(
        kind=kind,
        interval=60.0 if kind is Kind.RECURRING else None,
        attempt=attempt,
        max_retries=max_retries,
        retry_backoff=backoff,
        jitter=10.0,
    )
    s = settle(task, outcome, NOW)
    assert s.status is Status.PENDING
    assert s.scheduled_at == task.scheduled_at
    assert s.next_run_at == NOW + timedelta(seconds=retry_delay(attempt, backoff))
    assert s.next_run_at == NOW + timedelta(seconds=min(backoff * 2 ** (attempt - 1), 300))
    assert s.attempt == attempt


@pytest.mark.parametrize("outcome", [ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT])
def test_one_time_failure_without_retries_left_fails(outcome: ExecutionStatus) -> None:
    for attempt, max_retries in [(1, 0), (3, 2)]:
        task = make_task(kind=Kind.ONE_TIME, interval=None, attempt=attempt, max_retries=max_retries)
        s = settle(task, outcome, NOW)
        assert s.status is Status.FAILED
        assert s.scheduled_at == task.scheduled_at


@pytest.mark.parametrize("outcome", [ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT])
def test_recurring_failure_without_retries_left_moves_to_next_slot(outcome: ExecutionStatus) -> None:
    task = make_task(attempt=3, max_retries=2)
    s = settle(task, outcome, NOW)
    assert s.status is Status.PENDING
    assert s.scheduled_at == T0 + timedelta(seconds=60)
    assert s.next_run_at == T0 + timedelta(seconds=60)
    assert s.attempt == 0
    assert s.triggered is False


@pytest.mark.parametrize(
    "outcome",
    [ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.CANCELLED],
)
@pytest.mark.parametrize("kind", [Kind.ONE_TIME, Kind.RECURRING])
def test_cancel_requested_wins_over_any_outcome(outcome: ExecutionStatus, kind: Kind) -> None:
    task = make_task(kind=kind, cancel_requested=True, max_retries=5)
    assert settle(task, outcome, NOW).status is Status.CANCELLED


@pytest.mark.parametrize("kind", [Kind.ONE_TIME, Kind.RECURRING])
def test_cancelled_outcome_cancels(kind: Kind) -> None:
    task = make_task(kind=kind, cancel_requested=False, max_retries=5)
    assert settle(task, ExecutionStatus.CANCELLED, NOW).status is Status.CANCELLED


def test_recurring_interval_next_slot_from_scheduled_at_not_now() -> None:
    task = make_task(interval=60.0, scheduled_at=T0, next_run_at=T0)
    s = settle(task, ExecutionStatus.COMPLETED, T0 + timedelta(seconds=5))
    assert s.status is Status.PENDING
    assert s.scheduled_at == T0 + timedelta(seconds=60)
    assert s.next_run_at == T0 + timedelta(seconds=60)
    assert s.attempt == 0
    assert next_slot(task, T0 + timedelta(seconds=5)) == T0 + timedelta(seconds=60)


def test_recurring_cron_next_slot_from_scheduled_at_not_now() -> None:
    slot = utc(2024, 6, 1, 7, 0)  # 09:00 CEST
    task = make_task(cron="0 9 * * *", timezone="Europe/Berlin", interval=None, scheduled_at=slot, next_run_at=slot)
    s = settle(task, ExecutionStatus.COMPLETED, slot + timedelta(minutes=3, seconds=7))
    assert s.scheduled_at == utc(2024, 6, 2, 7, 0)
    assert s.next_run_at == utc(2024, 6, 2, 7, 0)


def test_recurring_settles_chain_without_drift_even_with_jitter_and_late_runs() -> None:
    task = make_task(interval=1.5, jitter=1.0, misfire_grace=60.0, scheduled_at=T0, next_run_at=T0)
    for k in range(1, 2001):
        # Each run starts at its jittered time and takes a little while.
        now = task.next_run_at + timedelta(milliseconds=k % 700)
        s = settle(task, ExecutionStatus.COMPLETED, now)
        assert s.scheduled_at == T0 + k * timedelta(seconds=1.5)
        assert timedelta(0) <= s.next_run_at - s.scheduled_at < timedelta(seconds=1.0)
        task = dataclasses.replace(task, scheduled_at=s.scheduled_at, next_run_at=s.next_run_at)


def test_jitter_moves_only_next_run_at() -> None:
    task = make_task(interval=60.0, jitter=30.0)
    s = settle(task, ExecutionStatus.COMPLETED, NOW)
    assert s.scheduled_at == T0 + timedelta(seconds=60)
    offset = s.next_run_at - s.scheduled_at
    assert timedelta(0) <= offset < timedelta(seconds=30)
    assert offset == jitter_offset(task.id, s.scheduled_at, 30.0)


def test_jitter_varies_across_slots_in_settle() -> None:
    offsets = set()
    for k in range(50):
        slot = T0 + k * timedelta(seconds=60)
        task = make_task(interval=60.0, jitter=30.0, scheduled_at=slot, next_run_at=slot)
        s = settle(task, ExecutionStatus.COMPLETED, slot + timedelta(seconds=1))
        assert s.scheduled_at == slot + timedelta(seconds=60)
        offsets.add(s.next_run_at - s.scheduled_at)
    assert len(offsets) > 40


@pytest.mark.parametrize("outcome", [ExecutionStatus.COMPLETED, ExecutionStatus.FAILED])
def test_triggered_recurring_run_keeps_its_slot(outcome: ExecutionStatus) -> None:
    future_slot = T0 + timedelta(hours=1)
    task = make_task(triggered=True, scheduled_at=future_slot, next_run_at=T0, jitter=20.0)
    s = settle(task, outcome, NOW)
    assert s.status is Status.PENDING
    assert s.scheduled_at == future_slot
    assert s.next_run_at == future_slot + jitter_offset(task.id, future_slot, 20.0)
    assert s.triggered is False
    assert s.attempt == 0


def test_next_slot_never_collapses_missed_slots() -> None:
    """Missed slots are the misfire decision's business, at claim time, not settle's."""
    task = make_task(interval=10.0, misfire_grace=60.0, scheduled_at=T0, next_run_at=T0)
    assert next_slot(task, T0 + timedelta(hours=1)) == T0 + timedelta(seconds=10)


def test_cron_next_slot_across_days_in_zone() -> None:
    slot = utc(2024, 3, 30, 8, 0)  # 09:00 CET
    task = make_task(cron="0 9 * * *", timezone="Europe/Berlin", interval=None, scheduled_at=slot)
    assert next_slot(task, utc(2024, 4, 2)) == utc(2024, 3, 31, 7, 0)  # 09:00 CEST


def test_next_slot_rejects_non_recurring_task() -> None:
    task = make_task(kind=Kind.ONE_TIME, interval=None, cron=None)
    with pytest.raises(ValueError, match="not recurring"):
        next_slot(task, NOW)


def test_outcome_with_puts_each_value_in_its_own_field() -> None:
    """outcome_with builds the Outcome by position: every field gets a value of its own
    here, so a field order that no longer matches shows."""
    from tickwork.model import Claim, ErrorInfo, Outcome
    from tickwork.schedules import Settlement, outcome_with

    t0 = datetime(2026, 12, 5, tzinfo=UTC)
    task = make_task(id=11, version=12)
    then = Settlement(Status.PENDING, t0 + timedelta(seconds=1), t0 + timedelta(seconds=2), 13, True)
    error = ErrorInfo("E", "m", "tb")
    named: dict[str, Any] = {
        "error": error, "started_at": t0 + timedelta(seconds=3), "skipped": 14,
        "skipped_last": t0 + timedelta(seconds=4), "decision": "decided", "result": {"r": 1}, "note": "noted",
        "counts": False, "lost_runs": 15,
    }  # fmt: skip
    made = outcome_with(Claim(task, 16, t0), ExecutionStatus.FAILED, then, t0 + timedelta(seconds=5), **named)
    assert made == Outcome(
        task_id=11, fence=12, execution_id=16, status=ExecutionStatus.FAILED, task_status=Status.PENDING,
        scheduled_at=t0 + timedelta(seconds=1), next_run_at=t0 + timedelta(seconds=2), attempt=13, triggered=True,
        finished_at=t0 + timedelta(seconds=5), **named,
    )  # fmt: skip
    assert type(made) is Outcome
