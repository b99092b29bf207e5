"""``/api/v1/tasks``: listing tasks, scheduling one, and reading one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from tickwork.app import App
from tickwork.model import Status
from tickwork.web import reading
from tickwork.web.api.params import Limit, TaskId
from tickwork.web.api.shapes import any_task, task_out, with_waiting
from tickwork.web.database import Database
from tickwork.web.errors import responses
from tickwork.web.listing import Page, find_tasks
from tickwork.web.schemas import MAX_ID, AnyTaskOut, ScheduleIn, TaskOut, TaskPage, Text

EXISTED = "Tickwork-Existed"
"""The header of ``POST /tasks`` that says whether the task was there already."""
_EXISTED_DOC: dict[str, Any] = {
    "description": "true: a live task already held the key (200); false: the task is new (201).",
    "schema": {"type": "string", "enum": ["true", "false"]},
}
SCHEDULED: dict[int | str, dict[str, Any]] = {
    201: {"description": "A new task.", "headers": {EXISTED: _EXISTED_DOC}},
    200: {
        "model": TaskOut,
        "description": "A live task already held the key: that task, unchanged (with replace: updated).",
        "headers": {EXISTED: _EXISTED_DOC},
    },
    **responses(401, 409, 413, 422, 429, 503),
}


def router(app: App, db: Database, read: Any, write: Any) -> APIRouter:
    guard = db.guard
    r = APIRouter()

    @r.get(
        "/tasks",
        response_model=TaskPage,
        dependencies=[read],
        responses=responses(401, 422, 503),
        summary="List tasks by status, name, queue and a text search over names",
    )
    @guard
    def list_tasks(
        status: Status | None = None,
        name: Annotated[Text | None, Query(max_length=300, description="Exact task name.")] = None,
        q: Annotated[
            Text | None,
            Query(max_length=300, description="Case-insensitive substring of the name (scans at most 5000 tasks)."),
        ] = None,
        queue: Annotated[Text | None, Query(max_length=100, description="Exact queue name.")] = None,
        limit: Limit = 100,
        offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    ) -> TaskPage:
        return page_out(find_tasks(app, status=status, name=name, q=q, limit=limit, offset=offset, queue=queue))

    @r.post(
        "/tasks",
        response_model=TaskOut,
        status_code=201,
        dependencies=[write],
        responses=SCHEDULED,
        summary="Schedule a registered task (with a key: the live task holding that key, 200)",
    )
    @guard
    def schedule(body: ScheduleIn, response: Response) -> TaskOut:
        """201 a new task; 200 the live task holding ``key`` (with ``replace``: updated)."""
        fields = body.model_dump(exclude_none=True, exclude={"name"})
        stored = app.schedule(body.name, **fields)
        response.status_code = 200 if stored.existed else 201
        response.headers[EXISTED] = "true" if stored.existed else "false"
        return task_out(stored)

    @r.get(
        "/tasks/{task_id}",
        response_model=AnyTaskOut,
        dependencies=[read],
        responses=responses(401, 404, 422, 503),
        summary="One task (or, for a row that cannot be decoded, what can be read of it and why)",
    )
    @guard
    def get_task(task_id: TaskId) -> AnyTaskOut:
        return with_waiting(app, reading.task(app, task_id))

    return r


def page_out(page: Page) -> TaskPage:
    return TaskPage(
        items=[any_task(t) for t in page.items],
        limit=page.limit,
        offset=page.offset,
        next_offset=page.next_offset,
        scanned=page.scanned,
    )
