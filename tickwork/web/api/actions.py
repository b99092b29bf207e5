"""``/api/v1/tasks/{task_id}/…``: what a client can do to a task — stop it or hold it
(cancel, pause, resume), or have it run now (trigger, backfill).

Every one is a write (bearer token), and is refused (409) for a task the API cannot
show, before anything changes (``shapes.showable``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from tickwork.app import App
from tickwork.web.api.params import TaskId
from tickwork.web.api.shapes import showable, task_out
from tickwork.web.database import Database
from tickwork.web.errors import responses
from tickwork.web.schemas import BackfillIn, TaskList, TaskOut


def state_router(app: App, db: Database, write: Any) -> APIRouter:
    """Cancel, pause and resume: the task's state changes, no run is added."""
    guard = db.guard
    r = APIRouter()

    @r.post(
        "/tasks/{task_id}/cancel",
        response_model=TaskOut,
        dependencies=[write],
        responses=responses(401, 404, 409, 422, 503),
        summary="Cancel a task (a running one is asked to stop: cancel_requested)",
    )
    @guard
    def cancel(
        task_id: TaskId,
        run_only: Annotated[bool, Query(description="Stop only the current run of a recurring task.")] = False,
    ) -> TaskOut:
        showable(app, task_id, "cancel")
        return task_out(app.cancel(task_id, run_only=run_only))

    @r.post(
        "/tasks/{task_id}/pause",
        response_model=TaskOut,
        dependencies=[write],
        responses=responses(401, 404, 409, 422, 503),
    )
    @guard
    def pause(task_id: TaskId) -> TaskOut:
        showable(app, task_id, "pause")
        return task_out(app.pause(task_id))

    @r.post(
        "/tasks/{task_id}/resume",
        response_model=TaskOut,
        dependencies=[write],
        responses=responses(401, 404, 409, 422, 503),
    )
    @guard
    def resume(
        task_id: TaskId,
        catch_up: Annotated[bool, Query(description="false: skip (and record) the slots missed while paused.")] = True,
    ) -> TaskOut:
        showable(app, task_id, "resume")
        return task_out(app.resume(task_id, catch_up=catch_up))

    return r


def run_now_router(app: App, db: Database, write: Any) -> APIRouter:
    """Trigger and backfill: runs now rather than at their scheduled time."""
    guard = db.guard
    r = APIRouter()

    @r.post(
        "/tasks/{task_id}/trigger",
        response_model=TaskOut,
        dependencies=[write],
        responses=responses(401, 404, 409, 422, 503),
        summary="Run a pending task now (a recurring one keeps its schedule)",
    )
    @guard
    def trigger(task_id: TaskId) -> TaskOut:
        showable(app, task_id, "trigger")
        return task_out(app.trigger(task_id))

    @r.post(
        "/tasks/{task_id}/backfill",
        response_model=TaskList,
        status_code=201,
        dependencies=[write],
        responses=responses(401, 404, 422, 503),
        summary="Run every slot of a recurring task in [start, end] once",
    )
    @guard
    def backfill(task_id: TaskId, body: BackfillIn) -> TaskList:
        showable(app, task_id, "backfill")
        return TaskList(items=[task_out(t) for t in app.backfill(task_id, body.start, body.end)])

    return r
