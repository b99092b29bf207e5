"""Cluster-wide limits on starting runs: ``max_running`` and ``rate_limit`` per task name,
``lock`` per schedule. Pure: the store reads what is running and the rate state inside
its claim transaction, this module decides which candidates may start, and the store
writes the claims and the new rate state in that same transaction.

Rate limits are a GCRA (generic cell rate algorithm) without burst: a name limited to N
starts per window may start once every ``window / N`` seconds, so no window of that
length ever holds more than N starts and no burst of the whole window comes at its start.
The state is one instant per name, its *theoretical arrival time*: the earliest moment
the next start is allowed.

A task held back by a full limit is not counted late for the time it was held: each
limit key remembers since when it has held a due task back (``full_since``) and the last
claim that found it so (``held_until``); the misfire policy judges a task the limit lets
through as of now less the part of that span it was due in.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from tickwork.errors import InvalidInput

WINDOWS = {"s": 1.0, "m": 60.0, "h": 3600.0}
RATE_TEXT = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*")
MAX_RATE_COUNT = 1_000_000
LOCK_MAX_CHARS = 200


@dataclasses.dataclass(frozen=True)
class Rate:
    """``count`` starts per ``window`` seconds."""

    count: int
    window: float

    @property
    def interval(self) -> timedelta:
        """The spacing between two starts, rounded up to a microsecond (rounded down,
        N + 1 starts could fit in one window)."""
        return timedelta(microseconds=math.ceil(self.window * 1_000_000 / self.count))


def parse_rate(text: str) -> Rate:
    """``"100/m"`` -> 100 starts a minute (``s``, ``m`` or ``h``)."""
    match = RATE_TEXT.fullmatch(text) if isinstance(text, str) else None
    if match is None or not 1 <= int(match.group(1)) <= MAX_RATE_COUNT:
        raise InvalidInput(
            "rate_limit", text, f"must be 'N/s', 'N/m' or 'N/h' with N from 1 to {MAX_RATE_COUNT} (e.g. '100/m')"
        )
    return Rate(int(match.group(1)), WINDOWS[match.group(2)])


def rate_limit(value: str | None) -> str | None:
    """The option's rule: kept as given (normalised), checked once here."""
    if value is None:
        return None
    rate = parse_rate(value)
    unit = next(u for u, seconds in WINDOWS.items() if seconds == rate.window)
    return f"{rate.count}/{unit}"


def max_running(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise InvalidInput("max_running", value, "must be an integer from 1 to 100000, or None for no limit")
    return value


def lock(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > LOCK_MAX_CHARS or not value.isprintable():
        raise InvalidInput("lock", value, f"must be 1 to {LOCK_MAX_CHARS} printable characters, or None for no lock")
    return value


# -- the keys a task's limits live under --------------------------------------------


def name_key(name: str) -> str:
    return f"running:{name}"


def lock_key(lock_name: str) -> str:
    return f"lock:{lock_name}"


def rate_key(name: str) -> str:
    return f"rate:{name}"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A due task of the lane (a limit, or a priority other than 0), as its claim reads it."""

    id: int
    version: int
    name: str
    next_run_at: datetime
    priority: int
    lock: str | None
    max_running: int | None
    rate_limit: str | None

    def limit_keys(self) -> list[str]:
        keys = []
        if self.max_running is not None:
            keys.append(name_key(self.name))
        if self.lock is not None:
            keys.append(lock_key(self.lock))
        if self.rate_limit is not None:
            keys.append(rate_key(self.name))
        return keys


@dataclasses.dataclass(frozen=True)
class KeyState:
    """What the store keeps per limit key (``tickwork_limits``)."""

    tat: datetime | None = None
    """Rate keys: the earliest moment the next start is allowed."""
    full_since: datetime | None = None
    """Since when the limit has held back a due task (None: it has not)."""
    held_until: datetime | None = None
    """The last claim that found it holding a due task back: the wait that does not count
    as late ends there, whenever the next start comes (a limit that freed while no node
    claimed does not excuse the lateness that followed)."""


@dataclasses.dataclass
class Choice:
    """Which candidates start, the key states to write, and when each chosen one is
    judged by the misfire policy."""

    chosen: list[Candidate] = dataclasses.field(default_factory=list)
    judged_at: dict[int, datetime] = dataclasses.field(default_factory=dict)
    states: dict[str, KeyState] = dataclasses.field(default_factory=dict)


def all_keys(candidates: Iterable[Candidate]) -> list[str]:
    """Every key the candidates need, sorted: keys are locked in this order (no cycles)."""
    return sorted({k for c in candidates for k in c.limit_keys()})


def choose(
    candidates: Sequence[Candidate],
    free: int,
    *,
    running: Mapping[str, int],
    states: Mapping[str, KeyState],
    now: datetime,
    usable: set[str] | None = None,
) -> Choice:
    """Walk the candidates in claim order and start each whose limits all have room,
    up to ``free``. ``running``: RUNNING tasks per ``running:``/``lock:`` key; ``usable``:
    the keys this claim holds (None: all; a key another node is claiming for right now
    is left to it). A limit that holds back a due task starts being ``full_since`` now."""
    choice = Choice()
    used = dict(running)
    current = dict(states)
    changed: set[str] = set()
    for c in candidates:
        keys = c.limit_keys()
        if usable is not None and not all(k in usable for k in keys):
            continue
        full = [k for k in keys if not _has_room(c, k, used, current, now)]
        if full:
            for k in full:
                state = current.get(k, KeyState())
                if state.held_until != now:
                    current[k] = dataclasses.replace(state, full_since=state.full_since or now, held_until=now)
                    changed.add(k)
            continue
        if len(choice.chosen) >= free:
            continue  # no slot left: the limit did not hold it back
        choice.chosen.append(c)
        excused = max((_held(c, current.get(k, KeyState()), now) for k in keys), default=timedelta(0))
        if excused > timedelta(0):
            choice.judged_at[c.id] = now - excused
        for k in keys:
            used[k] = used.get(k, 0) + 1
            state = current.get(k, KeyState())
            tat = state.tat
            if k.startswith("rate:"):
                assert c.rate_limit is not None
                tat = max(tat or now, now) + parse_rate(c.rate_limit).interval
            if tat != state.tat or state.full_since is not None:
                current[k] = KeyState(tat=tat)
                changed.add(k)
    choice.states = {k: current[k] for k in sorted(changed)}
    return choice


def _held(c: Candidate, state: KeyState, now: datetime) -> timedelta:
    """How long ``c`` was due while the key held it back (the wait not counted as late)."""
    if state.full_since is None or state.held_until is None:
        return timedelta(0)
    return max(timedelta(0), min(now, state.held_until) - max(c.next_run_at, state.full_since))


def _has_room(c: Candidate, key: str, used: Mapping[str, int], states: Mapping[str, KeyState], now: datetime) -> bool:
    if key.startswith("running:"):
        assert c.max_running is not None
        return used.get(key, 0) < c.max_running
    if key.startswith("lock:"):
        return used.get(key, 0) < 1
    tat = states.get(key, KeyState()).tat
    return tat is None or tat <= now


def next_allowed(states: Mapping[str, KeyState], now: datetime) -> datetime | None:
    """The earliest moment a rate key that is not open now opens (a node's sleep)."""
    future = [s.tat for k, s in states.items() if k.startswith("rate:") and s.tat is not None and s.tat > now]
    return min(future) if future else None
