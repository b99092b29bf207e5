"""An independent check of ``tickwork.fire_times`` against a brute-force reference of
ISC cron's DST rule, written from the rule alone (not from tickwork's implementation).

The rule, on the wall clock of the IANA zone:

* An entry whose minute and hour fields are both fixed (neither starts with ``*``) fires
  once at the first valid instant after a forward change if one of its wall times was
  skipped, and in a repeated (fall-back) stretch only at the first occurrence of its wall
  time.
* An entry with ``*`` at the start of its minute or hour field follows the wall clock:
  nothing for skipped wall times, and it fires in both passes of a repeated stretch.
* Changes of any size (Pacific/Apia skipped 2011-12-30) are treated alike, and several
  skipped wall times of one gap fire once together.

Time inside the reference is an integer count of minutes since 1970-01-01 00:00 UTC;
a wall time is the same count on the naive local clock (UTC minute + offset minutes).
Offsets and the instants of change are checked to be whole minutes, not assumed.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tickwork
from tests.test_schedules import make_task
from tickwork.errors import InvalidCron, TickworkError
from tickwork.model import ExecutionStatus, Status, Task

# ---------------------------------------------------------------------------------------
# Time helpers
# ---------------------------------------------------------------------------------------

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
MINUTE = timedelta(minutes=1)
DAY_MINUTES = 1440
US = timedelta(microseconds=1)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


def to_minute(t: datetime) -> int:
    """The UTC minute containing ``t`` (floor)."""
    return (t - EPOCH) // MINUTE


def from_minute(m: int) -> datetime:
    return EPOCH + m * MINUTE


def offset_minutes(zi: ZoneInfo, m: int) -> int:
    """The zone's UTC offset during UTC minute ``m``, straight from zoneinfo; checks it is whole minutes."""
    off = from_minute(m).astimezone(zi).utcoffset()
    assert off is not None
    assert off % MINUTE == timedelta(0), f"{zi.key}: offset {off} at {from_minute(m)} is not whole minutes"
    return off // MINUTE


def fire_times(**kwargs: Any) -> list[datetime]:
    """``tickwork.fire_times``, checking that every fire is an aware datetime in UTC."""
    out = list(tickwork.fire_times(**kwargs))
    for t in out:
        assert isinstance(t, datetime)
        assert t.tzinfo is not None and t.utcoffset() == timedelta(0), f"not UTC: {t!r}"
    return out


# ---------------------------------------------------------------------------------------
# Zone data: offsets and transitions found by scanning zoneinfo
# ---------------------------------------------------------------------------------------

SCAN_FROM = utc(1999, 1, 1)
SCAN_TO = utc(2081, 1, 1)  # the reference looks this far for "the next fire after a window"
SCAN_STEP = timedelta(hours=2)
DRAW_FROM = utc(2000, 1, 1)
DRAW_TO = utc(2041, 1, 1)


