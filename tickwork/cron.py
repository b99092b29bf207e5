"""Cron expressions in an IANA zone, with ISC cron's DST rule.

cronsim parses the five fields and walks the calendar; it is used here only on naive
wall-clock times, where it is exact. What it gets wrong around offset changes (it steps
whole hours from :00, so a zone whose change is not a whole hour loses wall times, and
it can answer a time before the start inside a repeated hour) is done here instead:
the zone's offset segments come from ``tickwork.zones`` and the rule is applied at
each change.

The rule (README "Cron and daylight saving time"):
- an entry whose minute and hour fields are both fixed (neither starts with ``*``) fires
  once at the change when a forward change skips its wall time, and only on the first
  pass of a repeated (fall-back) wall time;
- an entry with ``*`` at the start of its minute or hour field follows the wall clock:
  skipped wall times never fire, repeated ones fire in both passes.
Changes of any size (Pacific/Apia skipping a whole day) are treated alike.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from tickwork.errors import InvalidCron, InvalidTimezone
from tickwork.zones import FIRST_INSTANT, LAST_INSTANT, Segment, segment_at

CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_ALLOWED = ("0-59", "0-23", "1-31, L or LW", "1-12 or JAN-DEC", "0-7 or SUN-SAT, with L or #n")
MAX_DIGITS = 4
"""No cron number needs more digits (a step over 59 is allowed but pointless); longer
runs of digits are refused before they reach int() (whose limit is 4,300 digits)."""

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NAMES = {3: {m: i for i, m in enumerate(_MONTHS, start=1)}, 4: {d: i for i, d in enumerate(_DAYS)}}
_STEPPED_RANGE = re.compile(r"^(\w+)-(\w+)/(\d+)$")
_ONE_MICROSECOND = timedelta(microseconds=1)
_DIGIT_RUN = re.compile(rf"[0-9]{{{MAX_DIGITS + 1},}}")
_EXCEPTIONS = (CronSimError, ValueError, OverflowError, IndexError)


def parse_timezone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidTimezone("timezone", name, "must be an IANA time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidTimezone("timezone", name, "unknown IANA time zone") from exc


@dataclasses.dataclass(frozen=True)
class CronSchedule:
    """A standard 5-field cron expression (or @macro) evaluated in an IANA zone."""

    expression: str
    timezone: str = "UTC"
    _zone: ZoneInfo = dataclasses.field(init=False, repr=False, compare=False)
    _fields: tuple[str, ...] = dataclasses.field(init=False, repr=False, compare=False)
    _recent: list[Segment] = dataclasses.field(init=False, repr=False, compare=False, default_factory=list)

    def __post_init__(self) -> None:
        # Zone first: a bad zone is reported even when the expression is bad too.
        object.__setattr__(self, "_zone", parse_timezone(self.timezone))
        object.__setattr__(self, "_fields", validate(self.expression))

    @property
    def normalized(self) -> str:
        return " ".join(self._fields)

    @property
    def fixed(self) -> bool:
        """Both minute and hour fixed: the entry fires once per wall time, whatever DST does."""
        minute, hour = self._fields[0], self._fields[1]
        return not minute.startswith("*") and not hour.startswith("*")

    def next_after(self, after: datetime) -> datetime:
        """The first fire time strictly after ``after`` (aware in, UTC out)."""
        found = self.first_after(after)
        if found is None:
            raise InvalidCron("cron", self.expression, f"no fire time after {after.isoformat()}")
        return found

    def first_after(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after``, or None (none before year 9999)."""
        after = max(after.astimezone(UTC), FIRST_INSTANT - _ONE_MICROSECOND)  # local times stay in range
        if after >= LAST_INSTANT:
            return None
        segment = self._segment_at(max(after, FIRST_INSTANT))
        while True:
            found = self._first_in(segment, after)
            if found is not None or segment.end >= LAST_INSTANT:
                return found
            segment = self._segment_at(segment.end)

    def last_at_or_before(self, when: datetime) -> datetime | None:
        """The latest fire time at or before ``when``, or None (none since year 2)."""
        when = min(when.astimezone(UTC), LAST_INSTANT - _ONE_MICROSECOND)  # local times stay in range
        if when < FIRST_INSTANT:
            return None
        segment = self._segment_at(when)
        while True:
            found = self._last_in(segment, when)
            if found is not None or segment.start <= FIRST_INSTANT:
                return found
            when = segment.start - _ONE_MICROSECOND
            segment = self._segment_at(when)

    def latest_until(self, slot: datetime, now: datetime) -> datetime:
        """The last fire time in [slot, now], given that ``slot`` is a fire time <= now."""
        latest = self.last_at_or_before(now)
        return slot if latest is None or latest < slot else latest

    def explain(self) -> str | None:
        """The expression in words (cronsim's), or None where cronsim cannot say."""
        try:
            return str(CronSim(self.normalized, datetime(2000, 1, 1)).explain())
        except Exception:  # explain() is a nicety: no input may turn it into an error
            return None

    def _segment_at(self, when: datetime) -> Segment:
        """Successive slots of a task mostly share a segment: keep the last one found."""
        recent = self._recent[-1:]
        if recent and recent[0].start <= when < recent[0].end:
            return recent[0]
        segment = segment_at(self._zone, when)
        self._recent[:] = [segment]
        return segment

    def _first_in(self, segment: Segment, after: datetime) -> datetime | None:
        """The first fire in ``segment`` strictly after ``after``."""
        offset = segment.offset
        if self.fixed and segment.gap and segment.start > after and self._gap_matches(segment):
            return segment.start
        lowest_wall = segment.start + offset
        if self.fixed and segment.fold:
            lowest_wall = segment.start + segment.before  # the repeated walls fired on their first pass
        wall = self._wall_after(max(_naive(after + offset), _naive(lowest_wall) - _ONE_MICROSECOND))
        if wall is None:
            return None
        instant = wall.replace(tzinfo=UTC) - offset
        return instant if instant < segment.end else None

    def _last_in(self, segment: Segment, when: datetime) -> datetime | None:
        """The last fire in ``segment`` at or before ``when`` (which lies in it)."""
        offset = segment.offset
        lowest_wall = segment.start + (segment.before if self.fixed and segment.fold else offset)
        wall = self._wall_at_or_before(_naive(when + offset))
        if wall is not None and wall >= _naive(lowest_wall):
            return wall.replace(tzinfo=UTC) - offset
        if self.fixed and segment.gap and self._gap_matches(segment):
            return segment.start
        return None

    def _gap_matches(self, segment: Segment) -> bool:
        """Whether a wall time skipped by the forward change at the segment's start matches."""
        skipped_from = _naive(segment.start + segment.before)
        wall = self._wall_after(skipped_from - _ONE_MICROSECOND)
        return wall is not None and wall < _naive(segment.start + segment.offset)

    def _wall_after(self, wall: datetime) -> datetime | None:
        try:
            return next(CronSim(self.normalized, wall))
        except (StopIteration, OverflowError):
            return None

    def _wall_at_or_before(self, wall: datetime) -> datetime | None:
        try:
            return next(CronSim(self.normalized, wall + _ONE_MICROSECOND, reverse=True))
        except (StopIteration, OverflowError):
            return None


