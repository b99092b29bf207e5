"""``/api/v1/queues``: what waits in each queue, and pausing or resuming one (a write:
bearer token). A paused queue's tasks are not claimed by any node until it is resumed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from tickwork.app import App
from tickwork.validate import QUEUE_NAME
from tickwork.web.database import Database
from tickwork.web.errors import responses
from tickwork.web.schemas import QueueList, QueueOut

QueueName = Annotated[str, Path(pattern=f"^{QUEUE_NAME.pattern}$", max_length=100, examples=["emails"])]


def router(app: App, db: Database, read: Any, write: Any) -> APIRouter:
    guard = db.guard
    r = APIRouter(tags=["queues"])

    @r.get("/queues", response_model=QueueList, dependencies=[read], responses=responses(401, 503))
    @guard
    def queues() -> QueueList:
        """Every queue a live task uses or that was ever paused, with its counts."""
        return QueueList(items=[QueueOut.model_validate(q) for q in app.queues()])

    @r.post("/queues/{name}/pause", response_model=QueueOut, dependencies=[write], responses=responses(401, 422, 503))
    @guard
    def pause(name: QueueName) -> QueueOut:
        app.pause_queue(name)
        return _one(app, name)

    @r.post("/queues/{name}/resume", response_model=QueueOut, dependencies=[write], responses=responses(401, 422, 503))
    @guard
    def resume(name: QueueName) -> QueueOut:
        app.resume_queue(name)
        return _one(app, name)

    return r


def _one(app: App, name: str) -> QueueOut:
    [queue] = app.queues(name)  # just paused or resumed: it has a row
    return QueueOut.model_validate(queue)