@dataclasses.dataclass(frozen=True)
class ZoneData:
    name: str
    starts: tuple[int, ...]
    """UTC minute at which each constant-offset segment starts (the first is a sentinel)."""
    offsets: tuple[int, ...]
    """Offset in minutes of each segment."""
    distinct: frozenset[int]
    transitions: tuple[int, ...]
    """UTC minutes of the changes between DRAW_FROM and DRAW_TO."""

    def off(self, m: int) -> int:
        assert to_minute(SCAN_FROM) <= m < to_minute(SCAN_TO), f"minute {m} outside the scanned range"
        return self.offsets[bisect.bisect_right(self.starts, m) - 1]

    def segments(self, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
        """Constant-offset pieces ``(a, b, offset)`` covering [lo, hi)."""
        i = bisect.bisect_right(self.starts, lo) - 1
        while i < len(self.starts) and self.starts[i] < hi:
            a = max(self.starts[i], lo)
            b = min(self.starts[i + 1], hi) if i + 1 < len(self.starts) else hi
            if a < b:
                yield a, b, self.offsets[i]
            i += 1

    def first_occurrence(self, m: int, wall: int) -> bool:
        """No instant before UTC minute ``m`` had the wall time ``wall`` (= m + off(m))."""
        here = wall - m
        # An earlier instant t' = wall - o < m needs o > here, and it had the wall time
        # ``wall`` iff the zone's offset at t' was o.
        return not any(o > here and self.off(wall - o) == o for o in self.distinct)


@functools.cache
def zone_data(name: str) -> ZoneData:
    zi = ZoneInfo(name)

    def off(t: datetime) -> timedelta:
        o = t.astimezone(zi).utcoffset()
        assert o is not None
        return o

    starts = [to_minute(SCAN_FROM) - 10 * DAY_MINUTES]
    first = off(SCAN_FROM)
    assert first % MINUTE == timedelta(0)
    offsets = [first // MINUTE]
    t = SCAN_FROM
    current = first
    while t < SCAN_TO:
        u = t + SCAN_STEP
        new = off(u)
        if new != current:
            lo, hi = t, u  # off(lo) == current != off(hi)
            while hi - lo > US:
                mid = lo + (hi - lo) // 2
                if off(mid) == current:
                    lo = mid
                else:
                    hi = mid
            # The assumption the minute-based reference relies on, checked:
            assert (hi - EPOCH) % MINUTE == timedelta(0), f"{name}: change at {hi} is not on a minute boundary"
            assert new % MINUTE == timedelta(0), f"{name}: offset {new} at {hi} is not whole minutes"
            assert off(hi) == new
            starts.append(to_minute(hi))
            offsets.append(new // MINUTE)
            current = new
        t = u
    for a, b in itertools.pairwise(starts[1:]):
        assert b - a > 2 * (SCAN_STEP // MINUTE), f"{name}: changes closer than the scan step can see"
    lo_m, hi_m = to_minute(DRAW_FROM), to_minute(DRAW_TO)
    return ZoneData(
        name=name,
        starts=tuple(starts),
        offsets=tuple(offsets),
        distinct=frozenset(offsets),
        transitions=tuple(s for s in starts[1:] if lo_m <= s < hi_m),
    )


# ---------------------------------------------------------------------------------------
# An independent parser of the five fields
# ---------------------------------------------------------------------------------------

MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DOW_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


@dataclasses.dataclass(frozen=True)
class FieldDef:
    name: str
    lo: int
    hi: int
    names: tuple[str, ...] = ()
    name_base: int = 0


MINUTE_F = FieldDef("minute", 0, 59)
HOUR_F = FieldDef("hour", 0, 23)
DOM_F = FieldDef("day-of-month", 1, 31)
MONTH_F = FieldDef("month", 1, 12, MONTH_NAMES, 1)
DOW_F = FieldDef("day-of-week", 0, 7, DOW_NAMES, 0)
FIELDS = (MINUTE_F, HOUR_F, DOM_F, MONTH_F, DOW_F)


def _value(text: str, f: FieldDef) -> int:
    v = int(text) if text.isdigit() else f.names.index(text.upper()) + f.name_base
    assert f.lo <= v <= f.hi, f"{f.name}: {text} out of range"
    return v


def parse_field(text: str, f: FieldDef) -> frozenset[int]:
    out: set[int] = set()
    for item in text.split(","):
        base, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        assert step >= 1
        if base == "*":
            a, b = f.lo, f.hi
        elif "-" in base:
            x, y = base.split("-")
            a, b = _value(x, f), _value(y, f)
        else:
            a = _value(base, f)
            b = f.hi if step_text else a  # ``n/s`` runs to the end of the field
        assert a <= b, f"{f.name}: range {base} runs backwards"
        out.update(range(a, b + 1, step))
    if f is DOW_F and 7 in out:
        out = (out - {7}) | {0}
    return frozenset(out)


@dataclasses.dataclass(frozen=True)
class Spec:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]
    dom_star: bool
    dow_star: bool
    fixed: bool
    hm: tuple[int, ...]
    hm_set: frozenset[int]
    day_cache: dict[int, bool] = dataclasses.field(default_factory=dict, compare=False, hash=False)

    def day_ok(self, day: int) -> bool:
        ok = self.day_cache.get(day)
        if ok is None:
            d = date.fromordinal(EPOCH_ORDINAL + day)
            dom_ok = d.day in self.doms
            dow_ok = d.isoweekday() % 7 in self.dows
            if self.dom_star or self.dow_star:
                ok = d.month in self.months and dom_ok and dow_ok
            else:  # both restricted: Vixie cron's OR
                ok = d.month in self.months and (dom_ok or dow_ok)
            self.day_cache[day] = ok
        return ok

    def match(self, wall: int) -> bool:
        return wall % DAY_MINUTES in self.hm_set and self.day_ok(wall // DAY_MINUTES)

    def walls(self, lo: int, hi: int) -> Iterator[int]:
        """Matching wall minutes in [lo, hi), in order."""
        for day in range(lo // DAY_MINUTES, (hi - 1) // DAY_MINUTES + 1):
            if not self.day_ok(day):
                continue
            base = day * DAY_MINUTES
            i = bisect.bisect_left(self.hm, lo - base)
            j = bisect.bisect_left(self.hm, hi - base)
            for hm in self.hm[i:j]:
                yield base + hm

    def fires_ever(self) -> bool:
        if not (self.minutes and self.hours and self.months):
            return False
        if not (self.dom_star or self.dow_star):
            return bool(self.doms or self.dows)
        longest = {m: 29 if m == 2 else 30 if m in (4, 6, 9, 11) else 31 for m in self.months}
        return bool(self.dows) and any(d <= longest[m] for m in self.months for d in self.doms)


@functools.cache
def parse(expr: str) -> Spec:
    parts = expr.split()
    assert len(parts) == 5, expr
    sets = [parse_field(p, f) for p, f in zip(parts, FIELDS, strict=True)]
    minutes, hours = sets[0], sets[1]
    hm = tuple(sorted(h * 60 + m for h in hours for m in minutes))
    return Spec(
        text=expr,
        minutes=minutes,
        hours=hours,
        doms=sets[2],
        months=sets[3],
        dows=sets[4],
        dom_star=parts[2].startswith("*"),
        dow_star=parts[4].startswith("*"),
        fixed=not parts[0].startswith("*") and not parts[1].startswith("*"),
        hm=hm,
        hm_set=frozenset(hm),
    )


# ---------------------------------------------------------------------------------------
# The reference: the rule applied minute by minute
# ---------------------------------------------------------------------------------------


def reference_walk(expr: str, zone: str, lo: int, hi: int) -> list[int]:
    """Fires in UTC minutes [lo, hi), walking every minute and asking zoneinfo for each wall time."""
    spec = parse(expr)
    zi = ZoneInfo(zone)
    zd = zone_data(zone)
    out = []
    prev_wall = lo - 1 + offset_minutes(zi, lo - 1)
    for t in range(lo, hi):
        wall = t + offset_minutes(zi, t)
        if spec.fixed:
            fire = spec.match(wall) and all(
                offset_minutes(zi, wall - o) != o for o in zd.distinct if o > wall - t
            )  # ... and no earlier instant had this wall time
            if not fire and wall - prev_wall > 1:  # the clock jumped forward into t
                fire = any(spec.match(w) for w in range(prev_wall + 1, wall))
        else:
            fire = spec.match(wall)
        if fire:
            out.append(t)
        prev_wall = wall
    return out


def reference_fast(expr: str, zone: str, lo: int, hi: int) -> list[int]:
    """The same rule per constant-offset segment (cross-checked against ``reference_walk``)."""
    spec = parse(expr)
    zd = zone_data(zone)
    fires: set[int] = set()
    for a, b, o in zd.segments(lo, hi):
        if spec.fixed:
            before = zd.off(a - 1)
            if o > before and any(spec.match(w) for w in range(a + before, a + o)):
                fires.add(a)  # catch-up for skipped wall times, at the instant of the change
        for wall in spec.walls(a + o, b + o):
            t = wall - o
            if not spec.fixed or zd.first_occurrence(t, wall):
                fires.add(t)
    return sorted(fires)


def reference_next(expr: str, zone: str, lo: int, horizon: int = to_minute(SCAN_TO) - 2) -> int | None:
    """The first reference fire at or after UTC minute ``lo``, if one comes before ``horizon``."""
    chunk = 40 * DAY_MINUTES
    while lo < horizon:
        hi = min(lo + chunk, horizon)
        got = reference_fast(expr, zone, lo, hi)
        if got:
            return got[0]
        lo = hi
        chunk *= 2
    return None


def reference_sequence(expr: str, zone: str, after: datetime, count: int) -> list[datetime]:
    """The first ``count`` reference fires strictly after ``after``."""
    lo = to_minute(after) + 1
    out: list[int] = []
    while len(out) < count:
        hi = lo + 60 * DAY_MINUTES
        out.extend(reference_fast(expr, zone, lo, hi))
        lo = hi
    return [from_minute(m) for m in out[:count]]


def first_difference(got: Sequence[datetime], want: Sequence[datetime]) -> str:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"index {i}: got {g.isoformat()} want {w.isoformat()} (previous {want[i - 1] if i else None})"
    return f"lengths differ: got {len(got)} want {len(want)}"


# ---------------------------------------------------------------------------------------
# 0. The reference's own assumptions and sanity
# ---------------------------------------------------------------------------------------

PROPERTY_ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "Pacific/Apia",
    "America/Sao_Paulo",
    "UTC",
    "America/St_Johns",
    "Asia/Tehran",
    "Africa/Casablanca",
    "Antarctica/Troll",
]


@pytest.mark.parametrize("zone", PROPERTY_ZONES)
def test_reference_zone_scan_finds_whole_minute_changes(zone: str) -> None:
    zd = zone_data(zone)  # asserts whole-minute offsets and minute-boundary changes
    zi = ZoneInfo(zone)
    for m in zd.transitions:
        assert offset_minutes(zi, m - 1) != offset_minutes(zi, m)
        assert offset_minutes(zi, m) == zd.off(m)
        # Constant within the minute of the change and the one before it.
        assert (from_minute(m) - US).astimezone(zi).utcoffset() == timedelta(minutes=zd.off(m - 1))
        assert (from_minute(m + 1) - US).astimezone(zi).utcoffset() == timedelta(minutes=zd.off(m))
    if zone in ("UTC", "Asia/Kolkata"):
        assert zd.transitions == ()
    else:
        assert zd.transitions, f"{zone}: expected changes between 2000 and 2040"


def test_reference_parser() -> None:
    assert parse("*/15 * * * *").minutes == {0, 15, 30, 45}
    assert parse("5/20 * * * *").minutes == {5, 25, 45}
    assert parse("1-10/3,59 * * * *").minutes == {1, 4, 7, 10, 59}
    assert parse("* * * JAN-MAR/2 *").months == {1, 3}
    assert parse("* * * * 5-7").dows == {5, 6, 0}
    assert parse("* * * * MON,sun").dows == {1, 0}
    assert parse("0-59 2 * * *").fixed
    assert not parse("* 2 * * *").fixed
    assert not parse("0 */2 * * *").fixed
    assert parse("0 0 13 * FRI").day_ok(date(2024, 9, 13).toordinal() - EPOCH_ORDINAL)  # a Friday the 13th
    assert parse("0 0 13 * FRI").day_ok(date(2024, 9, 6).toordinal() - EPOCH_ORDINAL)  # OR: any Friday
    assert not parse("0 0 */13 * FRI").day_ok(date(2024, 9, 6).toordinal() - EPOCH_ORDINAL)  # AND
    assert not parse("0 0 30 2 *").fires_ever()
    assert parse("0 0 29 2 *").fires_ever()
    assert parse("0 0 30 2 MON").fires_ever()


# ---------------------------------------------------------------------------------------
# 1. Hypothesis: random expressions x zones x instants near real changes
# ---------------------------------------------------------------------------------------

MINUTE_VALUES = st.one_of(st.sampled_from([0, 1, 14, 15, 29, 30, 31, 44, 45, 59]), st.integers(0, 59))
HOUR_VALUES = st.one_of(st.integers(0, 3), st.sampled_from([22, 23]), st.integers(0, 23))
DOM_VALUES = st.one_of(st.sampled_from([1, 2, 28, 29, 30, 31]), st.integers(1, 31))
MONTH_VALUES = st.integers(1, 12)
DOW_VALUES = st.integers(0, 7)


@st.composite
def field_text(draw: st.DrawFn, f: FieldDef, values: st.SearchStrategy[int], fixed: bool) -> str:
    """One field: ``*``, ``*/s``, a number, ``a-b``, ``a-b/s``, ``n/s`` or a list of them."""

    def name(v: int) -> str:
        i = v - f.name_base
        if f.names and 0 <= i < len(f.names) and draw(st.booleans()):
            return f.names[i]
        return str(v)

    span = f.hi - f.lo
    steps = st.one_of(st.integers(1, 6), st.integers(1, span))

    def item(kind: str) -> str:
        if kind == "star":
            return "*"
        if kind == "star_step":
            return f"*/{draw(steps)}"
        if kind == "num":
            return name(draw(values))
        a, b = sorted((draw(values), draw(values)))
        if kind == "range":
            return f"{name(a)}-{name(b)}"
        if kind == "range_step":
            return f"{name(a)}-{name(b)}/{draw(steps)}"
        # n/s runs to the field's end; for day-of-week whether that end is 6 or 7 is not
        # something the rule settles, so leave out the cases where it would matter.
        s = draw(steps)
        if f is DOW_F and a != 0 and (7 - a) % s == 0:
            return f"{a}-6/{s}" if a < 7 else "7"
        return f"{a}/{s}"

    plain = ["num", "range", "range_step", "num_step"]
    kinds = plain if fixed else ["star", "star_step", *plain]
    first = draw(st.sampled_from(kinds))
    items = [item(first)]
    if first != "star":
        for _ in range(draw(st.integers(0, 2))):
            items.append(item(draw(st.sampled_from(plain))))
    return ",".join(items)


@st.composite
def cron_expressions(draw: st.DrawFn) -> str:
    fixed = draw(st.booleans())  # half the entries have fixed minute and hour fields
    minute = draw(field_text(MINUTE_F, MINUTE_VALUES, fixed))
    hour = draw(field_text(HOUR_F, HOUR_VALUES, fixed))

    def day_field(f: FieldDef, values: st.SearchStrategy[int]) -> str:
        return "*" if draw(st.integers(0, 9)) < 7 else draw(field_text(f, values, False))

    return " ".join(
        [minute, hour, day_field(DOM_F, DOM_VALUES), day_field(MONTH_F, MONTH_VALUES), day_field(DOW_F, DOW_VALUES)]
    )


@st.composite
def zone_and_start(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and an instant near one of its real changes (within the two days before it,
    or right around it: inside a gap's neighbourhood, in either pass of a repeated stretch)."""
    zone = draw(st.sampled_from(PROPERTY_ZONES))
    zd = zone_data(zone)
    if zd.transitions and draw(st.integers(0, 19)) > 0:
        change = draw(st.sampled_from(zd.transitions))
        delta = draw(st.one_of(st.integers(-49 * 60, 3 * 60), st.integers(-150, 150), st.integers(-2, 2)))
        m = change + delta
    else:
        m = draw(st.integers(to_minute(DRAW_FROM), to_minute(DRAW_TO) - 3 * DAY_MINUTES))
    micro = draw(st.one_of(st.just(0), st.integers(0, 59_999_999)))
    return zone, from_minute(m) + timedelta(microseconds=micro)


WINDOW = 2 * DAY_MINUTES


def check_against_reference(expr: str, zone: str, start: datetime, after: datetime) -> None:
    spec = parse(expr)
    if not spec.fires_ever():
        with pytest.raises(InvalidCron, match="cron"):
            fire_times(cron=expr, timezone=zone, after=after, n=1)
        return
    lo = to_minute(start) + 1  # strictly after ``start``
    hi = lo + WINDOW
    walked = reference_walk(expr, zone, lo, hi)
    assert reference_fast(expr, zone, lo, hi) == walked, "the two references disagree"
    want = [from_minute(m) for m in walked]
    nxt = reference_next(expr, zone, hi)
    n = len(want) + 1
    got = fire_times(cron=expr, timezone=zone, after=after, n=n)
    assert len(got) <= n
    assert all(t > start for t in got), "a fire not strictly after `after`"
    assert all(a < b for a, b in itertools.pairwise(got)), "fires not strictly increasing"
    end = from_minute(hi)
    inside = [t for t in got if t < end]
    assert inside == want, f"{expr!r} in {zone} after {start.isoformat()}: {first_difference(inside, want)}"
    if nxt is not None:
        assert len(got) == n, f"{expr!r} in {zone} after {start.isoformat()}: only {len(got)} of {n} fires"
        assert got[-1] == from_minute(nxt), (
            f"{expr!r} in {zone} after {start.isoformat()}: first fire past the window "
            f"got {got[-1].isoformat()} want {from_minute(nxt).isoformat()}"
        )


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=cron_expressions(), where=zone_and_start(), local_after=st.booleans())
def test_fire_times_match_reference_near_changes(expr: str, where: tuple[str, datetime], local_after: bool) -> None:
    zone, start = where
    # ``after`` is any aware datetime: sometimes hand it over on the zone's own clock.
    after = start.astimezone(ZoneInfo(zone)) if local_after else start
    check_against_reference(expr, zone, start, after)


# Hand-picked corners the random grammar reaches only rarely.
CORNER_CASES = [
    ("30 23 * * *", "America/Sao_Paulo", utc(2019, 2, 16, 12)),  # repeated 23:xx of the previous day
    ("*/20 23 * * *", "America/Sao_Paulo", utc(2019, 2, 16, 12)),
    ("15 0 * * *", "America/Sao_Paulo", utc(2018, 11, 3, 12)),  # skipped 00:xx
    ("15 0 4 11 *", "America/Sao_Paulo", utc(2018, 11, 3, 12)),
    ("30 0 * * *", "America/St_Johns", utc(2010, 3, 13, 12)),  # 00:01 changes
    ("0,30 23 6 11 *", "America/St_Johns", utc(2010, 11, 6, 12)),
    ("30 1,2 * * *", "Antarctica/Troll", utc(2024, 3, 30, 12)),  # a two-hour gap
    ("0 1-2 * * *", "Antarctica/Troll", utc(2024, 3, 30, 12)),
    ("* 1-2 * * *", "Antarctica/Troll", utc(2024, 10, 26, 12)),
    ("0 0-23 * * *", "Pacific/Apia", utc(2011, 12, 29, 9, 30)),  # a whole day skipped
    ("*/30 * 30 12 *", "Pacific/Apia", utc(2011, 12, 29)),
    ("0 12 30 12 FRI", "Pacific/Apia", utc(2011, 12, 29)),
    ("45 2 * * *", "Pacific/Chatham", utc(2024, 9, 27, 12)),
    ("45 2,3 * * *", "Pacific/Chatham", utc(2024, 4, 5, 12)),
    ("15,45 1 * * *", "Australia/Lord_Howe", utc(2024, 4, 6)),
    ("10 2 * * *", "Australia/Lord_Howe", utc(2024, 10, 5)),
    ("30 23 * * *", "Asia/Tehran", utc(2021, 9, 21)),
    ("30 0 * * *", "Asia/Tehran", utc(2021, 3, 20)),
    ("30 2 * * SUN", "Africa/Casablanca", utc(2024, 3, 9)),
    ("0-59 2 * * *", "Europe/Berlin", utc(2025, 10, 25, 12)),
    ("0 0 29 2 *", "Europe/Berlin", utc(2025, 1, 1)),
    ("0 0 29 2 */7", "Europe/Berlin", utc(2025, 1, 1)),  # a Sunday 29 February: 2032
]


@pytest.mark.parametrize(("expr", "zone", "start"), CORNER_CASES)
def test_fire_times_match_reference_corner_cases(expr: str, zone: str, start: datetime) -> None:
    check_against_reference(expr, zone, start, start)


# ---------------------------------------------------------------------------------------
# 2. Regression vectors
# ---------------------------------------------------------------------------------------

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"


def five_minutes(hour_start: datetime) -> list[datetime]:
    return [hour_start + timedelta(minutes=5 * k) for k in range(12)]


VECTORS: list[tuple[str, str, datetime, list[datetime]]] = [
    # Fixed entry in the repeated hour: the second pass never fires; next day 02:00 CET.
    ("0-59 2 * * *", BERLIN, utc(2025, 10, 26, 1, 10), [utc(2025, 10, 27, 1, 0), utc(2025, 10, 27, 1, 1)]),
    # Wildcard minute: both passes of 01:xx (EDT 05:xxZ, EST 06:xxZ), then 01:00 EST the next day.
    (
        "*/5 1 * * *",
        NEW_YORK,
        utc(2025, 11, 2, 4, 59),
        [*five_minutes(utc(2025, 11, 2, 5)), *five_minutes(utc(2025, 11, 2, 6)), utc(2025, 11, 3, 6, 0)],
    ),
    # Lord Howe falls back half an hour at 02:00 (+11): wall 02:00 first exists at +10:30.
    ("* 2 * * *", "Australia/Lord_Howe", utc(2023, 4, 1, 14, 0), [utc(2023, 4, 1, 15, 30), utc(2023, 4, 1, 15, 31)]),
    # Chatham springs 02:45 -> 03:45: wildcard minute, no catch-up of 03:00-03:44.
    ("* 3 * * *", "Pacific/Chatham", utc(2024, 9, 28, 12, 45), [utc(2024, 9, 28, 14, 0), utc(2024, 9, 28, 14, 1)]),
    # 02:30 does not exist on 2025-03-30: once, at 03:00 CEST (01:00Z).
    (
        "30 2 * * *",
        BERLIN,
        utc(2025, 3, 29, 0, 0),
        [utc(2025, 3, 29, 1, 30), utc(2025, 3, 30, 1, 0), utc(2025, 3, 31, 0, 30)],
    ),
    # 02:30 twice on 2025-10-26: only the first (CEST, 00:30Z).
    ("30 2 * * *", BERLIN, utc(2025, 10, 25, 12, 0), [utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30)]),
    ("30 2 * * *", BERLIN, utc(2025, 10, 26, 0, 30), [utc(2025, 10, 27, 1, 30)]),
    ("30 2 * * *", BERLIN, utc(2025, 10, 26, 1, 0), [utc(2025, 10, 27, 1, 30)]),
    # Two skipped wall times of one gap: one fire at the end of the gap.
    ("0,30 2 * * *", BERLIN, utc(2025, 3, 29, 12, 0), [utc(2025, 3, 30, 1, 0), utc(2025, 3, 31, 0, 0)]),
    ("0,30 2 * * *", NEW_YORK, utc(2025, 3, 8, 12, 0), [utc(2025, 3, 9, 7, 0), utc(2025, 3, 10, 6, 0)]),
    ("0-59 2 * * *", NEW_YORK, utc(2025, 3, 9, 6, 0), [utc(2025, 3, 9, 7, 0), utc(2025, 3, 10, 6, 0)]),
    # Apia skipped 2011-12-30: 02:30 of that day fires at 2011-12-31 00:00 +14 (10:00Z).
    (
        "30 2 * * *",
        "Pacific/Apia",
        utc(2011, 12, 28, 13, 0),
        [utc(2011, 12, 29, 12, 30), utc(2011, 12, 30, 10, 0), utc(2011, 12, 30, 12, 30)],
    ),
    ("0 12 30 12 *", "Pacific/Apia", utc(2011, 1, 1), [utc(2011, 12, 30, 10, 0), utc(2012, 12, 29, 22, 0)]),
    # Every hour of the skipped day fires once, together, at the end of the gap.
    (
        "0 0-23 * * *",
        "Pacific/Apia",
        utc(2011, 12, 30, 8, 30),
        [utc(2011, 12, 30, 9, 0), utc(2011, 12, 30, 10, 0), utc(2011, 12, 30, 11, 0)],
    ),
    # A wildcard entry for the skipped day never fires that day.
    ("*/30 * 30 12 *", "Pacific/Apia", utc(2011, 12, 28), [utc(2012, 12, 29, 10, 0), utc(2012, 12, 29, 10, 30)]),
]


# ``a-a/s`` is the one value a (a range of one, stepped), in every field.
SINGLE_VALUE_RANGES: list[tuple[str, str, datetime, list[datetime]]] = [
    ("0-0/1 * * * *", "UTC", utc(2000, 1, 1), [utc(2000, 1, 1, 1), utc(2000, 1, 1, 2)]),
    ("5-5/1 * * * *", "UTC", utc(2000, 1, 1), [utc(2000, 1, 1, 0, 5), utc(2000, 1, 1, 1, 5)]),
    ("0-0/5 * * * *", "UTC", utc(2000, 1, 1), [utc(2000, 1, 1, 1), utc(2000, 1, 1, 2)]),
    ("* 0-0/1 * * *", "Asia/Kolkata", utc(2000, 1, 1), [utc(2000, 1, 1, 18, 30), utc(2000, 1, 1, 18, 31)]),
    ("0 0 2-2/3 * *", "UTC", utc(2000, 1, 1), [utc(2000, 1, 2), utc(2000, 2, 2)]),
    ("0 0 1 MAR-MAR/2 *", "UTC", utc(2000, 1, 1), [utc(2000, 3, 1), utc(2001, 3, 1)]),
    ("0 0 * * WED-WED/2", "UTC", utc(2000, 1, 1), [utc(2000, 1, 5), utc(2000, 1, 12)]),  # 2000-01-05 a Wednesday
]


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), SINGLE_VALUE_RANGES)
def test_single_value_range_with_step(expr: str, zone: str, after: datetime, expected: list[datetime]) -> None:
    assert reference_sequence(expr, zone, after, len(expected)) == expected
    assert fire_times(cron=expr, timezone=zone, after=after, n=len(expected)) == expected


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), VECTORS)
def test_regression_vectors(expr: str, zone: str, after: datetime, expected: list[datetime]) -> None:
    # The vectors were worked out by hand; the reference agrees with them ...
    assert reference_sequence(expr, zone, after, len(expected)) == expected
    # ... and so must tickwork.
    got = fire_times(cron=expr, timezone=zone, after=after, n=len(expected))
    assert got == expected


