"""How the dashboard shows values: times, ages, durations, schedules in words.

Pure functions of the models, registered as Jinja filters, so the templates only lay
things out and every rule of presentation can be read (and tested) in one place.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import jinja2

from tickwork.cron import CronSchedule
from tickwork.errors import TickworkError
from tickwork.model import Execution, ExecutionStatus, Status, Task
from tickwork.web.reading import Undecodable

FAILURE_STATUSES = (ExecutionStatus.FAILED.value, ExecutionStatus.TIMED_OUT.value)


def environment() -> jinja2.Environment:
    """The templates, autoescaped: every value a user supplied (task names, arguments,
    keys, error messages, tracebacks) reaches the page as text, never as markup."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tickwork.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        when=when,
        seconds=seconds,
        pretty_json=pretty_json,
        status_class=status_class,
        schedule=schedule_text,
    )
    env.tests["undecodable"] = lambda value: isinstance(value, Undecodable)
    env.globals.update(
        duration=duration,
        lateness=lateness,
        cron_words=cron_words,
        upcoming=upcoming,
        age=age,
    )
    return env


def when(value: datetime | None) -> str:
    """A UTC time to the second; the dashboard shows every time in UTC."""
    return "" if value is None else f"{value:%Y-%m-%d %H:%M:%S} UTC"


def seconds(value: float | None) -> str:
    """A span in the largest units that keep it short: 850 ms, 12.5 s, 4 min 3 s, 2 h 5 min."""
    if value is None:
        return ""
    sign, value = ("-" if value < 0 else ""), abs(value)
    if value < 1:
        return f"{sign}{value * 1000:.0f} ms"
    if value < 60:
        return f"{sign}{value:.0f} s" if value == int(value) else f"{sign}{value:.1f} s"
    unit, size, small, small_size = (
        ("d", 86400, "h", 3600) if value >= 86400 else ("h", 3600, "min", 60) if value >= 3600 else ("min", 60, "s", 1)
    )
    whole, rest = int(value // size), int(value % size // small_size)
    return f"{sign}{whole} {unit}" + (f" {rest} {small}" if rest else "")


def age(moment: datetime | None, now: datetime) -> float | None:
    return None if moment is None else (now - moment).total_seconds()


def duration(execution: Execution) -> float | None:
    if execution.started_at is None or execution.finished_at is None:
        return None
    return (execution.finished_at - execution.started_at).total_seconds()


def lateness(execution: Execution) -> float | None:
    """How long after its slot the run started (jitter included)."""
    if execution.started_at is None:
        return None
    return (execution.started_at - execution.scheduled_for).total_seconds()


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def status_class(status: Status | ExecutionStatus | str | None) -> str:
    """A CSS class per status (the value is one of the enums, never free text)."""
    return f"st st-{str(status or 'none').lower().replace('_', '-')}"


def schedule_text(task: Task) -> str:
    return task.schedule_text()


def cron_words(task: Task) -> str | None:
    """The cron expression explained in words, or None (not cron, or not explainable)."""
    if not task.cron:
        return None
    try:
        return CronSchedule(task.cron, task.timezone).explain()
    except (TickworkError, ValueError):
        return None


def upcoming(task: Task, count: int = 5) -> list[tuple[datetime, datetime]]:
    """The next fire times, each in UTC and in the task's zone; none for a task that
    will not fire again."""
    if task.status.is_terminal:
        return []
    try:
        times = task.next_fire_times(count)
    except (TickworkError, ValueError):
        return []
    zone = ZoneInfo(task.timezone) if task.cron else ZoneInfo("UTC")
    return [(t, t.astimezone(zone)) for t in times]
