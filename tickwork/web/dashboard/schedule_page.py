"""The "Schedule a task" page (``/tasks/new``): a registered task, its arguments and
when to run it, scheduled through ``App.schedule()``.

Only a signed-in session sees the form, and a post carries the session's CSRF token,
checked before anything is read; a viewer who may only read is sent to sign in (or, on
a server without a token, told it is read-only). A refused value shows the form again
as typed, with the reason next to the field it names (400), and stores nothing. A
scheduled task's page follows (303); with a key a live task already holds, that task's
page, saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from tickwork.app import App
from tickwork.errors import InvalidInput, QueueFull, TickworkError
from tickwork.web.auth import csrf_ok
from tickwork.web.dashboard import edit_form, schedule_form
from tickwork.web.dashboard.pages import Pages
from tickwork.web.dashboard.schedule_form import ScheduleForm
from tickwork.web.database import Database

PATH = "/tasks/new"
READ_ONLY = "This server has no API token, so it is read-only: nothing can be scheduled from the dashboard."
FIELD_OF = {"task": "name"}
"""A field ``schedule()`` names that the form calls otherwise."""


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    """Register before the task page's routes: ``/tasks/new`` is no task id."""
    r = APIRouter(include_in_schema=False)

    @r.get(PATH)
    @db.guard
    def new_task(request: Request, name: str = "") -> Response:
        refused = _refused(pages, request)
        if refused is not None:
            return refused
        form = schedule_form.blank()
        if name in app.registry.names():
            form["name"] = name  # "Schedule another" from a task's page
        return _form(app, pages, request, form)

    @r.post(PATH)
    @db.guard
    def schedule(request: Request, form: Annotated[ScheduleForm, Form()]) -> Response:
        refused = _refused(pages, request)
        if refused is not None:
            return refused
        if not csrf_ok(pages.viewer(request).csrf, form.csrf):
            return pages.problem(request, 403, "Forbidden", "The form expired: reload the page.")
        typed = form.values()
        try:
            name, keywords = schedule_form.request_of(typed)
            task = app.schedule(name, **keywords)
        except InvalidInput as exc:
            return _form(app, pages, request, typed, str(exc), FIELD_OF.get(exc.field, exc.field), 400)
        except QueueFull as exc:
            return _form(app, pages, request, typed, str(exc), None, 429)
        except TickworkError as exc:  # any other refusal of schedule(): nothing was stored
            return _form(app, pages, request, typed, str(exc), None, 409)
        return RedirectResponse(f"/tasks/{task.id}?done={'existed' if task.existed else 'scheduled'}", 303)

    return r


def _refused(pages: Pages, request: Request) -> Response | None:
    """None when the viewer may schedule; else where they go instead."""
    viewer = pages.viewer(request)
    if viewer.session is not None:
        return None
    if viewer.has_token:
        return pages.to_login(request, PATH)
    return pages.problem(request, 403, "Read-only", READ_ONLY)


def _form(
    app: App,
    pages: Pages,
    request: Request,
    form: Mapping[str, str],
    error: str | None = None,
    invalid: str | None = None,
    status: int = 200,
) -> Response:
    """The form, filled in with ``form``; with ``error`` next to the field ``invalid``
    (the page then does not refresh itself: what was typed stays)."""
    return pages.render(
        request,
        "task_new.html",
        status,
        refresh=0,
        title="Schedule a task",
        form=edit_form.shown(form),
        names=app.registry.names(),
        when_choices=schedule_form.WHEN,
        error=error,
        invalid=invalid,
    )