def fires_on_local_day(expr: str, zone: str, day: date) -> list[datetime]:
    zi = ZoneInfo(zone)
    start = datetime(day.year, day.month, day.day, tzinfo=zi).astimezone(UTC)
    nxt = day + timedelta(days=1)
    end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=zi).astimezone(UTC)
    got = fire_times(cron=expr, timezone=zone, after=start - US, n=200)
    assert got[-1] >= end
    return [t for t in got if t < end]


@pytest.mark.parametrize(("day", "count"), [(date(2025, 11, 2), 50), (date(2025, 3, 9), 46), (date(2025, 6, 1), 48)])
def test_half_hourly_new_york_day_counts(day: date, count: int) -> None:
    fires = fires_on_local_day("*/30 * * * *", NEW_YORK, day)
    assert len(fires) == count
    assert len(set(fires)) == count
    assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(fires))


def test_fixed_entries_once_a_day_on_change_days() -> None:
    for expr in ("30 2 * * *", "30 1 * * *", "0,30 2 * * *"):
        for day in (date(2025, 3, 9), date(2025, 11, 2)):
            fires = fires_on_local_day(expr, NEW_YORK, day)
            want = 1 if expr != "0,30 2 * * *" or day.month == 3 else 2
            assert len(fires) == want, (expr, day, fires)


