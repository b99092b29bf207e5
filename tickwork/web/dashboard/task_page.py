"""One task's page, and the buttons on it (cancel, pause, resume, run now).

A button posts the session's CSRF token, checked before anything changes; a refused
action shows the task's page again with the reason (409 for a state it does not apply
to, 422 for any other refusal).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from tickwork.app import App
from tickwork.errors import InvalidInput, InvalidState, TaskNotFound, TickworkError
from tickwork.model import Status, Task
from tickwork.web import reading
from tickwork.web.auth import csrf_ok
from tickwork.web.dashboard import parsing
from tickwork.web.dashboard.pages import PAGE_SIZE, Pages
from tickwork.web.database import Database
from tickwork.web.reading import Undecodable

ACTIONS = ("cancel", "pause", "resume", "trigger")
DONE = {
    "cancel": "Cancel requested.",
    "pause": "Paused.",
    "resume": "Resumed.",
    "trigger": "Due now: it runs at the next claim.",
}


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/tasks/{task_id}")
    @db.guard
    def task_page(request: Request, task_id: str, done: str = "") -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        return show_task(app, pages, request, task_id, notice=DONE.get(done))

    @r.post("/tasks/{task_id}/{action}")
    @db.guard
    def act(request: Request, task_id: str, action: str, csrf: Annotated[str, Form()] = "") -> Response:
        who = pages.viewer(request)
        if who.session is None:
            return pages.to_login(request, f"/tasks/{quote(task_id)}")
        if not csrf_ok(who.csrf, csrf):
            return pages.problem(request, 403, "Forbidden", "The form expired: reload the page.")
        if action not in ACTIONS:
            return pages.problem(request, 404, "Not found", "No such action.")
        try:
            ident = parsing.task_id(task_id)
            reading.decodable(app, ident, action)
            _apply(app, action, ident)
        except (TaskNotFound, InvalidInput):
            return pages.problem(request, 404, "Not found", f"No task {task_id}.")
        except InvalidState as exc:
            return show_task(app, pages, request, task_id, error=str(exc), status=409)
        except TickworkError as exc:
            return show_task(app, pages, request, task_id, error=str(exc), status=422)
        return RedirectResponse(f"/tasks/{ident}?done={action}", status_code=303)

    return r


def show_task(
    app: App,
    pages: Pages,
    request: Request,
    task_id: str,
    *,
    notice: str | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    """The task's page; for a row that cannot be decoded, what can be read of it, why the
    rest cannot, and its runs."""
    try:
        task = reading.task(app, parsing.task_id(task_id))
    except (TaskNotFound, InvalidInput):
        return pages.problem(request, 404, "Not found", f"No task {task_id}.")
    if isinstance(task, Undecodable):
        runs = app.store.list_executions(task_id=task.id, limit=PAGE_SIZE)
        return pages.render(
            request, "undecodable.html", status, title=f"Task {task.id}", row=task, runs=runs, error=error
        )
    runs = app.executions(task.id, limit=PAGE_SIZE)
    parent = None
    if task.parent_id is not None:
        try:
            parent = reading.task(app, task.parent_id)
        except TaskNotFound:
            parent = None
    return pages.render(
        request,
        "task.html",
        status,
        title=f"Task {task.id}",
        task=task,
        runs=runs,
        parent=parent,
        notice=notice,
        error=error,
        actions=_actions(task),
    )


def _apply(app: App, action: str, task_id: int) -> None:
    """One of ``ACTIONS`` on a task; raises what the App raises."""
    if action == "cancel":
        app.cancel(task_id)
    elif action == "pause":
        app.pause(task_id)
    elif action == "resume":
        app.resume(task_id)
    else:
        app.trigger(task_id)


def _actions(task: Task) -> list[tuple[str, str]]:
    """The buttons a task's state allows: (action, label)."""
    buttons: list[tuple[str, str]] = []
    if task.status is Status.PENDING:
        buttons += [("trigger", "Run now"), ("pause", "Pause")]
    if task.status is Status.PAUSED:
        buttons.append(("resume", "Resume"))
    if not task.status.is_terminal and not task.cancel_requested:
        buttons.append(("cancel", "Cancel"))
    return buttons