def _naive(when: datetime) -> datetime:
    """A UTC datetime shifted by an offset, read as a wall-clock time."""
    return when.replace(tzinfo=None)


def validate(expression: object) -> tuple[str, ...]:
    """The five fields of a valid expression, or InvalidCron naming the bad field."""
    if not isinstance(expression, str):
        raise InvalidCron("cron", expression, "must be a string")
    text = expression.strip()
    text = CRON_MACROS.get(text.lower(), text)
    if text.startswith("@"):
        raise InvalidCron("cron", expression, f"unknown macro; use one of {', '.join(CRON_MACROS)}")
    if not text.isascii() or not text.isprintable():
        raise InvalidCron("cron", expression, "only printable ASCII characters may appear in a cron expression")
    fields = tuple(text.split())
    if len(fields) != 5:
        raise InvalidCron("cron", expression, f"expected 5 fields (minute hour day month weekday), got {len(fields)}")
    for index, (name, field, allowed) in enumerate(zip(FIELDS, fields, _ALLOWED, strict=True)):
        if _DIGIT_RUN.search(field):
            raise InvalidCron("cron", expression, f"{name} field {_shown(field)}: number too long")
        alone = ["*"] * 5
        alone[index] = field
        try:
            CronSim(" ".join(alone), datetime(2000, 1, 1))
        except _EXCEPTIONS as exc:
            reason = f"{name} field {_shown(field)} is invalid (values {allowed})"
            raise InvalidCron("cron", expression, reason) from exc
    fields = tuple(_single_value_ranges(index, field) for index, field in enumerate(fields))
    try:
        next(CronSim(" ".join(fields), datetime(2000, 1, 1)))
    except _EXCEPTIONS as exc:
        raise InvalidCron("cron", expression, _never_fires(fields)) from exc
    except StopIteration as exc:
        raise InvalidCron("cron", expression, _never_fires(fields)) from exc
    return fields


def _single_value_ranges(index: int, field: str) -> str:
    """``5-5/10`` is the one value 5 (as in Vixie cron); cronsim reads a stepped range
    of one value as "from it to the end of the field", so such terms become the value."""
    terms = []
    for term in field.split(","):
        if (match := _STEPPED_RANGE.match(term)) and _value(index, match[1]) == _value(index, match[2]) is not None:
            term = match[1]
        terms.append(term)
    return ",".join(terms)


def _value(index: int, text: str) -> int | None:
    if text.isdigit():
        return int(text)
    return _NAMES.get(index, {}).get(text.upper())


def _never_fires(fields: tuple[str, ...]) -> str:
    return f"expression never fires: day-of-month {fields[2]} does not occur in month {fields[3]}"


def _shown(field: str) -> str:
    return repr(field) if len(field) <= 20 else repr(field[:17] + "...")