@pytest.mark.parametrize("every", [3600, 3600.0, timedelta(hours=1)])
def test_every_hour_with_anchor_is_real_elapsed_time(every: float | timedelta) -> None:
    hour = timedelta(hours=1)
    # Anchors just before Berlin's spring and fall changes and New York's fall change.
    for anchor in (utc(2025, 3, 30, 0, 0), utc(2025, 10, 26, 0, 0), utc(2025, 11, 2, 4, 0, 0, 500_000)):
        got = fire_times(every=every, anchor=anchor, after=anchor, n=6)
        assert got == [anchor + k * hour for k in range(1, 7)]
        got = fire_times(every=every, anchor=anchor, after=anchor + 90 * MINUTE, n=4)
        assert got == [anchor + k * hour for k in range(2, 6)]
        got = fire_times(every=every, anchor=anchor, after=anchor + 2 * hour - US, n=1)
        assert got == [anchor + 2 * hour]
        got = fire_times(every=every, anchor=anchor, after=anchor + 2 * hour, n=1)
        assert got == [anchor + 3 * hour]
        # An aware ``after`` on a zone's clock is the same instant.
        local_after = (anchor + 90 * MINUTE).astimezone(ZoneInfo(BERLIN))
        assert fire_times(every=every, anchor=anchor, after=local_after, n=2) == [anchor + 2 * hour, anchor + 3 * hour]
    # A far-away anchor: still exactly on its grid.
    anchor = utc(2025, 1, 1, 0, 0, 0, 500_000)
    got = fire_times(every=every, anchor=anchor, after=utc(2025, 3, 30, 0, 59, 59), n=3)
    assert got == [utc(2025, 3, 30, 1, 0, 0, 500_000) + k * hour for k in range(3)]
    # Without an anchor the grid starts at ``after``.
    after = utc(2025, 3, 30, 0, 30, 0, 123)
    assert fire_times(every=every, after=after, n=3) == [after + k * hour for k in range(1, 4)]


