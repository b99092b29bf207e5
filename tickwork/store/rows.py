"""Task rows without decoding them: their id, name and status as stored.

A row this code cannot decode (written by hand or by another program: invalid JSON, an
unknown status, a time out of range) must not hide the others. The readers of such
lists (the web layer) fall back on these headers to find the rows and decode them one
by one. Queries in rows.sql, beside ``SQLStore`` for now.
"""

from __future__ import annotations

import dataclasses

from tickwork.store.base import Store
from tickwork.store.bind import bind, dialect_of
from tickwork.store.sql import Row


@dataclasses.dataclass(frozen=True)
class TaskHeader:
    id: int
    name: str | None
    status: str | None


def task_headers(store: Store, *, status: str | None, name: str | None, limit: int, offset: int) -> list[TaskHeader]:
    """The headers of ``list_tasks(status=, name=, limit=, offset=)``'s rows, in its order."""
    dialect = dialect_of(store)
    bind(dialect, "rows.sql")
    params = {"status": status, "name": name, "limit": limit, "offset": offset}
    with dialect.reader() as s:
        return [_header(r) for r in s.fetch_all("task_headers", params)]


def task_header(store: Store, task_id: int) -> TaskHeader | None:
    dialect = dialect_of(store)
    bind(dialect, "rows.sql")
    with dialect.reader() as s:
        row = s.fetch_one("task_header", {"id": task_id})
    return None if row is None else _header(row)


def _header(r: Row) -> TaskHeader:
    return TaskHeader(int(r["id"]), _text(r["name"]), _text(r["status"]))


def _text(value: object) -> str | None:
    return None if value is None else str(value)
