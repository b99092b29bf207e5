"""``/api/v1/tasks/{task_id}`` edited in place: ``PATCH`` (``App.update``) and
``…/retry`` (``App.retry``) — the same task id, its history kept.

Both are writes (bearer token), refused (409) for a task the API cannot show before
anything changes (``shapes.showable``), and 409 for a state they do not apply to or a
task that kept changing while it was edited (``EditConflict``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from tickwork.app import App
from tickwork.web.api.params import TaskId
from tickwork.web.api.shapes import showable, task_out
from tickwork.web.database import Database
from tickwork.web.errors import responses
from tickwork.web.schemas import TaskEditIn, TaskOut


def router(app: App, db: Database, write: Any) -> APIRouter:
    guard = db.guard
    r = APIRouter()

    @r.patch(
        "/tasks/{task_id}",
        response_model=TaskOut,
        dependencies=[write],
        responses=responses(401, 404, 409, 413, 422, 503),
        summary="Edit a task in place: its schedule, arguments, policies and ends (same id, history kept)",
    )
    @guard
    def update(task_id: TaskId, body: TaskEditIn) -> TaskOut:
        """Only the fields given change; ``null`` turns off ``timeout``, ``max_runtime``,
        ``until`` or ``max_runs``. 409 for an ended task (COMPLETED, FAILED, CANCELLED:
        retry it first) or one that kept changing while it was edited."""
        changes = body.model_dump(exclude_unset=True)
        showable(app, task_id, "update")
        return task_out(app.update(task_id, **changes))

    @r.post(
        "/tasks/{task_id}/retry",
        response_model=TaskOut,
        dependencies=[write],
        responses=responses(401, 404, 409, 422, 503),
        summary="Run a FAILED or CANCELLED task again: PENDING, due now, its history kept",
    )
    @guard
    def retry(task_id: TaskId) -> TaskOut:
        """409 for a task in any other state, or when another live task now holds its key."""
        showable(app, task_id, "retry")
        return task_out(app.retry(task_id))

    return r
