"""The dashboard: server-rendered pages over the same App the API uses.

Reading needs a signed-in session (or ``--public-read``); every form posts with the
session's CSRF token, checked before anything changes. Signing out ends the session on
every server of the database (its id is kept as revoked until its cookie would have
expired). Query parameters are parsed leniently here (a bad filter shows everything,
with a note) because a person typed them; the API is the strict interface.

A form schedules a registered task (``schedule_page``) and a cancel is confirmed on a
page of its own first (``cancel_confirm``); the tasks page sorts and filters by kind
(``task_order``), and the "next run" column says "paused" or "running since" rather
than a past time (``next_run``).

Every page needs the database and runs through ``Database.guard``: while it is away a
page is a 503 (which refreshes itself) within about a second. A task row that cannot be
decoded is listed with a marker, and its page says why (``reading``).

One module per page (or pair of pages); this one binds them to one server's access
rules and database, in the order they are matched.
"""

from __future__ import annotations

from fastapi import APIRouter

from tickwork.app import App
from tickwork.web.auth import Auth
from tickwork.web.dashboard import (
    cancel_confirm,
    cluster,
    insights,
    login,
    overview,
    queues,
    schedule_page,
    task_list,
    task_page,
)
from tickwork.web.dashboard.pages import Pages, error_page
from tickwork.web.dashboard.viewers import SignedOut
from tickwork.web.database import Database

__all__ = ["error_page", "router"]


def router(app: App, auth: Auth, db: Database) -> APIRouter:
    pages = Pages(auth, db, SignedOut(app))
    r = APIRouter(include_in_schema=False)
    r.include_router(overview.router(app, db, pages))
    r.include_router(task_list.router(app, db, pages))
    r.include_router(schedule_page.router(app, db, pages))  # /tasks/new before /tasks/{task_id}
    r.include_router(cancel_confirm.router(app, db, pages))
    r.include_router(task_page.router(app, db, pages))
    r.include_router(cluster.router(app, db, pages))
    r.include_router(queues.router(app, db, pages))
    r.include_router(insights.router(app, db, pages))
    r.include_router(login.router(auth, db, pages))
    return r
