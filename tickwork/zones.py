"""The stretches of time over which an IANA zone's UTC offset is constant.

Cron's DST rule is stated in terms of a zone's changes (a fixed-time entry whose wall
time a forward change skips fires at the change; a repeated wall time fires on its
first pass only), so the cron evaluator must know where the changes are. ``zoneinfo``
answers "what is the offset at instant t" but does not list its transitions, so they
are found here by sampling the offset every few hours and bisecting each change to the
second, once per zone and UTC year (cached). Since 1970 no two changes of any zone in
the tz database lie closer than six days (``tests/test_zones.py`` checks it against the
compiled data), far more than the sampling step.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

SAMPLE_SECONDS = 6 * 3600
"""Step between offset samples; must stay below half the closest pair of changes."""

SEARCH_YEARS = 3
"""How many UTC years to look back and ahead for the change that bounds a segment; a
segment with no change that near is cut there (an artificial cut, with no gap or fold)."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FIRST_YEAR, _LAST_YEAR = 2, 9998  # local times of any zone stay inside datetime's range


@dataclasses.dataclass(frozen=True)
class Change:
    """The zone's offset changes from ``before`` to ``after`` at the UTC second ``at``."""

    at: int
    before: int
    after: int


@dataclasses.dataclass(frozen=True)
class Segment:
    """Instants in [start, end) share one UTC ``offset``; ``before`` is the offset just
    before ``start`` (equal to ``offset`` at an artificial cut)."""

    start: datetime
    end: datetime
    offset: timedelta
    before: timedelta

    @property
    def gap(self) -> timedelta:
        """How much wall time the change at ``start`` skipped (forward change), else 0."""
        return max(self.offset - self.before, timedelta(0))

    @property
    def fold(self) -> timedelta:
        """How much wall time the change at ``start`` repeats (backward change), else 0."""
        return max(self.before - self.offset, timedelta(0))


def segment_at(zone: ZoneInfo, when: datetime) -> Segment:
    """The segment of ``zone`` that contains the instant ``when`` (aware); instants
    outside years 2 to 9998 are taken as the nearest one inside."""
    second = min(max(_floor_second(when), _year_start(_FIRST_YEAR)), _year_start(_LAST_YEAR + 1) - 1)
    year = (EPOCH + timedelta(seconds=second)).year
    previous = _change_at_or_before(zone, second, year)
    following = _change_after(zone, second, year)
    if previous is None:
        offset = _offset(zone, second)
        start, before = _year_start(max(year - SEARCH_YEARS, _FIRST_YEAR)), offset
    else:
        start, before, offset = previous.at, previous.before, previous.after
    end = _year_start(min(year + SEARCH_YEARS, _LAST_YEAR) + 1) if following is None else following.at
    return Segment(
        start=EPOCH + timedelta(seconds=start),
        end=EPOCH + timedelta(seconds=end),
        offset=timedelta(seconds=offset),
        before=timedelta(seconds=before),
    )


def _change_at_or_before(zone: ZoneInfo, second: int, year: int) -> Change | None:
    for y in range(min(year, _LAST_YEAR), max(year - SEARCH_YEARS, _FIRST_YEAR) - 1, -1):
        changes = year_changes(zone, y)
        index = bisect.bisect_right(changes, second, key=_at)
        if index:
            return changes[index - 1]
    return None


def _change_after(zone: ZoneInfo, second: int, year: int) -> Change | None:
    for y in range(max(year, _FIRST_YEAR), min(year + SEARCH_YEARS, _LAST_YEAR) + 1):
        changes = year_changes(zone, y)
        index = bisect.bisect_right(changes, second, key=_at)
        if index < len(changes):
            return changes[index]
    return None


@functools.lru_cache(maxsize=4096)
def year_changes(zone: ZoneInfo, year: int) -> tuple[Change, ...]:
    """Every offset change of ``zone`` at a UTC second within the UTC year ``year``."""
    if zone.key == "UTC" or not _FIRST_YEAR <= year <= _LAST_YEAR:
        return ()
    first, last = _year_start(year), _year_start(year + 1) - 1
    samples = [first - 1, *range(first, last, SAMPLE_SECONDS), last]
    changes = []
    low, low_offset = samples[0], _offset(zone, samples[0])
    for high in samples[1:]:
        high_offset = _offset(zone, high)
        if high_offset != low_offset:
            changes.append(_bisect_change(zone, low, low_offset, high))
        low, low_offset = high, high_offset
    return tuple(changes)


def _bisect_change(zone: ZoneInfo, low: int, low_offset: int, high: int) -> Change:
    """The one change in (low, high]: the first second whose offset differs from low's."""
    while high - low > 1:
        middle = (low + high) // 2
        if _offset(zone, middle) == low_offset:
            low = middle
        else:
            high = middle
    return Change(at=high, before=low_offset, after=_offset(zone, high))


def _at(change: Change) -> int:
    return change.at


def _offset(zone: ZoneInfo, second: int) -> int:
    offset = datetime.fromtimestamp(second, zone).utcoffset()
    assert offset is not None
    return int(offset.total_seconds())


def _year_start(year: int) -> int:
    return int((datetime(year, 1, 1, tzinfo=UTC) - EPOCH).total_seconds())


def _floor_second(when: datetime) -> int:
    return (when.astimezone(UTC) - EPOCH) // timedelta(seconds=1)


LAST_INSTANT = EPOCH + timedelta(seconds=_year_start(_LAST_YEAR + 1))
"""Segments end here at the latest: cron fire times are not looked for beyond it."""
FIRST_INSTANT = EPOCH + timedelta(seconds=_year_start(_FIRST_YEAR))
"""Segments start here at the earliest."""
