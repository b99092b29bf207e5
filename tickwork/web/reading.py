"""Reading tasks for the web layer when some rows cannot be decoded.

A row written by something other than tickwork (invalid JSON in ``args``, an unknown
status, a time out of range) makes the store's decoding fail, and with it the whole
page it is on. Here such a row becomes an ``Undecodable`` — its id, its name and status
as stored, and why it cannot be read — listed in its place, while every other row is
shown as usual. The fast path is the store's own listing; only a page that fails is read
again row by row (``Store.task_headers`` finds its rows without decoding them).
"""

from __future__ import annotations

import dataclasses

from tickwork.app import App
from tickwork.errors import InvalidState, TaskNotFound, TickworkError
from tickwork.model import Status, Task, TaskHeader
from tickwork.store import Store, UndecodableRow

CHUNK = 25
"""Rows re-read at once while looking for the undecodable ones of a page."""
REASON_LIMIT = 300


@dataclasses.dataclass(frozen=True)
class Undecodable:
    """A task row that cannot be decoded: what can be said about it, and why."""

    id: int
    name: str | None
    status: str | None
    reason: str


class TaskUndecodable(InvalidState):
    """An operation on a task whose row cannot be decoded (409): nothing was changed."""

    def __init__(self, row: Undecodable, operation: str) -> None:
        super().__init__(row.id, "undecodable", operation)
        self.row = row

    def __str__(self) -> str:
        row = self.row
        return f"task_id={row.id}: cannot {self.operation} it: its stored row cannot be decoded ({row.reason})"


def task(app: App, task_id: int) -> Task | Undecodable:
    """One task, or what can be said about its row; ``TaskNotFound`` if there is none."""
    store = app.store
    try:
        return app.get(task_id)
    except Exception as exc:
        if _passes(store, exc):
            raise
        header = store.task_header(task_id)
        if header is None:
            raise TaskNotFound(task_id) from None
        return _undecodable(header, exc)


def decodable(app: App, task_id: int, operation: str) -> Task:
    """The task, for an operation: ``TaskUndecodable`` if its row cannot be decoded."""
    found = task(app, task_id)
    if isinstance(found, Undecodable):
        raise TaskUndecodable(found, operation)
    return found


def tasks(
    app: App, *, status: Status | None, name: str | None, limit: int, offset: int, queue: str | None = None
) -> list[Task | Undecodable]:
    """``app.tasks(...)`` with each row that cannot be decoded in its place, as an
    ``Undecodable``."""
    store = app.store
    try:
        return list(app.tasks(status=status, name=name, limit=limit, offset=offset, queue=queue))
    except Exception as exc:
        if _passes(store, exc):
            raise
    headers = store.task_headers(
        status=status.value if status else None, name=name, limit=limit, offset=offset, queue=queue
    )
    found: list[Task | Undecodable] = []
    for start in range(0, len(headers), CHUNK):
        chunk = headers[start : start + CHUNK]
        found += _chunk(store, chunk, status, name, queue, offset + start)
    return found


def _passes(store: Store, exc: Exception) -> bool:
    """Whether ``exc`` is about something other than a row that cannot be decoded:
    tickwork's own refusals (no such task, invalid input) and a database that is away."""
    if isinstance(exc, UndecodableRow):
        return False
    return isinstance(exc, TickworkError) or store.is_transient(exc)


def _chunk(
    store: Store, chunk: list[TaskHeader], status: Status | None, name: str | None, queue: str | None, offset: int
) -> list[Task | Undecodable]:
    try:
        rows = store.list_tasks(status=status, name=name, limit=len(chunk), offset=offset, queue=queue)
    except Exception as exc:
        if store.is_transient(exc):
            raise
    else:
        if [t.id for t in rows] == [h.id for h in chunk]:
            return list(rows)
    return [_one(store, header) for header in chunk]  # the rows moved meanwhile, or one is bad


def _one(store: Store, header: TaskHeader) -> Task | Undecodable:
    try:
        found = store.get_task(header.id)
    except Exception as exc:
        if store.is_transient(exc):
            raise
        return _undecodable(header, exc)
    if found is None:  # deleted meanwhile (pruned): say so rather than drop it silently
        return Undecodable(header.id, header.name, header.status, "the row was removed while it was read")
    return found


def _undecodable(header: TaskHeader, exc: BaseException) -> Undecodable:
    return Undecodable(header.id, header.name, header.status, reason_of(exc))


def reason_of(exc: BaseException) -> str:
    """Why a row cannot be decoded, in one line (stored values may be long)."""
    text = " ".join(str(exc).split())
    return short(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def short(reason: str) -> str:
    return reason if len(reason) <= REASON_LIMIT else reason[: REASON_LIMIT - 3] + "..."
