"""The dashboard: server-rendered pages over the same App the API uses.

Reading needs a signed-in session (or ``--public-read``); every form posts with the
session's CSRF token, checked before anything changes. Signing out ends the session on
every server of the database (its id is kept as revoked until its cookie would have
expired). Query parameters are parsed leniently here (a bad filter shows everything,
with a note) because a person typed them; the API is the strict interface.

Every page needs the database and runs through ``Database.guard``: while it is away a
page is a 503 (which refreshes itself) within about a second. A task row that cannot be
decoded is listed with a marker, and its page says why (``reading``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import threading
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tickwork.app import App
from tickwork.clock import utcnow
from tickwork.errors import InvalidInput, InvalidState, TaskNotFound, TickworkError
from tickwork.model import Execution, ExecutionStatus, Status, Task
from tickwork.web import reading
from tickwork.web.auth import LOGIN_COOKIE, SESSION_COOKIE, Auth, Session, csrf_ok, new_login_nonce
from tickwork.web.database import Database
from tickwork.web.listing import find_tasks
from tickwork.web.reading import Undecodable
from tickwork.web.schemas import plain_text
from tickwork.web.views import FAILURE_STATUSES, environment

PAGE_SIZE = 50
RECENT = 15
REVOKED_CACHE = 10_000
"""Signed-out session ids remembered by this process (a signed-out session never comes back)."""
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


@functools.cache
def _environment() -> Any:
    return environment()


def error_page(
    request: Request, status: int, title: str, message: str, headers: dict[str, str] | None = None, *, has_token: bool
) -> HTMLResponse:
    """An error as a page, without the database (the page refreshes itself)."""
    html = _environment().get_template("error.html").render(
        viewer=Viewer(None, False, has_token), path=request.url.path, refresh=REFRESH_SECONDS, now=utcnow(),
        title=title, message=message,
    )  # fmt: skip
    return HTMLResponse(html, status_code=status, headers=headers)


class SignedOut:
    """Which sessions signed out: the database's list, with the ids seen revoked
    remembered here (a revoked id stays revoked)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def revoked(self, session: Session) -> bool:
        if session.id in self._known:
            return True
        if not self.app.store.session_revoked(session.id):
            return False
        self._remember(session.id)
        return True

    def revoke(self, session: Session, until: datetime) -> None:
        self.app.store.revoke_session(session.id, until)
        self._remember(session.id)

    def _remember(self, session_id: str) -> None:
        with self._lock:
            if len(self._known) >= REVOKED_CACHE:
                self._known.clear()
            self._known.add(session_id)


def router(app: App, auth: Auth, db: Database) -> APIRouter:
    env = _environment()
    guard = db.guard
    signed_out = SignedOut(app)
    r = APIRouter(include_in_schema=False)

    def viewer(request: Request) -> Viewer:
        known: Viewer | None = getattr(request.state, "viewer", None)
        if known is not None:
            return known
        session = auth.session(request.cookies.get(SESSION_COOKIE))
        if session is not None and signed_out.revoked(session):
            session = None
        request.state.viewer = found = Viewer(session, session is not None or auth.public_read, auth.has_token)
        return found

    def render(
        request: Request, template: str, status: int = 200, *, refresh: int = REFRESH_SECONDS, **context: Any
    ) -> HTMLResponse:
        html = env.get_template(template).render(
            viewer=viewer(request), path=request.url.path, refresh=refresh, now=db.now(), **context
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
    @guard
    def overview(request: Request) -> Response:
        if not viewer(request).can_read:
            return to_login(request)
        stats = app.stats()
        total = sum(stats.by_status.values())
        newest = list(reversed(reading.tasks(app, status=None, name=None, limit=RECENT, offset=max(0, total - RECENT))))
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
    @guard
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
    @guard
    def task_page(request: Request, task_id: str, done: str = "") -> Response:
        if not viewer(request).can_read:
            return to_login(request)
        return show_task(request, task_id, notice=DONE.get(done))

    def show_task(
        request: Request, task_id: str, *, notice: str | None = None, error: str | None = None, status: int = 200
    ) -> Response:
        try:
            task = reading.task(app, _id(task_id))
        except (TaskNotFound, InvalidInput):
            return problem(request, 404, "Not found", f"No task {task_id}.")
        if isinstance(task, Undecodable):  # what can be read of it, why the rest cannot, and its runs
            runs = app.store.list_executions(task_id=task.id, limit=PAGE_SIZE)
            return render(
                request, "undecodable.html", status, title=f"Task {task.id}", row=task, runs=runs, error=error
            )
        runs = app.executions(task.id, limit=PAGE_SIZE)
        parent = None
        if task.parent_id is not None:
            try:
                parent = reading.task(app, task.parent_id)
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
    @guard
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
            reading.decodable(app, ident, action)
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
    @guard
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
    @guard
    def nodes(request: Request) -> Response:
        if not viewer(request).can_read:
            return to_login(request)
        return render(request, "nodes.html", title="Nodes", nodes=app.nodes())

    @r.get("/login")
    @guard
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
    @guard
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
    @guard
    def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
        who = viewer(request)
        if who.session is not None:
            if not csrf_ok(who.csrf, csrf):
                return problem(request, 403, "Forbidden", "The form expired: reload the page.")
            # Ended everywhere: a copy of the cookie is refused by every server from now on.
            until = datetime.fromtimestamp(auth.expires_at(who.session), UTC)
            signed_out.revoke(who.session, until)
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
                names[run.task_id] = reading.task(app, run.task_id).name or "?"
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
