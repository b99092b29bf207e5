"""Which tasks the tasks page lists, and in what order: newest first by default, oldest
first, or by next run, name or status; all kinds, recurring or one-time.

Newest and oldest first are the store's own order (``App.tasks(newest_first=)``, the
primary key walked either way), so they page through every task. The store has no
order by next run, name or status, so those sort the newest ``WINDOW`` matching tasks
here, and the page says so when there were more (narrowing the filters brings the rest
within reach). A search (``q``) walks at most ``listing.SCAN_LIMIT`` tasks per request,
as the API's does.

A page holding a row that cannot be decoded is read again through ``reading``, which
puts an ``Undecodable`` in that row's place; ``reading`` reads only in id order and
without a kind filter, so such a page is read that way, with a note (``Rows.degraded``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime

from tickwork.app import App
from tickwork.errors import TickworkError
from tickwork.model import Kind, Status, Task
from tickwork.store import UndecodableRow
from tickwork.web import reading
from tickwork.web.listing import walk
from tickwork.web.reading import Undecodable

Row = Task | Undecodable
SORTS = {"newest": "newest first", "oldest": "oldest first", "next": "next run", "name": "name", "status": "status"}
DEFAULT_SORT = "newest"
STORE_SORTS = ("newest", "oldest")
"""Orders the store pages through; the others sort a window of the newest tasks."""
WINDOW = 500
"""Newest matching tasks sorted by next run, name or status."""
KINDS = {"": "all kinds", Kind.RECURRING.value: "recurring", Kind.ONE_TIME.value: "one-time"}
NEXT_GROUP = {Status.RUNNING: 0, Status.PENDING: 1, Status.PAUSED: 2}
"""By next run: running now, then pending by due time, then paused, then ended."""
FAR = datetime.max.replace(tzinfo=None)


@dataclasses.dataclass(frozen=True)
class Filters:
    """What the tasks page was asked for, already read leniently."""

    status: Status | None = None
    name: str | None = None
    q: str | None = None
    kind: Kind | None = None
    sort: str = DEFAULT_SORT
    queue: str | None = None


@dataclasses.dataclass(frozen=True)
class Rows:
    """One page of tasks, and what the page should say about how it was read."""

    items: list[Row]
    offset: int
    next_offset: int | None
    scanned: int
    window_full: bool = False
    """Sorted among the newest ``WINDOW`` matching tasks, and there were more."""
    degraded: bool = False
    """A row could not be decoded: read in id order, without the kind filter."""


def sort_of(value: str, notes: list[str]) -> str:
    """The sort asked for, or the default with a note."""
    value = value.strip().lower()
    if not value:
        return DEFAULT_SORT
    if value not in SORTS:
        notes.append(f"Unknown sort ignored: {DEFAULT_SORT} first.")
        return DEFAULT_SORT
    return value


def kind_of(value: str, notes: list[str]) -> Kind | None:
    """``recurring``, ``one-time`` (or ``ONE_TIME``), or all kinds (also for ``all``)."""
    value = value.strip().upper().replace("-", "_")
    if value in ("", "ALL"):
        return None
    try:
        return Kind(value)
    except ValueError:
        notes.append("Unknown kind ignored.")
        return None


def page(app: App, filters: Filters, limit: int, offset: int) -> Rows:
    """The page of ``limit`` tasks from ``offset`` in the order ``filters.sort``."""
    newest_first = filters.sort != "oldest"
    degraded: list[bool] = []

    def fetch(want: int, start: int) -> list[Row]:
        rows, bad = _fetch(app, filters, newest_first, want, start)
        degraded.append(bad)
        return rows

    if filters.sort in STORE_SORTS:
        items, next_offset, scanned = walk(fetch, filters.q, limit, offset)
        return Rows(items, offset, next_offset, scanned, degraded=any(degraded))
    window, more, scanned = walk(fetch, filters.q, WINDOW, 0)
    ordered = sorted(window, key=SORT_KEYS[filters.sort])
    items = ordered[offset : offset + limit]
    next_offset = offset + limit if offset + limit < len(ordered) else None
    return Rows(items, offset, next_offset, scanned, window_full=more is not None, degraded=any(degraded))


def _fetch(app: App, filters: Filters, newest_first: bool, limit: int, offset: int) -> tuple[list[Row], bool]:
    """One page from the store: (rows, whether it had to be read in id order without
    the kind filter because a row could not be decoded)."""
    status, name, kind, queue = filters.status, filters.name, filters.kind, filters.queue
    if kind is None and not newest_first:
        return reading.tasks(app, status=status, name=name, limit=limit, offset=offset, queue=queue), False
    try:
        stored = app.tasks(
            status=status, name=name, kind=kind, newest_first=newest_first, limit=limit, offset=offset, queue=queue
        )
        return list(stored), False
    except Exception as exc:
        if not _undecodable(app, exc):
            raise
    if kind is None and name is None and queue is None:  # newest first, exactly: count back from the end
        stats = app.stats().by_status
        total = stats.get(status.value, 0) if status else sum(stats.values())
        start, end = max(0, total - offset - limit), max(0, total - offset)
        rows = reading.tasks(app, status=status, name=None, limit=end - start, offset=start) if end > start else []
        return list(reversed(rows)), False
    return reading.tasks(app, status=status, name=name, limit=limit, offset=offset, queue=queue), True


def _undecodable(app: App, exc: Exception) -> bool:
    """Whether ``exc`` says a stored row cannot be decoded (rather than refusing the
    input, or a database that is away: those pass on)."""
    if isinstance(exc, UndecodableRow):
        return True
    return not isinstance(exc, TickworkError) and not app.store.is_transient(exc)


def _by_next(row: Row) -> tuple[int, datetime, int]:
    if isinstance(row, Undecodable):
        return (4, FAR, -row.id)
    group = NEXT_GROUP.get(row.status, 3)
    due = row.next_run_at.replace(tzinfo=None) if group == 1 else FAR
    return (group, due, -row.id)


def _by_name(row: Row) -> tuple[str, int]:
    return ((row.name or "").casefold(), -row.id)


def _by_status(row: Row) -> tuple[str, int]:
    status = row.status if isinstance(row, Undecodable) else row.status.value
    return (str(status or "~"), -row.id)


SORT_KEYS: dict[str, Callable[[Row], tuple[object, ...]]] = {
    "next": _by_next,
    "name": _by_name,
    "status": _by_status,
}
