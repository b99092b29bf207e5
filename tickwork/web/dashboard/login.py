"""Signing in and out of the dashboard.

Signing in trades the API token, once, for a session cookie; the form carries a
double-submit CSRF token in a cookie of its own, since there is no session yet to derive
one from. Signing out ends the session on every server of the database (its id is kept
as revoked until its cookie would have expired).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from tickwork.web.auth import LOGIN_COOKIE, SESSION_COOKIE, Auth, csrf_ok, new_login_nonce
from tickwork.web.dashboard import parsing
from tickwork.web.dashboard.pages import Pages
from tickwork.web.database import Database


def router(auth: Auth, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/login")
    @db.guard
    def login_form(request: Request, next: str = "/") -> Response:
        return login_page(pages, request, next)

    @r.post("/login")
    @db.guard
    def login(
        request: Request,
        token: Annotated[str, Form()] = "",
        csrf: Annotated[str, Form()] = "",
        next: Annotated[str, Form()] = "/",
    ) -> Response:
        if not csrf_ok(request.cookies.get(LOGIN_COOKIE), csrf):
            return login_page(pages, request, next, error="The sign-in form expired: try again.", status=403)
        if not auth.has_token:
            disabled = "This server has no API token: sign-in is disabled."
            return login_page(pages, request, next, error=disabled, status=401)
        if not auth.token_ok(token):
            return login_page(pages, request, next, error="Wrong token.", status=401)
        return _signed_in(auth, request, next)

    @r.post("/logout")
    @db.guard
    def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
        who = pages.viewer(request)
        if who.session is not None:
            if not csrf_ok(who.csrf, csrf):
                return pages.problem(request, 403, "Forbidden", "The form expired: reload the page.")
            # Ended everywhere: a copy of the cookie is refused by every server from now on.
            until = datetime.fromtimestamp(auth.expires_at(who.session), UTC)
            pages.signed_out.revoke(who.session, until)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    return r


def login_page(pages: Pages, request: Request, target: str, *, error: str | None = None, status: int = 200) -> Response:
    """The sign-in form, with a fresh CSRF nonce in its own cookie (scoped to ``/login``)."""
    nonce = new_login_nonce()
    response = pages.render(
        request, "login.html", status, refresh=0, title="Sign in", nonce=nonce, next=parsing.local(target), error=error
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


def _signed_in(auth: Auth, request: Request, target: str) -> Response:
    """Back to where the person was going, with a new session cookie (and the sign-in
    form's nonce cookie gone)."""
    response = RedirectResponse(parsing.local(target), status_code=303)
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