def test_every_with_a_timezone_is_refused_or_ignored() -> None:
    """The rule does not say whether ``timezone`` may come with ``every``: either it is
    refused, naming the field, or it changes nothing (intervals are real elapsed time)."""
    anchor = utc(2025, 3, 30, 0, 0)
    try:
        got = fire_times(every=3600, timezone=BERLIN, anchor=anchor, after=anchor, n=3)
    except TickworkError as exc:
        assert names_field(str(exc), "timezone"), str(exc)
    else:
        assert got == [anchor + k * timedelta(hours=1) for k in range(1, 4)]


# ---------------------------------------------------------------------------------------
# 3. Drift: 10,000 chained fires, by fire_times and by settle
# ---------------------------------------------------------------------------------------

DRIFT_FIRES = 10_000


def settle_chain(task: Task, count: int) -> list[datetime]:
    from tickwork.schedules import settle

    slots = [task.scheduled_at]
    for _ in range(count - 1):
        s = settle(task, ExecutionStatus.COMPLETED, task.scheduled_at + timedelta(seconds=1))
        assert s.status is Status.PENDING
        slots.append(s.scheduled_at)
        task = dataclasses.replace(task, scheduled_at=s.scheduled_at, next_run_at=s.next_run_at)
    return slots


DRIFT_CRONS = [
    ("17 */3 * * *", BERLIN, utc(2023, 1, 1), 6),
    ("30 2 * * *", BERLIN, utc(2000, 1, 1), 50),
    ("*/7 * * * *", "Australia/Lord_Howe", utc(2024, 3, 20), 1),  # 10,000 fires are 48 days
    ("*/7 1-3 * * *", "Australia/Lord_Howe", utc(2024, 3, 1), 2),
    ("15,45 1,2 * * *", "Australia/Lord_Howe", utc(2020, 1, 1), 12),
    ("0,30 1-3 * * *", NEW_YORK, utc(2021, 1, 1), 8),
]


