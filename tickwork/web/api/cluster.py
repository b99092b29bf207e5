"""``/api/v1/nodes`` and ``/api/v1/stats``: the worker nodes and the queue they serve."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from tickwork.app import App
from tickwork.web.database import Database
from tickwork.web.errors import responses
from tickwork.web.schemas import NodeList, NodeOut, StatsOut


def router(app: App, db: Database, read: Any) -> APIRouter:
    guard = db.guard
    r = APIRouter()

    @r.get("/nodes", response_model=NodeList, dependencies=[read], responses=responses(401, 503), tags=["cluster"])
    @guard
    def nodes() -> NodeList:
        return NodeList(items=[NodeOut.model_validate(n) for n in app.nodes()])

    @r.get(
        "/stats",
        response_model=StatsOut,
        dependencies=[read],
        responses=responses(401, 503),
        tags=["cluster"],
        summary="Queue depth and oldest due age, tasks per status, runs per minute and hour",
    )
    @guard
    def stats() -> StatsOut:
        return StatsOut.model_validate(app.stats())

    return r
