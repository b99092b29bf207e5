"""Asking before a cancel: the Cancel button leads here, to what cancelling this task
would stop, and only a post with ``confirm=yes`` (this page's Confirm button) cancels.

Done on the server, not in a script (the pages allow no inline script): a post without
the confirmation, from an old page or a forged form with a valid CSRF token, changes
nothing. ``GET /tasks/{id}/cancel`` shows the same question (a link, or coming back to it).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tickwork.app import App
from tickwork.errors import InvalidInput, InvalidState, TaskNotFound
from tickwork.model import Kind, Status, Task
from tickwork.web import reading
from tickwork.web.dashboard import parsing
from tickwork.web.dashboard.pages import Pages
from tickwork.web.database import Database
from tickwork.web.views import when

CONFIRMED = "yes"
"""The ``confirm`` field's value that cancels."""


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/tasks/{task_id}/cancel")
    @db.guard
    def confirm_page(request: Request, task_id: str) -> Response:
        if pages.viewer(request).session is None:
            return pages.to_login(request)
        try:
            task = reading.decodable(app, parsing.task_id(task_id), "cancel")
        except (TaskNotFound, InvalidInput):
            return pages.problem(request, 404, "Not found", f"No task {task_id}.")
        except InvalidState as exc:  # its row cannot be decoded
            return pages.problem(request, 409, "Conflict", str(exc))
        return ask(pages, request, task)

    return r


def ask(pages: Pages, request: Request, task: Task) -> Response:
    """The question for ``task`` (200), or, for an ended task, why there is nothing to
    cancel (409); never changes anything. The page does not refresh itself."""
    ended = task.status.is_terminal
    return pages.render(
        request,
        "cancel.html",
        409 if ended else 200,
        refresh=0,
        title=f"Cancel task {task.id}?",
        task=task,
        ended=ended,
        consequence=consequence(task),
        confirmed=CONFIRMED,
    )


def consequence(task: Task) -> str:
    """What cancelling would stop, in one sentence, by the task's state."""
    status = task.status
    if status.is_terminal:
        return f"It is {status.value}: there is nothing to cancel."
    recurring = task.kind is Kind.RECURRING
    later = "no later slot of it will run" if recurring else "it will not be retried"
    if status is Status.RUNNING:
        asked = " (a cancellation was already requested)" if task.cancel_requested else ""
        return (
            f"It is RUNNING{asked}: its run will be interrupted (its node stops it at its next heartbeat), and {later}."
        )
    if status is Status.PAUSED:
        return "It is PAUSED: it will not run again" + (f" ({task.schedule_text()})." if recurring else ".")
    if recurring:
        due = when(task.next_run_at)
        return f"It is PENDING ({task.schedule_text()}): none of its slots will run again, from {due} on."
    return f"It is PENDING, due {when(task.next_run_at)}: it will not run."
