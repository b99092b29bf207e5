"""Rendering a dashboard page for the person asking: the templates, who they are, and
the answers every page may give instead (an error page, or the way to sign in).

One ``Pages`` per server binds the access rules and the database's clock, so the route
modules only gather what their page shows.
"""

from __future__ import annotations

import functools
import json
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse

from tickwork.clock import utcnow
from tickwork.web.auth import SESSION_COOKIE, Auth
from tickwork.web.dashboard.next_run import next_run
from tickwork.web.dashboard.viewers import SignedOut, Viewer
from tickwork.web.database import Database
from tickwork.web.views import environment

PAGE_SIZE = 50
REFRESH_SECONDS = 5


@functools.cache
def _environment() -> Any:
    """The shared templates, with the dashboard's own helpers (the "next run" column, a
    run's result on one line)."""
    env = environment()
    env.globals["next_run"] = next_run
    env.filters["compact_json"] = compact_json
    return env


def compact_json(value: Any) -> str:
    """A stored result on one line, as JSON (escaped by the template like any text)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "), default=str)


def error_page(
    request: Request, status: int, title: str, message: str, headers: dict[str, str] | None = None, *, has_token: bool
) -> HTMLResponse:
    """An error as a page, without the database (the page refreshes itself)."""
    html = _environment().get_template("error.html").render(
        viewer=Viewer(None, False, has_token), path=request.url.path, refresh=REFRESH_SECONDS, now=utcnow(),
        title=title, message=message,
    )  # fmt: skip
    return HTMLResponse(html, status_code=status, headers=headers)


class Pages:
    """The pages of one server: its access rules, its signed-out sessions and its clock."""

    def __init__(self, auth: Auth, db: Database, signed_out: SignedOut) -> None:
        self.auth = auth
        self.db = db
        self.signed_out = signed_out
        self.env = _environment()

    def viewer(self, request: Request) -> Viewer:
        """Who is asking, worked out once per request (a signed-out session reads nothing)."""
        known: Viewer | None = getattr(request.state, "viewer", None)
        if known is not None:
            return known
        auth = self.auth
        session = auth.session(request.cookies.get(SESSION_COOKIE))
        if session is not None and self.signed_out.revoked(session):
            session = None
        request.state.viewer = found = Viewer(session, session is not None or auth.public_read, auth.has_token)
        return found

    def render(
        self, request: Request, template: str, status: int = 200, *, refresh: int = REFRESH_SECONDS, **context: Any
    ) -> HTMLResponse:
        html = self.env.get_template(template).render(
            viewer=self.viewer(request), path=request.url.path, refresh=refresh, now=self.db.now(), **context
        )
        return HTMLResponse(html, status_code=status)

    def problem(self, request: Request, status: int, title: str, message: str) -> HTMLResponse:
        return self.render(request, "error.html", status, refresh=0, title=title, message=message)

    @staticmethod
    def to_login(request: Request, target: str | None = None) -> RedirectResponse:
        """To the sign-in form, which comes back here (or to ``target``) afterwards."""
        if target is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