@functools.cache
def drift_reference(expr: str, zone: str, start: datetime, min_changes: int) -> list[datetime]:
    want = reference_sequence(expr, zone, start, DRIFT_FIRES)
    assert len(set(want)) == DRIFT_FIRES
    changes = [m for m in zone_data(zone).transitions if want[0] <= from_minute(m) <= want[-1]]
    assert len(changes) >= min_changes, "the window should cross several changes"
    return want


@pytest.mark.parametrize(("expr", "zone", "start", "min_changes"), DRIFT_CRONS)
def test_cron_drift_by_chained_fire_times(expr: str, zone: str, start: datetime, min_changes: int) -> None:
    want = drift_reference(expr, zone, start, min_changes)
    got = []
    t = start
    for _ in range(DRIFT_FIRES):
        (t,) = fire_times(cron=expr, timezone=zone, after=t, n=1)
        got.append(t)
    assert got == want, first_difference(got, want)
    bulk = fire_times(cron=expr, timezone=zone, after=start, n=DRIFT_FIRES)
    assert bulk == want, first_difference(bulk, want)


@pytest.mark.parametrize(("expr", "zone", "start", "min_changes"), DRIFT_CRONS)
def test_cron_drift_by_chained_settle(expr: str, zone: str, start: datetime, min_changes: int) -> None:
    want = drift_reference(expr, zone, start, min_changes)
    task = make_task(cron=expr, timezone=zone, interval=None, scheduled_at=want[0], next_run_at=want[0])
    got = settle_chain(task, DRIFT_FIRES)
    assert got == want, first_difference(got, want)


