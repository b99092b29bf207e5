"""The queues page: what waits in each queue, and pausing or resuming one (signed in,
with the session's CSRF token). A paused queue's tasks are claimed by no node."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from tickwork.app import App
from tickwork.errors import InvalidInput
from tickwork.web.auth import csrf_ok
from tickwork.web.dashboard.pages import Pages
from tickwork.web.database import Database

NOTICES = {"pause": "Paused: no node claims its tasks until it is resumed.", "resume": "Resumed."}


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/queues")
    @db.guard
    def queues(request: Request, done: str = "", name: str = "") -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        notice = f"Queue {name}: {NOTICES[done]}" if done in NOTICES and name else None
        return pages.render(request, "queues.html", title="Queues", queues=app.queues(), notice=notice)

    @r.post("/queues/{action}")
    @db.guard
    def act(
        request: Request, action: str, name: Annotated[str, Form()] = "", csrf: Annotated[str, Form()] = ""
    ) -> Response:
        who = pages.viewer(request)
        if who.session is None:
            return pages.to_login(request, "/queues")
        if not csrf_ok(who.csrf, csrf):
            return pages.problem(request, 403, "Forbidden", "The form expired: reload the page.")
        if action not in NOTICES:
            return pages.problem(request, 404, "Not found", "No such action.")
        try:
            (app.pause_queue if action == "pause" else app.resume_queue)(name)
        except InvalidInput as exc:
            return pages.problem(request, 422, "Not a queue name", str(exc))
        return RedirectResponse(f"/queues?done={action}&name={name}", status_code=303)

    return r
