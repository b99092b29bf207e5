"""When a schedule fires: the Schedule protocol, the fixed-rate interval grid, and the
public ``fire_times`` that answers "the next N fire times after T" without a database.

A leaf of the package (it knows cron and errors only), so that the entities, the policy
and the client API can all ask it without importing each other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Protocol

from tickwork.cron import CronSchedule, parse_timezone
from tickwork.errors import InvalidInput


def require_aware(field: str, value: datetime) -> datetime:
    """Refuse naive datetimes: their meaning depends on the machine that reads them."""
    if not isinstance(value, datetime):
        raise InvalidInput(field, value, "must be a timezone-aware datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(field, value.isoformat(), "datetime must be timezone-aware")
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:  # 0001-01-01T00:00+14:00 is before year 1 in UTC
        raise InvalidInput(field, value.isoformat(), "out of range once converted to UTC") from exc


class Schedule(Protocol):
    def next_after(self, after: datetime) -> datetime:
        """The first nominal fire time strictly after ``after`` (UTC in, UTC out)."""
        ...

    def latest_until(self, slot: datetime, now: datetime) -> datetime:
        """The last fire time in [slot, now], given that ``slot`` is a fire time <= now."""
        ...


@dataclasses.dataclass(frozen=True)
class IntervalSchedule:
    """Fixed rate: slots are exact multiples of ``seconds`` from the first slot."""

    seconds: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.seconds) or self.seconds <= 0:
            raise InvalidInput("every", self.seconds, "interval must be a positive number of seconds")
        if timedelta(seconds=self.seconds) < timedelta(microseconds=1):
            raise InvalidInput("every", self.seconds, "interval must be at least 1 microsecond")

    def next_after(self, after: datetime) -> datetime:
        # Called with a slot, so adding the exact timedelta keeps every slot on the grid.
        return after.astimezone(UTC) + timedelta(seconds=self.seconds)

    def latest_until(self, slot: datetime, now: datetime) -> datetime:
        step = timedelta(seconds=self.seconds)
        return slot + ((now - slot) // step) * step


def next_fires(schedule: Schedule, after: datetime, count: int) -> Iterator[datetime]:
    """The next ``count`` fire times strictly after ``after`` (fewer at the end of time)."""
    current = after
    for _ in range(count):
        try:
            current = schedule.next_after(current)
        except (InvalidInput, OverflowError):
            return
        yield current


MAX_FIRE_TIMES = 10_000
"""The most fire times one ``fire_times`` call answers."""


def fire_times(
    *,
    cron: str | None = None,
    every: float | timedelta | None = None,
    timezone: str = "UTC",
    after: datetime | None = None,
    n: int = 5,
    anchor: datetime | None = None,
) -> list[datetime]:
    """The next ``n`` fire times strictly after ``after`` (default: now), as aware UTC
    datetimes, computed without a database by the rules a node uses.

    ``cron`` is read in ``timezone`` with the DST rule of the README; ``every`` (seconds
    or a timedelta) counts real elapsed time on the grid ``anchor + k * every``, where
    ``anchor`` defaults to ``after``. Fewer than ``n`` come back only at year 9999.
    """
    if (cron is None) == (every is None):
        raise InvalidInput("cron", cron, "give exactly one of cron or every")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_FIRE_TIMES:
        raise InvalidInput("n", n, f"must be an integer from 1 to {MAX_FIRE_TIMES}")
    start = datetime.now(UTC) if after is None else require_aware("after", after)
    if cron is not None:
        if anchor is not None:
            raise InvalidInput("anchor", anchor, "only applies to every")
        return list(next_fires(CronSchedule(cron, timezone), start, n))
    if timezone != "UTC":
        parse_timezone(timezone)
        raise InvalidInput("timezone", timezone, "only applies to cron schedules")
    step = _interval("every", every)
    grid = start if anchor is None else require_aware("anchor", anchor)
    first = (start - grid) // step + 1  # the first multiple of step strictly after start
    times = []
    for k in range(first, first + n):
        try:
            times.append(grid + k * step)
        except OverflowError:
            break
    return times


def _interval(field: str, value: object) -> timedelta:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidInput(field, value, "must be a number of seconds or a timedelta")
    IntervalSchedule(float(seconds))  # positive, finite, at least a microsecond
    try:
        return timedelta(seconds=seconds)
    except OverflowError as exc:
        raise InvalidInput(field, value, "too large") from exc
