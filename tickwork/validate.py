"""Input checks shared by the client API: each names the field and the value it refuses.

Every check runs before the store is touched, so a refused call leaves nothing behind.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from tickwork import limits
from tickwork.errors import InvalidInput
from tickwork.model import ExecutionStatus, Kind, Misfire, OnLost, Overlap, Status
from tickwork.registry import Isolation
from tickwork.timing import require_aware

MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
MAX_SPAN_S = 100 * 366 * 86400.0
"""Longest delay or interval accepted: beyond it dates leave the calendar's range."""


def seconds(field: str, value: float | timedelta, *, allow_zero: bool) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise InvalidInput(field, value, "must be a number of seconds or a timedelta")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidInput(field, value, "must be positive" if not allow_zero else "must not be negative")
    if seconds > MAX_SPAN_S:
        raise InvalidInput(field, value, f"must be at most {MAX_SPAN_S:.0f} seconds (100 years)")
    return float(seconds)


def positive(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidInput(field, value, "must be a positive number")
    if value > MAX_SPAN_S:
        raise InvalidInput(field, value, f"must be at most {MAX_SPAN_S:.0f} seconds (100 years)")
    return float(value)


def non_negative(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidInput(field, value, "must be a number >= 0")
    if value > MAX_SPAN_S:
        raise InvalidInput(field, value, f"must be at most {MAX_SPAN_S:.0f} seconds (100 years)")
    return float(value)


def task_id(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT64:
        raise InvalidInput("task_id", value, "must be a positive integer")
    return value


def moment(field: str, value: datetime) -> datetime:
    """An aware datetime within the years a schedule can reach."""
    if not isinstance(value, datetime):
        raise InvalidInput(field, value, "must be a datetime")
    moment = require_aware(field, value)
    if not EARLIEST <= moment <= LATEST:
        raise InvalidInput(field, moment.isoformat(), f"must be between {EARLIEST.year} and {LATEST.year}")
    return moment


def optional_positive(field: str, value: float | None) -> float | None:
    return None if value is None else positive(field, value)


def optional_non_negative(field: str, value: float | None) -> float | None:
    return None if value is None else non_negative(field, value)


def count(field: str, value: int, reason: str) -> int:
    """A whole number of at least 1 (a bool is not one, though Python says it is an int)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(field, value, reason)
    return value


def text(field: str, value: str, reason: str = "must be a non-empty string") -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(field, value, reason)
    return value


def integer(field: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, value, "must be an integer")
    if not -MAX_INT32 <= value <= MAX_INT32:
        raise InvalidInput(field, value, f"must be between {-MAX_INT32} and {MAX_INT32}")
    return value


def retries(value: int) -> int:
    if integer("max_retries", value) < 0:
        raise InvalidInput("max_retries", value, "must be >= 0")
    return value


def misfire(value: Misfire | str | None) -> Misfire | None:
    return enum_value(Misfire, "misfire", value)


E = TypeVar("E", Status, ExecutionStatus, Misfire, Kind)


def enum_value(kind: type[E], field: str, value: E | str | None) -> E | None:
    if value is None:
        return None
    try:
        return kind(value.upper() if isinstance(value, str) else value)
    except ValueError as exc:
        choices = ", ".join(m.value for m in kind)
        raise InvalidInput(field, value, f"must be one of {choices}") from exc


def max_catchup(value: int) -> int:
    if integer("max_catchup", value) < 1:
        raise InvalidInput("max_catchup", value, "must be at least 1")
    return value


QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")


def queue(value: str) -> str:
    """A queue name: what an operator types after ``--queues`` and reads in metrics labels."""
    if not isinstance(value, str) or not QUEUE_NAME.fullmatch(value):
        raise InvalidInput(
            "queue", value, "must be 1 to 100 letters, digits, '_', '.', ':' or '-', starting with a letter or digit"
        )
    return value


def queues(value: Iterable[str]) -> list[str]:
    """The queues a node serves: one or more names (a lone string is refused, not read as
    its letters)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidInput("queues", value, "must be a list of queue names, e.g. ['emails']")
    names = sorted({queue(q) for q in value})
    if not names:
        raise InvalidInput("queues", value, "must name at least one queue (None: the registered tasks' queues)")
    return names


def max_lost(value: int) -> int:
    if not 0 <= integer("max_lost", value) <= 1000:
        raise InvalidInput("max_lost", value, "must be an integer from 0 to 1000")
    return value


def isolation(value: Isolation | str) -> Isolation:
    try:
        return Isolation(value.lower() if isinstance(value, str) else value)
    except ValueError as exc:
        raise InvalidInput("isolation", value, "must be 'thread' or 'process'") from exc


def on_lost(value: OnLost | str) -> OnLost:
    try:
        return OnLost(value.lower() if isinstance(value, str) else value)
    except ValueError as exc:
        raise InvalidInput("on_lost", value, "must be 'retry' or 'fail'") from exc


def overlap(value: Overlap | str) -> Overlap:
    try:
        return Overlap(value.lower() if isinstance(value, str) else value)
    except ValueError as exc:
        raise InvalidInput("overlap", value, "must be 'skip' or 'replace'") from exc


def flag(field: str, value: bool) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(field, value, "must be True or False")
    return value


def offset(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT64:
        raise InvalidInput("offset", value, "must be an integer >= 0")
    return value


def limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidInput("limit", limit, "must be an integer from 1 to 10000")
    return limit


OPTION_CHECKS: dict[str, Callable[[Any], Any]] = {
    "timeout": functools.partial(optional_positive, "timeout"),
    "max_retries": retries,
    "retry_backoff": functools.partial(positive, "retry_backoff"),
    "misfire": misfire,
    "misfire_grace": functools.partial(optional_non_negative, "misfire_grace"),
    "jitter": functools.partial(non_negative, "jitter"),
    "priority": functools.partial(integer, "priority"),
    "max_catchup": max_catchup,
    "overlap": overlap,
    "on_lost": on_lost,
    "max_lost": max_lost,
    "queue": queue,
    "max_running": limits.max_running,
    "rate_limit": limits.rate_limit,
    "max_runtime": functools.partial(optional_positive, "max_runtime"),
    "isolation": isolation,
    "kill_grace": functools.partial(non_negative, "kill_grace"),
    "context": functools.partial(flag, "context"),
}
"""The rule of each per-task option (``TaskOptions``' fields): one table, so that
``@app.task`` and the overrides ``schedule()`` accepts cannot drift apart."""


def task_options(**values: Any) -> dict[str, Any]:
    """Each option checked by its rule, in the order given (the first bad one is named)."""
    return {name: OPTION_CHECKS[name](value) for name, value in values.items()}


def task_name(func: Callable[..., Any], name: str | None, isolation: Isolation) -> str:
    """The name ``func`` registers under: stored tasks refer to it, so it must be one the
    application can give again (and a child process must be able to import the function)."""
    if not callable(func):
        raise InvalidInput("func", func, "a task must be a function")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InvalidInput("name", name, "must be a non-empty string")
    qualname = getattr(func, "__qualname__", None)
    if name is None and qualname is None:
        raise InvalidInput("name", None, f"{func!r} has no __qualname__: give the task a name=")
    if isolation is Isolation.PROCESS and (qualname is None or "<" in qualname):
        raise InvalidInput(
            "isolation", "process", f"{func!r} is not defined at module level: a child process cannot find it"
        )
    return name or f"{getattr(func, '__module__', None) or '__main__'}.{qualname}"
