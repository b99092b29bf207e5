"""Pages of tasks for the API and the dashboard, with a text search over task names.

The store filters by exact status and name and pages by id; a substring search is done
here, over a bounded walk of those pages, so one request never reads the whole table:
``q`` looks at no more than ``SCAN_LIMIT`` tasks from ``offset`` on, and ``next_offset``
says where to go on. (A store query with ``LIKE`` would search everything at once.)
"""

from __future__ import annotations

import dataclasses

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


def find_tasks(app: App, *, status: Status | None, name: str | None, q: str | None, limit: int, offset: int) -> Page:
    """Tasks in id order matching ``status`` and ``name`` exactly, and ``q`` as a
    case-insensitive substring of the name."""
    if not q:
        rows = reading.tasks(app, status=status, name=name, limit=limit + 1, offset=offset)
        more = len(rows) > limit
        items = rows[:limit]
        return Page(items, limit, offset, offset + len(items) if more else None, len(items))
    needle = q.casefold()
    found: list[Task | Undecodable] = []
    position = offset
    scanned = 0
    exhausted = False
    while len(found) < limit and scanned < SCAN_LIMIT:
        want = min(SCAN_CHUNK, SCAN_LIMIT - scanned)
        chunk = reading.tasks(app, status=status, name=name, limit=want, offset=position)
        consumed = 0
        for task in chunk:
            consumed += 1
            if needle in (task.name or "").casefold():
                found.append(task)
                if len(found) == limit:
                    break
        position += consumed
        scanned += consumed
        if len(chunk) < want and consumed == len(chunk):
            exhausted = True  # the end of the list: nothing after this page
            break
    return Page(found, limit, offset, None if exhausted else position, scanned)
