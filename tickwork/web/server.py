"""Running the server: where it may listen, with which token, on uvicorn.

The rules (DESIGN.md §5): a token is required to listen beyond loopback; a token that is
set but empty or short stops the start (it must not silently mean "no auth"); without a
token the server runs on loopback only, read-only, with reads open to local clients.
"""

from __future__ import annotations

import ipaddress
import logging

import uvicorn

from tickwork import logs
from tickwork.app import App
from tickwork.errors import TickworkError
from tickwork.redact import REDACTOR
from tickwork.web.app import create_app
from tickwork.web.auth import SESSION_TTL, TokenConfigError, check_token

log = logging.getLogger("tickwork.web")


class ServeConfigError(TickworkError, ValueError):
    """The server must not start with this configuration."""


def is_loopback(host: str) -> bool:
    """Only ``localhost`` and loopback addresses count: any other name may resolve to an
    address other hosts can reach."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")


def access(host: str, token: str | None, public_read: bool) -> bool:
    """Check the token and the address; return whether reads are public."""
    try:
        token = check_token(token)
    except TokenConfigError as exc:
        raise ServeConfigError(str(exc)) from exc
    if token is None:
        if not is_loopback(host):
            raise ServeConfigError(
                f"refusing to listen on {host!r} without a token: set TICKWORK_API_TOKEN, "
                "or listen on 127.0.0.1 for a read-only local server"
            )
        log.warning("no TICKWORK_API_TOKEN: serving read-only on %s (reads open to local clients)", host)
        return True
    return public_read


def serve(
    app: App,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    public_read: bool = False,
    worker_concurrency: int | None = None,
    worker_prefetch: int | None = None,
    session_ttl: float = SESSION_TTL,
) -> None:
    """Serve until SIGINT/SIGTERM (then drain the in-process node, if any). Listening
    starts at once: the database is opened in the background (503s until it can be used)."""
    public = access(host, token, public_read)
    # Open reads: only requests addressed to this server by name (no DNS rebinding).
    hosts = [*LOOPBACK_NAMES, host] if public else None
    server = create_app(
        app,
        token=token,
        public_read=public,
        worker_concurrency=worker_concurrency,
        worker_prefetch=worker_prefetch,
        allowed_hosts=hosts,
        session_ttl=session_ttl,
    )
    # In JSON mode uvicorn's lines go through the root logger's JSON handlers, not its own.
    log_config = None if logs.json_lines() else uvicorn.config.LOGGING_CONFIG
    config = uvicorn.Config(server, host=host, port=port, log_level="info", server_header=False, log_config=log_config)
    # uvicorn set up its loggers just now: mask secrets in everything they write (the
    # access log's query strings included), as in every other log line.
    REDACTOR.add_url(app.url)
    REDACTOR.add_url(app.redis_url)
    REDACTOR.add_secrets([token])
    REDACTOR.install("uvicorn", "uvicorn.error", "uvicorn.access")
    uvicorn.Server(config).run()
