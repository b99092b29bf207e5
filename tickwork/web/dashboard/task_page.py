"""One task's page, the buttons on it (cancel, pause, resume, run now, retry) and its
edit form.

A button or the form posts the session's CSRF token, checked before anything changes; a
refused action shows the task's page again with the reason (409 for a state it does not
apply to, 422 for any other refusal). Cancel asks first: its button (or a post without
``confirm=yes``) shows what cancelling would stop, and only the confirmed post cancels
(``cancel_confirm``). A refused edit shows the form again as it was
typed, with the reason next to it (``edit_form`` reads it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from tickwork.app import App
from tickwork.errors import EditConflict, InvalidInput, InvalidState, TaskNotFound, TickworkError
from tickwork.model import Status, Task
from tickwork.web import reading
from tickwork.web.auth import csrf_ok
from tickwork.web.dashboard import cancel_confirm, edit_form, insights, next_run, parsing
from tickwork.web.dashboard.edit_form import EditForm
from tickwork.web.dashboard.pages import PAGE_SIZE, Pages
from tickwork.web.database import Database
from tickwork.web.reading import Undecodable

ACTIONS = ("cancel", "pause", "resume", "trigger", "retry")
DONE = {
    "cancel": "Cancel requested.",
    "pause": "Paused.",
    "resume": "Resumed.",
    "trigger": "Due now: it runs at the next claim.",
    "retry": "Retried: pending again, due now.",
    "edit": "Saved.",
    "scheduled": "Scheduled.",
    "existed": "A live task already held this key: this is that task, unchanged (nothing new was scheduled).",
    "unchanged": "Nothing changed.",
}
RETRIABLE = (Status.FAILED, Status.CANCELLED)


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/tasks/{task_id}")
    @db.guard
    def task_page(request: Request, task_id: str, done: str = "") -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        return show_task(app, pages, request, task_id, notice=DONE.get(done))

    @r.post("/tasks/{task_id}/edit")
    @db.guard
    def edit(request: Request, task_id: str, form: Annotated[EditForm, Form()]) -> Response:
        who = pages.viewer(request)
        if who.session is None:
            return pages.to_login(request, f"/tasks/{quote(task_id)}")
        if not csrf_ok(who.csrf, form.csrf):
            return pages.problem(request, 403, "Forbidden", "The form expired: reload the page.")
        return _edit(app, pages, request, task_id, form)

    @r.post("/tasks/{task_id}/{action}")
    @db.guard
    def act(
        request: Request,
        task_id: str,
        action: str,
        csrf: Annotated[str, Form()] = "",
        confirm: Annotated[str, Form()] = "",
    ) -> Response:
        who = pages.viewer(request)
        if who.session is None:
            return pages.to_login(request, f"/tasks/{quote(task_id)}")
        if not csrf_ok(who.csrf, csrf):
            return pages.problem(request, 403, "Forbidden", "The form expired: reload the page.")
        if action not in ACTIONS:
            return pages.problem(request, 404, "Not found", "No such action.")
        try:
            ident = parsing.task_id(task_id)
            task = reading.decodable(app, ident, action)
            if action == "cancel" and confirm != cancel_confirm.CONFIRMED:
                return cancel_confirm.ask(pages, request, task)
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
    edit: Mapping[str, str] | None = None,
    edit_error: str | None = None,
    invalid: str | None = None,
) -> Response:
    """The task's page; for a row that cannot be decoded, what can be read of it, why the
    rest cannot, and its runs. ``edit``: the edit form as it was posted (shown again,
    with ``edit_error`` next to it, ``invalid`` the field it names); a page answering a
    post does not refresh itself."""
    try:
        task = reading.task(app, parsing.task_id(task_id))
    except (TaskNotFound, InvalidInput):
        return pages.problem(request, 404, "Not found", f"No task {task_id}.")
    refresh = {} if edit is None else {"refresh": 0}
    if isinstance(task, Undecodable):
        runs = app.store.list_executions(task_id=task.id, limit=PAGE_SIZE)
        return pages.render(
            request, "undecodable.html", status, title=f"Task {task.id}", row=task, runs=runs, error=error, **refresh
        )
    runs = app.executions(task.id, limit=PAGE_SIZE)
    return pages.render(
        request,
        "task.html",
        status,
        **refresh,
        title=f"Task {task.id}",
        task=task,
        runs=runs,
        since=next_run.started(runs),
        name_reports=insights.name_reports(app, task.name),
        parent=_parent(app, task),
        notice=notice,
        waiting=app.why_waiting(task),
        error=error,
        actions=_actions(task),
        editable=not task.status.is_terminal,
        form=edit_form.values_of(task) if edit is None else edit_form.shown(edit),
        fields=edit_form.fields_of(task),
        choices=edit_form.CHOICE_VALUES,
        edit_error=edit_error,
        invalid=invalid,
    )


def _parent(app: App, task: Task) -> Task | Undecodable | None:
    """The recurring task a backfill run belongs to, if it is still there."""
    if task.parent_id is None:
        return None
    try:
        return reading.task(app, task.parent_id)
    except TaskNotFound:
        return None


def _edit(app: App, pages: Pages, request: Request, task_id: str, form: EditForm) -> Response:
    """Apply a posted edit form: back to the task's page, or the form again as typed
    with the reason (422 a value; 409 a state, or a task edited since the form was
    shown: saving the values of then would undo that edit)."""
    typed = form.values()
    try:
        task = reading.decodable(app, parsing.task_id(task_id), "update")
    except (TaskNotFound, InvalidInput):
        return pages.problem(request, 404, "Not found", f"No task {task_id}.")
    except InvalidState as exc:  # its row cannot be decoded
        return show_task(app, pages, request, task_id, error=str(exc), status=409)
    if form.revision != str(task.revision) and not task.status.is_terminal:  # ended: update() says so
        stale = f"The task was changed since this form was shown (revision {task.revision} now): check the values "
        return show_task(app, pages, request, task_id, edit=typed, edit_error=stale + "and save again.", status=409)
    try:
        changes = edit_form.changes(task, typed)
        if changes:
            app.update(task.id, **changes)
    except TaskNotFound:  # removed meanwhile
        return pages.problem(request, 404, "Not found", f"No task {task_id}.")
    except InvalidInput as exc:
        return show_task(app, pages, request, task_id, edit=typed, edit_error=str(exc), invalid=exc.field, status=422)
    except (InvalidState, EditConflict) as exc:
        return show_task(app, pages, request, task_id, edit=typed, error=str(exc), status=409)
    return RedirectResponse(f"/tasks/{task.id}?done={'edit' if changes else 'unchanged'}", status_code=303)


def _apply(app: App, action: str, task_id: int) -> None:
    """One of ``ACTIONS`` on a task; raises what the App raises."""
    if action == "cancel":
        app.cancel(task_id)
    elif action == "pause":
        app.pause(task_id)
    elif action == "resume":
        app.resume(task_id)
    elif action == "retry":
        app.retry(task_id)
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
    if task.status in RETRIABLE:
        buttons.append(("retry", "Retry"))
    return buttons