INTERVAL_ANCHOR = utc(2024, 3, 1, 0, 7, 3, 250_000)


def test_interval_drift_by_chained_fire_times() -> None:
    step = timedelta(seconds=5400)
    want = [INTERVAL_ANCHOR + k * step for k in range(1, DRIFT_FIRES + 1)]
    for zone in (BERLIN, "Australia/Lord_Howe"):  # the span crosses several of their changes
        assert len([m for m in zone_data(zone).transitions if want[0] <= from_minute(m) <= want[-1]]) >= 3
    got, t = [], INTERVAL_ANCHOR
    for _ in range(DRIFT_FIRES):
        (t,) = fire_times(every=5400, anchor=INTERVAL_ANCHOR, after=t, n=1)
        got.append(t)
    assert got == want, first_difference(got, want)
    got, t = [], INTERVAL_ANCHOR
    for _ in range(DRIFT_FIRES):
        (t,) = fire_times(every=5400.0, after=t, n=1)  # anchor defaults to after
        got.append(t)
    assert got == want, first_difference(got, want)
    assert fire_times(every=step, anchor=INTERVAL_ANCHOR, after=INTERVAL_ANCHOR, n=DRIFT_FIRES) == want


def test_interval_drift_by_chained_settle() -> None:
    step = timedelta(seconds=5400)
    want = [INTERVAL_ANCHOR + k * step for k in range(DRIFT_FIRES)]
    task = make_task(interval=5400.0, timezone=BERLIN, scheduled_at=INTERVAL_ANCHOR, next_run_at=INTERVAL_ANCHOR)
    got = settle_chain(task, DRIFT_FIRES)
    assert got == want, first_difference(got, want)


