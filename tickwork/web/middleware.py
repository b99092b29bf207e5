"""The ASGI middlewares every answer goes through: a cap on request bodies, the
security headers of the dashboard and, with open reads, the server's own host names.

The cap turns a huge upload into a 413 before it is read into memory (the App's own
``max_payload`` check then judges the arguments exactly). The headers keep the
dashboard's pages from running any script or style that is not its own file
(Content-Security-Policy), from being framed, and from leaking URLs in referrers. A
request addressed to another name is refused in the JSON error shape of every answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)


class BodyTooLarge(HTTPException):
    """Raised inside ``receive`` once a streamed body passed the limit: an HTTP error, so
    the request parsers let it through to the error handlers (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds {limit} bytes")


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = self.limit + 1
                if declared > self.limit:
                    await self._refuse(send)
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        message = f"request body exceeds {self.limit} bytes"
        reason = f"must be at most {self.limit} bytes"
        await send_json(send, 413, error_body("payload_too_large", message, "body", reason))


def error_body(error: str, message: str, field: str | None = None, reason: str | None = None) -> bytes:
    """An ``ErrorOut`` answer, for the middlewares that answer before any route."""
    return json.dumps({"error": error, "message": message, "field": field, "reason": reason}).encode()


async def send_json(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def host_name(header: str) -> str:
    """The name part of a Host header, without the port: ``[::1]:8000`` is ``[::1]``."""
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        return header[: end + 1] if end > 0 else header
    return header.partition(":")[0]


class AllowedHosts:
    """Answer only requests whose Host header names this server (400 otherwise, as an
    ``ErrorOut`` with the security headers of every answer): with reads open, a page on
    another site could otherwise read them through DNS rebinding to 127.0.0.1."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str]) -> None:
        self.app = app
        self.hosts = frozenset(h.lower() for h in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), "")
        if host_name(header) in self.hosts:
            await self.app(scope, receive, send)
            return
        names = ", ".join(sorted(self.hosts))
        body = error_body(
            "invalid_host",
            f"this server answers only requests addressed to its own names ({names})",
            field="Host",
            reason="not a name of this server",
        )
        await send_json(send, 400, body)


class SecurityHeaders:
    """Add the security headers to every answer (the CSP only to HTML pages)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("Referrer-Policy", "no-referrer")
                headers.setdefault("X-Frame-Options", "DENY")
                if headers.get("content-type", "").startswith("text/html"):
                    headers.setdefault("Content-Security-Policy", CSP)
                    headers.setdefault("Cache-Control", "no-store")
            await send(message)

        await self.app(scope, receive, with_headers)
