"""``/api/v1/schedules``: the schedules this server's code declares (``@app.periodic``)
against those stored, as the plan a sync would carry out — a dry run, which changes
nothing.

The plan is computed as a sync computes it, under the store's sync lock (PostgreSQL: an
advisory lock; SQLite: its single writer's lock, for one short transaction), so it
needs the token even when reads are open: an anonymous client must not be able to queue
behind, or hold up, the syncs and writes of the nodes.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from tickwork.app import App
from tickwork.web.database import Database
from tickwork.web.errors import responses
from tickwork.web.schemas import ScheduleChangeList, ScheduleChangeOut


def router(app: App, db: Database, write: Any) -> APIRouter:
    r = APIRouter()

    @r.get(
        "/schedules",
        response_model=ScheduleChangeList,
        dependencies=[write],
        responses=responses(401, 422, 503),
        tags=["schedules"],
        summary="Declared schedules against stored ones: what a sync would do (a dry run; needs the token)",
    )
    @db.guard
    def schedules() -> ScheduleChangeList:
        """422 when a declaration cannot be scheduled now (say its ``until`` has passed):
        a sync would refuse it too."""
        plan = app.sync_schedules(dry_run=True)
        return ScheduleChangeList(items=[ScheduleChangeOut.model_validate(c.to_dict()) for c in plan])

    return r
