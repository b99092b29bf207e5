"""Offset segments found by sampling zoneinfo, checked against the compiled tz data."""

from __future__ import annotations

import itertools
import zoneinfo
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, _zoneinfo

import pytest

from tickwork import InvalidInput, fire_times
from tickwork.cron import CronSchedule
from tickwork.zones import SAMPLE_SECONDS, segment_at, year_changes

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "Pacific/Apia",
    "America/Sao_Paulo",
    "Africa/Casablanca",
    "Asia/Gaza",
    "Antarctica/Troll",
    "UTC",
]
EXPLICIT_UNTIL = 2037  # compiled files list every change up to here, a POSIX rule after


def compiled_changes(name: str, first: int, last: int) -> list[tuple[int, int, int]]:
    """(second, offset before, offset after) of each offset change in the compiled file.

    Reads the pure-Python zoneinfo's parsed transitions (private attributes, in a test
    only): an independent source for what the sampler must find.
    """
    zone = _zoneinfo.ZoneInfo.no_cache(name)  # type: ignore[attr-defined]
    low = int(datetime(first, 1, 1, tzinfo=UTC).timestamp())
    high = int(datetime(last + 1, 1, 1, tzinfo=UTC).timestamp())
    found = []
    previous = zone._tti_before
    for second, info in zip(zone._trans_utc, zone._ttinfos, strict=True):
        before = previous.utcoff if previous is not None else info.utcoff
        if low <= second < high and info.utcoff != before:
            found.append((second, int(before.total_seconds()), int(info.utcoff.total_seconds())))
        previous = info
    return found


def test_no_two_offset_changes_since_1970_are_closer_than_twice_the_sampling_step() -> None:
    closest = timedelta.max
    for name in sorted(zoneinfo.available_timezones()):
        seconds = [s for s, _, _ in compiled_changes(name, 1970, EXPLICIT_UNTIL)]
        for a, b in itertools.pairwise(seconds):
            closest = min(closest, timedelta(seconds=b - a))
    assert closest > timedelta(seconds=2 * SAMPLE_SECONDS), closest


@pytest.mark.parametrize("name", ZONES)
def test_sampled_changes_equal_the_compiled_ones(name: str) -> None:
    zone = ZoneInfo(name)
    sampled = [(c.at, c.before, c.after) for year in range(1990, EXPLICIT_UNTIL + 1) for c in year_changes(zone, year)]
    assert sampled == compiled_changes(name, 1990, EXPLICIT_UNTIL)


def test_segments_bound_each_instant_with_its_offset() -> None:
    zone = ZoneInfo("Europe/Berlin")
    summer = segment_at(zone, datetime(2025, 7, 1, tzinfo=UTC))
    assert summer.start == datetime(2025, 3, 30, 1, 0, tzinfo=UTC)
    assert summer.end == datetime(2025, 10, 26, 1, 0, tzinfo=UTC)
    assert summer.offset == timedelta(hours=2) and summer.gap == timedelta(hours=1) and summer.fold == timedelta(0)
    winter = segment_at(zone, summer.end)
    assert winter.start == summer.end and winter.fold == timedelta(hours=1) and winter.gap == timedelta(0)
    apia = segment_at(ZoneInfo("Pacific/Apia"), datetime(2011, 12, 30, 10, 0, tzinfo=UTC))
    assert apia.gap == timedelta(hours=24)  # the day that was skipped


def test_a_zone_without_changes_has_long_artificial_segments() -> None:
    segment = segment_at(ZoneInfo("Asia/Kolkata"), datetime(2030, 6, 1, tzinfo=UTC))
    assert segment.offset == timedelta(hours=5, minutes=30) and segment.gap == segment.fold == timedelta(0)
    assert segment.start <= datetime(2030, 1, 1, tzinfo=UTC) and segment.end > datetime(2031, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("when", [datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, tzinfo=UTC)])
def test_segments_at_the_ends_of_time(when: datetime) -> None:
    segment = segment_at(ZoneInfo("Pacific/Kiritimati"), when)
    assert segment.start <= segment.end


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Etc/GMT+12", "Pacific/Apia", "UTC"])
@pytest.mark.parametrize(
    "when",
    [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(2, 1, 1, tzinfo=UTC),
        datetime(9998, 12, 31, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, tzinfo=UTC),
    ],
)
def test_cron_at_the_ends_of_time_answers_without_overflowing(zone: str, when: datetime) -> None:
    schedule = CronSchedule("30 2 * * *", zone)
    following = schedule.first_after(when)
    assert following is None or following > when
    previous = schedule.last_at_or_before(when)
    assert previous is None or previous <= when
    assert all(t > when for t in fire_times(cron="* * * * *", timezone=zone, after=when, n=3))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": "* * * * *", "after": "2030-01-01T00:00:00Z"}, "after"),
        ({"every": 60, "anchor": 1_700_000_000}, "anchor"),
        ({"cron": "* * * * *", "timezone": 5}, "timezone"),
        ({"cron": 5}, "cron"),
        ({"every": "60"}, "every"),
        ({"cron": "* * * * *", "n": True}, "n"),
    ],
)
def test_fire_times_refuse_values_of_the_wrong_type_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        fire_times(**kwargs)  # type: ignore[arg-type]
    assert refused.value.field == field
