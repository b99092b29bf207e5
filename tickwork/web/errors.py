"""Errors as answers: every failure the API reports is JSON of one shape (``ErrorOut``)
with the HTTP status that tells a client what to do about it.

422 invalid input (naming the field and the reason), 413 arguments over the payload
limit, 429 ``max_pending`` reached (with Retry-After), 404 unknown task, 409 a state
the operation does not apply to (or a task that kept changing while edited), 401 no valid
token, 503 the database is unusable. Input can never cause a 5xx: an unexpected error is
a bug, logged with its traceback and answered 500 without details.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from tickwork.errors import (
    EditConflict,
    InvalidInput,
    InvalidState,
    PayloadTooLarge,
    QueueFull,
    StoreError,
    TaskNotFound,
)
from tickwork.store import UndecodableRow
from tickwork.web.database import DatabaseUnavailable
from tickwork.web.schemas import ErrorOut

log = logging.getLogger("tickwork.web")


# What a 429 (and a 503 of a store error) asks the client to wait, in seconds.
RETRY_AFTER_S = 5

HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


class Unauthorized(Exception):
    """No valid bearer token for a route that needs one."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def error_response(
    status: int, error: str, message: str, *, field: str | None = None, reason: str | None = None, **headers: str
) -> JSONResponse:
    body = ErrorOut(error=error, message=message, field=field, reason=reason)
    return JSONResponse(body.model_dump(), status_code=status, headers=headers or None)


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The documented error answers of a route, for ``/openapi.json``."""
    text = {
        401: "No valid bearer token.",
        404: "No task with this id.",
        409: "The task's state does not allow this operation (or it kept changing while edited).",
        413: "Arguments or request body over the size limit.",
        422: "Invalid input: `field` and `reason` say what to fix.",
        429: "max_pending reached: the nodes are behind; nothing was stored, retry later.",
        503: "The database is not reachable or its schema is not usable.",
    }
    return {code: {"model": ErrorOut, "description": text[code]} for code in codes}


Page = Callable[..., Response]
"""``page(request, status, title, message, headers=...)``: an error as a dashboard page."""
API_PATHS = ("/api/", "/healthz", "/metrics", "/openapi.json", "/static/")


def wants_page(request: Request) -> bool:
    """A person's browser asking for a dashboard page (not an API client)."""
    return not request.url.path.startswith(API_PATHS) and "text/html" in request.headers.get("accept", "")


async def _undecodable(request: Request, exc: Exception) -> Response:
    """A stored row this version cannot read: a fault of the data that no retry mends,
    so 500 (as before rows named their column), never the 503 of a database away. The
    message names table, column and row id, and never quotes task data."""
    log.error("%s %s: %s", request.method, request.url.path, exc)
    return error_response(500, "undecodable", str(exc))


def install(api: FastAPI, is_transient: Callable[[BaseException], bool], *, page: Page | None = None) -> None:
    """Register the handlers that turn exceptions into ``ErrorOut`` answers.

    ``is_transient`` tells a database that is away (503, worth retrying) from a bug (500).
    ``page`` renders the 503 of a database that is away as a dashboard page, for browsers."""

    def away(request: Request, retry_after: int) -> Response:
        message = "the database cannot be used now: see the server log"
        headers = {"Retry-After": str(retry_after)}
        if page is not None and wants_page(request):
            return page(request, 503, "Database unavailable", f"{message}; this page retries by itself.", headers)
        return error_response(503, "unavailable", message, **headers)

    async def unavailable(request: Request, exc: Exception) -> Response:
        log.warning("store unavailable: %s", exc)  # the details may quote the database URL: log only
        return away(request, RETRY_AFTER_S)

    async def database_away(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, DatabaseUnavailable)  # logged by the watcher, once per outage
        return away(request, exc.retry_after)

    async def internal(request: Request, exc: Exception) -> Response:
        if is_transient(exc):
            return await unavailable(request, exc)
        log.error("unexpected error in %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(500, "internal", "internal error (logged on the server)")

    api.add_exception_handler(PayloadTooLarge, _payload_too_large)
    api.add_exception_handler(InvalidInput, _invalid_input)
    api.add_exception_handler(QueueFull, _queue_full)
    api.add_exception_handler(TaskNotFound, _not_found)
    api.add_exception_handler(InvalidState, _conflict)
    api.add_exception_handler(EditConflict, _conflict)  # the task kept changing: read it again
    api.add_exception_handler(DatabaseUnavailable, database_away)
    api.add_exception_handler(UndecodableRow, _undecodable)  # before StoreError: a data fault, not an outage
    api.add_exception_handler(StoreError, unavailable)
    api.add_exception_handler(Unauthorized, _unauthorized)
    api.add_exception_handler(RequestValidationError, _request_invalid)
    api.add_exception_handler(StarletteHTTPException, _http_error)
    api.add_exception_handler(Exception, internal)


# The answers that depend on nothing but the exception (those above close over the
# server's rules: which errors are transient, and how a browser is shown a 503).


async def _payload_too_large(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PayloadTooLarge)
    return error_response(413, "payload_too_large", str(exc), field=exc.field, reason=exc.reason)


async def _invalid_input(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidInput)
    return error_response(422, "invalid_input", str(exc), field=exc.field, reason=exc.reason)


async def _queue_full(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, QueueFull)
    return error_response(
        429, "queue_full", str(exc), field=exc.field, reason="queue full", **{"Retry-After": str(RETRY_AFTER_S)}
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(404, "not_found", str(exc))


async def _conflict(request: Request, exc: Exception) -> Response:
    return error_response(409, "conflict", str(exc))


async def _unauthorized(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Unauthorized)
    return error_response(401, "unauthorized", exc.message, **{"WWW-Authenticate": "Bearer"})


async def _request_invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    field, reason, shown = _first_problem(exc)
    message = f"{field}={shown}: {reason}" if shown is not None else f"{field}: {reason}"
    return error_response(422, "invalid_input", message, field=field, reason=reason)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:  # a body the parser could not read (not UTF-8, broken form data)
        return error_response(422, "invalid_input", f"body: {exc.detail}", field="body", reason=str(exc.detail))
    code = HTTP_CODES.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    return error_response(exc.status_code, code, str(exc.detail), **headers)


NUMBER_ERRORS = {"float_type", "int_type", "int_parsing", "float_parsing", "int_from_float"}


def _first_problem(exc: RequestValidationError) -> tuple[str, str, str | None]:
    """The field, reason and shown value of the first validation error, named as the
    client sent it (``kwargs``, ``limit``, ``at``), not by pydantic's location tuple."""
    errors = exc.errors()
    if not errors:
        return "request", "invalid request", None
    first = errors[0]
    kind = first.get("type")
    if kind == "json_invalid":
        return "body", f"not valid JSON: {first.get('msg', '')}", None
    location = list(first.get("loc", ()))
    if location and location[0] in ("body", "query", "path", "header", "cookie"):
        location = location[1:]
    field = ""
    for part in location:
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    reason = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    value = first.get("input")
    if isinstance(value, bool) and kind in NUMBER_ERRORS:
        reason = "must be a number, not a boolean"
    shown = None if kind == "missing" or not location else _shown(value)
    return field or "body", reason, shown


def _shown(value: Any, limit: int = 80) -> str:
    """A value as the client wrote it (JSON), cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
