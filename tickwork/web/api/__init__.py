"""The JSON API under ``/api/v1``: the App's client API over HTTP.

Each route is a thin call into ``tickwork.App``, which validates everything and raises
the errors that ``errors.install`` turns into answers; the routes only parse the
request, check the token, and shape the result. Handlers are plain functions: FastAPI
runs them on its thread pool, where the App's blocking store calls belong.

The routes live in one module per resource; this one puts them under the prefix, the
``tasks`` tag and the strict query check that all of them share, in the order that
``/openapi.json`` lists them.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from tickwork.app import App
from tickwork.web.api import actions, cluster, edits, executions, queues, registry, schedules, tasks
from tickwork.web.api.guards import guards
from tickwork.web.api.params import known_query
from tickwork.web.auth import Auth
from tickwork.web.database import Database

__all__ = ["guards", "router"]


def router(app: App, auth: Auth, db: Database) -> APIRouter:
    """The routes; each one that uses the store runs through ``db.guard`` (a 503 within
    about a second while the database is away)."""
    read, write = guards(auth)
    r = APIRouter(prefix="/api/v1", tags=["tasks"], dependencies=[Depends(known_query)])
    r.include_router(tasks.router(app, db, read, write))
    r.include_router(edits.router(app, db, write))
    r.include_router(actions.state_router(app, db, write))
    r.include_router(actions.run_now_router(app, db, write))
    r.include_router(executions.router(app, db, read))
    r.include_router(cluster.router(app, db, read))
    r.include_router(queues.router(app, db, read, write))
    r.include_router(registry.router(app, read))
    r.include_router(schedules.router(app, db, write))
    return r
