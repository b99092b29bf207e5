"""Unit tests of ``tickwork.missed_slots``: the runs a backfill schedules and the skip
recorded when a paused task is resumed without catching up. No store: "now" is given."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from tests.test_schedules import T0, make_task
from tickwork.errors import InvalidInput
from tickwork.missed_slots import MAX_BACKFILL, backfill_runs, backfill_slots, skip_while_paused, window
from tickwork.model import Kind, Misfire, OnLost, Status

MINUTE = timedelta(minutes=1)


def test_a_backfill_runs_each_slot_in_the_range_once_as_a_one_time_child() -> None:
    task = make_task(interval=60.0, scheduled_at=T0, timeout=9.0, on_lost=OnLost.FAIL, max_runtime=30.0)
    runs = backfill_runs(task, window(T0 - 5 * MINUTE + timedelta(seconds=1), T0 - MINUTE), T0)
    assert [r.scheduled_at for r in runs] == [T0 - n * MINUTE for n in (4, 3, 2, 1)]
    first = runs[0]
    assert (first.kind, first.next_run_at, first.misfire) == (Kind.ONE_TIME, first.scheduled_at, Misfire.CATCHUP)
    assert first.key == f"backfill:7:{first.scheduled_at.isoformat()}" and first.parent_id == 7
    assert (first.timeout, first.on_lost, first.max_runtime) == (9.0, OnLost.FAIL, 30.0)


def test_an_interval_grid_is_anchored_on_the_tasks_own_slots() -> None:
    task = make_task(interval=60.0, scheduled_at=T0 + timedelta(seconds=20))
    slots = backfill_slots(task, window(T0 - 3 * MINUTE, T0), T0)
    assert slots == [T0 - timedelta(seconds=160), T0 - timedelta(seconds=100), T0 - timedelta(seconds=40)]


def test_cron_slots_and_an_empty_range() -> None:
    task = make_task(interval=None, cron="*/15 * * * *")
    assert backfill_slots(task, window(T0 - timedelta(hours=1), T0), T0) == [
        T0 - timedelta(minutes=m) for m in (60, 45, 30, 15, 0)
    ]
    assert backfill_runs(task, window(T0 - 10 * MINUTE, T0 - 5 * MINUTE), T0) == []


def test_bad_ranges_are_refused_quoting_the_end_as_given() -> None:
    berlin = timezone(timedelta(hours=2))
    with pytest.raises(InvalidInput, match="task_id=7: only a recurring task"):
        backfill_slots(make_task(kind=Kind.ONE_TIME, interval=None), window(T0 - MINUTE, T0), T0)
    end = (T0 - 2 * MINUTE).astimezone(berlin)
    with pytest.raises(InvalidInput, match=re.escape(f"end='{end.isoformat()}': must not be before start")):
        backfill_slots(make_task(), window(T0 - MINUTE, end), T0)
    with pytest.raises(InvalidInput, match="must not be in the future"):
        backfill_slots(make_task(), window(T0 - MINUTE, T0 + MINUTE), T0)
    with pytest.raises(InvalidInput, match=f"more than {MAX_BACKFILL} slots"):
        backfill_slots(make_task(interval=1.0), window(T0 - timedelta(seconds=MAX_BACKFILL), T0), T0)
    with pytest.raises(InvalidInput, match="start="):
        window(datetime(2024, 1, 1), T0)


def test_resuming_without_catch_up_skips_the_slots_missed_while_paused() -> None:
    paused = make_task(status=Status.PAUSED, scheduled_at=T0 - 10 * MINUTE, jitter=0.0, version=4)
    skipping = skip_while_paused(paused, T0 + timedelta(seconds=30))
    assert skipping is not None
    assert (skipping.version, skipping.count) == (4, 11)
    assert (skipping.first, skipping.last) == (T0 - 10 * MINUTE, T0)
    assert skipping.next_slot == skipping.next_run_at == T0 + MINUTE
    assert skipping.decision.startswith("resumed without catch-up: 11 missed slots skipped")


def test_nothing_to_skip() -> None:
    paused = make_task(status=Status.PAUSED, scheduled_at=T0 + MINUTE)
    assert skip_while_paused(paused, T0) is None  # its slot is still ahead
    assert skip_while_paused(make_task(status=Status.PENDING, scheduled_at=T0 - 10 * MINUTE), T0) is None
    one_time = make_task(status=Status.PAUSED, kind=Kind.ONE_TIME, interval=None, scheduled_at=T0 - MINUTE)
    assert skip_while_paused(one_time, T0) is None
    assert skip_while_paused(paused, T0 + 2 * MINUTE) is not None  # and now it is missed
