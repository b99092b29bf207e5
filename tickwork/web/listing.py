"""Pages of tasks for the API and the dashboard, with a text search over task names.

The store filters by exact status and name and pages by id; a substring search is done
here, over a bounded walk of those pages, so one request never reads the whole table:
``q`` looks at no more than ``SCAN_LIMIT`` tasks from ``offset`` on, and ``next_offset``
says where to go on. (A store query with ``LIKE`` would search everything at once.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tickwork.app import App
from tickwork.model import Status, Task
from tickwork.web import reading
from tickwork.web.reading import Undecodable

SCAN_LIMIT = 5000
"""Most tasks one search request looks at."""
SCAN_CHUNK = 500


@dataclasses.dataclass(frozen=True)
class Page:
    items: list[Task | Undecodable]
    """Tasks, and rows that cannot be decoded in their places."""
    limit: int
    offset: int
    next_offset: int | None
    """The offset of the next page (a position among the tasks matching status and name);
    None when there is nothing after this page."""
    scanned: int


Row = Task | Undecodable


def find_tasks(
    app: App,
    *,
    status: Status | None,
    name: str | None,
    q: str | None,
    limit: int,
    offset: int,
    queue: str | None = None,
) -> Page:
    """Tasks in id order matching ``status``, ``name`` and ``queue`` exactly, and ``q``
    as a case-insensitive substring of the name."""

    def fetch(want: int, position: int) -> list[Row]:
        return reading.tasks(app, status=status, name=name, limit=want, offset=position, queue=queue)

    items, next_offset, scanned = walk(fetch, q, limit, offset)
    return Page(items, limit, offset, next_offset, scanned)


def walk(
    fetch: Callable[[int, int], list[Row]], q: str | None, limit: int, offset: int
) -> tuple[list[Row], int | None, int]:
    """Up to ``limit`` rows from ``offset`` whose name holds ``q`` (all without one),
    looking at no more than ``SCAN_LIMIT`` rows for a search: (rows, the offset to go
    on from or None at the end, rows looked at). ``fetch(limit, offset)`` reads a page."""
    if not q:
        rows = fetch(limit + 1, offset)
        return rows[:limit], (offset + limit if len(rows) > limit else None), min(len(rows), limit)
    needle, position, scanned = q.casefold(), offset, 0
    found: list[Row] = []
    while len(found) < limit and scanned < SCAN_LIMIT:
        want = min(SCAN_CHUNK, SCAN_LIMIT - scanned)
        chunk = fetch(want, position)
        consumed = 0
        for row in chunk:
            consumed += 1
            if needle in (row.name or "").casefold():
                found.append(row)
                if len(found) == limit:
                    break
        position, scanned = position + consumed, scanned + consumed
        if len(chunk) < want and consumed == len(chunk):
            return found, None, scanned  # the end of the list
    return found, position, scanned
