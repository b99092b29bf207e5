"""``/api/v1/…/executions``: the runs of one task, and of all tasks."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from tickwork.app import App
from tickwork.model import ExecutionStatus
from tickwork.web import reading
from tickwork.web.api.params import Limit, TaskId
from tickwork.web.database import Database
from tickwork.web.errors import responses
from tickwork.web.reading import Undecodable
from tickwork.web.schemas import ExecutionList, ExecutionOut


def router(app: App, db: Database, read: Any) -> APIRouter:
    guard = db.guard
    r = APIRouter()

    @r.get(
        "/tasks/{task_id}/executions",
        response_model=ExecutionList,
        dependencies=[read],
        responses=responses(401, 404, 422, 503),
        summary="A task's runs, newest first",
    )
    @guard
    def task_executions(task_id: TaskId, status: ExecutionStatus | None = None, limit: Limit = 100) -> ExecutionList:
        if isinstance(reading.task(app, task_id), Undecodable):  # its runs can still be read
            rows = app.store.list_executions(task_id=task_id, status=status, limit=limit)
        else:
            rows = app.executions(task_id, status=status, limit=limit)
        return ExecutionList(items=[ExecutionOut.model_validate(e) for e in rows])

    @r.get(
        "/executions",
        response_model=ExecutionList,
        dependencies=[read],
        responses=responses(401, 422, 503),
        summary="Recent runs of all tasks, newest first",
    )
    @guard
    def executions(status: ExecutionStatus | None = None, limit: Limit = 100) -> ExecutionList:
        rows = app.executions(status=status, limit=limit)
        return ExecutionList(items=[ExecutionOut.model_validate(e) for e in rows])

    return r