# ---------------------------------------------------------------------------------------
# 4. Bad input
# ---------------------------------------------------------------------------------------

AFTER = utc(2025, 1, 1)


def raised_by(**kwargs: Any) -> TickworkError:
    try:
        fire_times(**kwargs)
    except TickworkError as exc:
        return exc
    except Exception as exc:  # anything else is a bug in itself
        pytest.fail(f"fire_times({_short(kwargs)}) raised {type(exc).__name__}: {exc}, not a TickworkError")
    pytest.fail(f"fire_times({_short(kwargs)}) raised nothing")


def _short(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}"[:60] for k, v in kwargs.items())


def names_field(message: str, *fields: str) -> bool:
    return any(re.search(rf"\b{re.escape(f)}\b", message) for f in fields)


BAD_CRONS = [
    "1" * 5000 + " * * * *",
    "*/" + "9" * 40 + " * * * *",
    "*/" + "9" * 400 + " * * * *",
    "1-" + "9" * 40 + " * * * *",
    "",
    "   ",
    "* * * *",
    "* * * * * *",
    "*\x00 * * * *",
    "* * * * *\x00",
    "\x00",
    "9" * 100_000 + " * * * *",
    "* " * 50_000,
    "60 * * * *",
    "* 24 * * *",
    "* * 0 * *",
    "* * 32 * *",
    "* * * * 8",
    "*/0 * * * *",
    "0 0 30 2 *",
]


@pytest.mark.parametrize("expr", BAD_CRONS, ids=lambda e: repr(e)[:30])
def test_bad_cron_names_the_cron_field(expr: str) -> None:
    err = raised_by(cron=expr, after=AFTER)
    assert names_field(str(err), "cron"), str(err)
    assert len(str(err)) < 2000, "the message should not echo a huge input whole"


@pytest.mark.parametrize("expr", ["* * * 13 *", "* * * 0 *", "* * * FOO *", "* * * JAN-FOO *"])
def test_bad_month_says_month_field_is_invalid(expr: str) -> None:
    err = raised_by(cron=expr, after=AFTER)
    message = str(err)
    assert names_field(message, "cron"), message
    assert "month" in message.lower(), message
    assert "never fires" not in message.lower(), message


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "Europe/Berlin\x00", "../../../etc/passwd", "A" * 10_000])
def test_bad_timezone_names_the_timezone_field(zone: str) -> None:
    err = raised_by(cron="* * * * *", timezone=zone, after=AFTER)
    assert names_field(str(err), "timezone"), str(err)


def test_naive_after_names_after() -> None:
    err = raised_by(cron="* * * * *", after=datetime(2025, 1, 1))
    assert names_field(str(err), "after"), str(err)
    err = raised_by(every=60, after=datetime(2025, 1, 1))
    assert names_field(str(err), "after"), str(err)


@pytest.mark.parametrize("n", [0, -1, -(10**30)])
def test_bad_n_names_n(n: int) -> None:
    err = raised_by(cron="* * * * *", after=AFTER, n=n)
    assert names_field(str(err), "n"), str(err)
    err = raised_by(every=60, after=AFTER, n=n)
    assert names_field(str(err), "n"), str(err)


def test_cron_and_every_together_or_neither() -> None:
    err = raised_by(cron="* * * * *", every=60, after=AFTER)
    assert names_field(str(err), "cron", "every"), str(err)
    err = raised_by(after=AFTER)
    assert names_field(str(err), "cron", "every"), str(err)


@pytest.mark.parametrize("every", [0, -1, -0.5, math.nan, math.inf, timedelta(0), timedelta(seconds=-5)])
def test_bad_every_names_every(every: float | timedelta) -> None:
    err = raised_by(every=every, after=AFTER)
    assert names_field(str(err), "every"), str(err)
