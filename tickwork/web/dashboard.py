"""The dashboard: server-rendered pages over the same App the API uses.

Reading needs a signed-in session (or ``--public-read``); every form posts with the
session's CSRF token, checked before anything changes. Query parameters are parsed
leniently here (a bad filter shows everything, with a note) because a person typed
them; the API is the strict interface.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Any, TypeVar
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tickwork.app import App
from tickwork.errors import InvalidInput, InvalidState, TaskNotFound, TickworkError
from tickwork.model import Execution, ExecutionStatus, Status, Task
from tickwork.web.auth import LOGIN_COOKIE, SESSION_COOKIE, Auth, Session, csrf_ok, new_login_nonce
from tickwork.web.listing import find_tasks
from tickwork.web.schemas import plain_text
from tickwork.web.views import FAILURE_STATUSES, environment

PAGE_SIZE = 50
RECENT = 15
REFRESH_SECONDS = 5
ACTIONS = ("cancel", "pause", "resume", "trigger")
DONE = {
    "cancel": "Cancel requested.",
    "pause": "Paused.",
    "resume": "Resumed.",
    "trigger": "Due now: it runs at the next claim.",
}


@dataclasses.dataclass(frozen=True)
class Viewer:
    """Who is looking, and what the page may offer them."""

    session: Session | None
    can_read: bool
    has_token: bool

    @property
    def can_write(self) -> bool:
        return self.session is not None

    @property
    def csrf(self) -> str:
        return self.session.csrf if self.session else ""


def router(app: App, auth: Auth) -> APIRouter:
    env = environment()
    r = APIRouter(include_in_schema=False)

    def viewer(request: Request) -> Viewer:
        session = auth.session(request.cookies.get(SESSION_COOKIE))
        return Viewer(session, session is not None or auth.public_read, auth.has_token)

    def render(
        request: Request, template: str, status: int = 200, *, refresh: int = REFRESH_SECONDS, **context: Any
    ) -> HTMLResponse:
        html = env.get_template(template).render(
            viewer=viewer(request), path=request.url.path, refresh=refresh, now=app.store.approximate_now(), **context
        )
        return HTMLResponse(html, status_code=status)

    def problem(request: Request, status: int, title: str, message: str) -> HTMLResponse:
        return render(request, "error.html", status, refresh=0, title=title, message=message)

    def to_login(request: Request, target: str | None = None) -> RedirectResponse:
        """To the sign-in form, which comes back here (or to ``target``) afterwards."""
        if target is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target)}", status_code=303)

    @r.get("/")
    def overview(request: Request) -> Response:
        if not viewer(request).can_read:
            return to_login(request)
        stats = app.stats()
        total = sum(stats.by_status.values())
        newest = list(reversed(app.tasks(limit=RECENT, offset=max(0, total - RECENT))))
        failures = sorted(
            [run for status in FAILURE_STATUSES for run in app.executions(status=status, limit=5)],
            key=lambda run: run.id,
            reverse=True,
        )[:5]
        recent = app.executions(limit=RECENT)
        return render(
            request,
            "overview.html",
            title="Overview",
            stats=stats,
            total=total,
            statuses=[s.value for s in Status],
            runs_per_minute=sum(stats.runs_last_minute.values()),
            failures_last_hour=sum(stats.runs_last_hour.get(s, 0) for s in FAILURE_STATUSES),
            tasks=newest,
            failures=failures,
            names=_names(app, failures + recent),
            runs=recent,
        )

    @r.get("/tasks")
    def tasks(request: Request, status: str = "", name: str = "", q: str = "", offset: str = "0") -> Response:
        if not viewer(request).can_read:
            return to_login(request)
        notes: list[str] = []
        status_ = _choice(Status, status, "status", notes)
        start = _offset(offset, notes)
        name, q = _text(name, "name", notes), _text(q, "search", notes)
        try:
            page = find_tasks(app, status=status_, name=name or None, q=q or None, limit=PAGE_SIZE, offset=start)
        except InvalidInput as exc:
            notes.append(f"Filter ignored: {exc}")
            page = find_tasks(app, status=None, name=None, q=None, limit=PAGE_SIZE, offset=0)
        filters = {"status": status_.value if status_ else "", "name": name, "q": q}
        kept = {k: v for k, v in filters.items() if v}
        return render(
            request,
            "tasks.html",
            title="Tasks",
            page=page,
            filters=filters,
            statuses=[s.value for s in Status],
            names=app.registry.names(),
            notes=notes,
            next_url=None if page.next_offset is None else "/tasks?" + urlencode({**kept, "offset": page.next_offset}),
            # A search skips what does not match, so its pages only go forward (and back to the first).
            previous_url=None
            if start == 0
            else "/tasks?" + urlencode({**kept, "offset": 0 if q else max(0, start - PAGE_SIZE)}),
        )

    @r.get("/tasks/{task_id}")
    def task_page(request: Request, task_id: str, done: str = "") -> Response:
        if not viewer(request).can_read:
            return to_login(request)
        return show_task(request, task_id, notice=DONE.get(done))

    def show_task(
        request: Request, task_id: str, *, notice: str | None = None, error: str | None = None, status: int = 200
    ) -> Response:
        try:
            task = app.get(_id(task_id))
            runs = app.executions(task.id, limit=PAGE_SIZE)
        except (TaskNotFound, InvalidInput):
            return problem(request, 404, "Not found", f"No task {task_id}.")
        parent = None
        if task.parent_id is not None:
            try:
                parent = app.get(task.parent_id)
            except TaskNotFound:
                parent = None
        return render(
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

    @r.post("/tasks/{task_id}/{action}")
    def act(request: Request, task_id: str, action: str, csrf: Annotated[str, Form()] = "") -> Response:
        who = viewer(request)
        if who.session is None:
            return to_login(request, f"/tasks/{quote(task_id)}")
        if not csrf_ok(who.csrf, csrf):
            return problem(request, 403, "Forbidden", "The form expired: reload the page.")
        if action not in ACTIONS:
            return problem(request, 404, "Not found", "No such action.")
        try:
            ident = _id(task_id)
            if action == "cancel":
                app.cancel(ident)
            elif action == "pause":
                app.pause(ident)
            elif action == "resume":
                app.resume(ident)
            else:
                app.trigger(ident)
        except (TaskNotFound, InvalidInput):
            return problem(request, 404, "Not found", f"No task {task_id}.")
        except InvalidState as exc:
            return show_task(request, task_id, error=str(exc), status=409)
        except TickworkError as exc:
            return show_task(request, task_id, error=str(exc), status=422)
        return RedirectResponse(f"/tasks/{ident}?done={action}", status_code=303)

    @r.get("/runs")
    def runs(request: Request, status: str = "") -> Response:
        if not viewer(request).can_read:
            return to_login(request)
        notes: list[str] = []
        status_ = _choice(ExecutionStatus, status, "status", notes)
        rows = app.executions(status=status_, limit=PAGE_SIZE * 2)
        return render(
            request,
            "runs.html",
            title="Runs",
            runs=rows,
            names=_names(app, rows),
            selected=status_.value if status_ else "",
            statuses=[s.value for s in ExecutionStatus],
            notes=notes,
        )

    @r.get("/nodes")
    def nodes(request: Request) -> Response:
        if not viewer(request).can_read:
            return to_login(request)
        return render(request, "nodes.html", title="Nodes", nodes=app.nodes())

    @r.get("/login")
    def login_form(request: Request, next: str = "/") -> Response:
        return login_page(request, next)

    def login_page(request: Request, target: str, *, error: str | None = None, status: int = 200) -> Response:
        nonce = new_login_nonce()
        response = render(
            request, "login.html", status, refresh=0, title="Sign in", nonce=nonce, next=_local(target), error=error
        )
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            max_age=3600,
            path="/login",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @r.post("/login")
    def login(
        request: Request,
        token: Annotated[str, Form()] = "",
        csrf: Annotated[str, Form()] = "",
        next: Annotated[str, Form()] = "/",
    ) -> Response:
        if not csrf_ok(request.cookies.get(LOGIN_COOKIE), csrf):
            return login_page(request, next, error="The sign-in form expired: try again.", status=403)
        if not auth.has_token:
            return login_page(request, next, error="This server has no API token: sign-in is disabled.", status=401)
        if not auth.token_ok(token):
            return login_page(request, next, error="Wrong token.", status=401)
        response = RedirectResponse(_local(next), status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            auth.new_session(),
            max_age=int(auth.session_ttl),
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        response.delete_cookie(LOGIN_COOKIE, path="/login")
        return response

    @r.post("/logout")
    def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
        who = viewer(request)
        if who.session is not None and not csrf_ok(who.csrf, csrf):
            return problem(request, 403, "Forbidden", "The form expired: reload the page.")
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    return r


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


def _names(app: App, runs: list[Execution]) -> dict[int, str]:
    """Task names of the runs listed (one read per distinct task, a page at most)."""
    names: dict[int, str] = {}
    for run in runs:
        if run.task_id not in names:
            try:
                names[run.task_id] = app.get(run.task_id).name
            except TaskNotFound:
                names[run.task_id] = "?"
    return names


def _id(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 19:  # "²".isdigit() is True
        raise InvalidInput("task_id", text, "must be a positive integer")
    return int(text)


def _offset(text: str, notes: list[str]) -> int:
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    notes.append("Bad offset ignored.")
    return 0


E = TypeVar("E", bound=enum.StrEnum)


def _choice(kind: type[E], text: str, field: str, notes: list[str]) -> E | None:
    if not text:
        return None
    try:
        return kind(text.upper())
    except ValueError:
        notes.append(f"Unknown {field} ignored.")
        return None


def _text(value: str, field: str, notes: list[str]) -> str:
    """A filter the stores can compare (no NUL, valid Unicode), else none."""
    try:
        return plain_text(value)
    except ValueError:
        notes.append(f"Unusable {field} ignored.")
        return ""


def _local(target: str) -> str:
    """Only same-site paths: a crafted ?next= must not send a signed-in user elsewhere."""
    if not target.startswith("/") or target.startswith(("//", "/\\")) or any(c in target for c in "\r\n\\"):
        return "/"
    return target
