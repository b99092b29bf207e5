"""How the commands show values in text: a field's value, a schedule, a cell cut to
fit (with an ellipsis), columns fitted to a width."""

from __future__ import annotations

import enum
import json
import textwrap
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickwork.model import Task

ELLIPSIS = "…"
GAP = "  "
MIN_COLUMN = 6


def shown_value(value: Any) -> str:
    """A field's value as a user would type it: ``none``, ``30``, ``"0 9 * * *"``,
    ``SKIP``, an ISO 8601 time, JSON for arguments."""
    if value is None:
        return "none"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (str, list, dict)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def schedule_text(cron: str | None, timezone: str, interval: float | None) -> str:
    """``cron 0 9 * * 1-5 (Europe/Berlin)``, ``every 300 s`` or ``once`` (as
    ``Task.schedule_text``, for a task not stored yet)."""
    if cron:
        return f"cron {cron} ({timezone})"
    if interval:
        return f"every {interval:g} s"
    return "once"


def ends_text(task: Task) -> str | None:
    """``until 2030-01-01T00:00:00+00:00; at most 5 runs (2 so far)``, or None without ends."""
    parts = []
    if task.until is not None:
        parts.append(f"until {task.until.isoformat()}")
    if task.max_runs is not None:
        parts.append(f"at most {task.max_runs} runs ({task.run_count} so far)")
    return "; ".join(parts) or None


def truncated(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, its end replaced by an ellipsis if cut."""
    text = " ".join(text.split("\n"))
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS if width > 0 else ""


def fit_columns(rows: Sequence[Sequence[str]], width: int, shrink: Sequence[int]) -> list[str]:
    """``rows`` (the first one the header) as aligned lines of at most ``width``
    characters: while too wide, the widest column of ``shrink`` loses a character."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    while sum(widths) + len(GAP) * (len(widths) - 1) > width:
        candidates = [i for i in shrink if widths[i] > MIN_COLUMN]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: widths[i])
        widths[widest] -= 1
    lines = []
    for row in rows:
        cells = [f"{truncated(cell, w):<{w}}" for cell, w in zip(row, widths, strict=True)]
        lines.append(truncated(GAP.join(cells).rstrip(), width))
    return lines


def seconds_text(seconds: float | None) -> str:
    """``0.120s``, ``42.5s``, ``12m05s``, ``3h02m`` (empty for None), negative with ``-``."""
    if seconds is None:
        return ""
    sign, s = ("-" if seconds < 0 else ""), abs(seconds)
    if s < 10:
        return f"{sign}{s:.3f}s"
    if s < 60:
        return f"{sign}{s:.1f}s"
    if s < 3600:
        return f"{sign}{int(s // 60)}m{int(s % 60):02d}s"
    return f"{sign}{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def wrapped(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` in full, each of its lines word-wrapped into lines of at most ``width``
    characters after ``indent`` (a line's own leading spaces kept, its continuations
    indented two more; a word too long for a line is broken): nothing is cut."""
    lines: list[str] = []
    room = max(width - len(indent), 16)
    for line in text.expandtabs(4).splitlines() or [""]:
        lead = line[: len(line) - len(line.lstrip(" "))][: room // 2]
        parts = textwrap.wrap(
            line.strip(" "), room, initial_indent=lead, subsequent_indent=lead + "  ", break_on_hyphens=False
        )
        lines.extend(indent + part for part in parts or [""])
    return lines
