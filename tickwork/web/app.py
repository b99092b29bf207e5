"""The application factory: one FastAPI app serving the API, the dashboard and the probes
of one ``tickwork.App``.

It holds no global state: everything a route needs is closed over from the factory's
arguments, so tests build as many servers as they like, each on its own database.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from importlib import metadata
from pathlib import Path

import anyio.to_thread
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from tickwork.app import App
from tickwork.errors import InvalidInput
from tickwork.metrics import watch_queue
from tickwork.node.worker import check_sizes
from tickwork.web import api, dashboard, errors, probes
from tickwork.web.auth import SESSION_TTL, Auth
from tickwork.web.database import Database
from tickwork.web.middleware import AllowedHosts, BodyLimit, SecurityHeaders
from tickwork.web.node import BackgroundWorker

STATIC = Path(__file__).parent / "static"
MIN_BODY_LIMIT = 1024 * 1024

Lifespan = Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]


def create_app(
    app: App,
    *,
    token: str | None,
    public_read: bool = False,
    worker_concurrency: int | None = None,
    worker_prefetch: int | None = None,
    allowed_hosts: Sequence[str] | None = None,
    session_ttl: float = SESSION_TTL,
    database: Database | None = None,
) -> FastAPI:
    """The HTTP server of ``app``.

    ``token`` guards every write, and every read unless ``public_read``; ``None`` means
    no token is configured (nothing can be written). An empty or short token raises
    ``TokenConfigError``: it must never silently mean "no authentication".
    ``worker_concurrency``: also run a worker node with that many slots while the server
    runs (started once the database can be used, drained by the server's lifespan, inside
    its signal handling); ``worker_prefetch``, the claims it may hold beyond its busy
    slots (``App.worker``'s ``prefetch``: None sizes it to how long runs take).
    ``allowed_hosts``: answer only requests whose Host header is one of these (400
    otherwise) — with reads open to anyone who can connect, a page on any web site could
    otherwise read them through DNS rebinding to 127.0.0.1.
    ``session_ttl``: how long a dashboard sign-in lasts, in seconds (signing out ends it
    at once, on every server of the database).
    ``database``: how requests reach the store (tests pass one with other timings); the
    server opens the store in the background and never waits for it to start.
    """
    _check_node(worker_concurrency, worker_prefetch)
    auth = Auth(token, public_read=public_read, session_ttl=session_ttl)
    db = database or Database(app)
    db.on_open(lambda: watch_queue(db.current))  # the queue gauges of /metrics, read at scrape time
    server = FastAPI(
        title="tickwork",
        version=_version(),
        description="A persistent, distributed task scheduler: tasks, runs, nodes and the queue.",
        docs_url=None,  # the interactive docs load third-party scripts: /openapi.json is enough
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=_lifespan(app, db, worker_concurrency, worker_prefetch),
    )
    errors.install(server, db.is_transient, page=functools.partial(dashboard.error_page, has_token=auth.has_token))
    _routes(server, app, auth, db)
    _middleware(server, app, allowed_hosts)
    return server


def _check_node(concurrency: int | None, prefetch: int | None) -> None:
    """The in-process node's sizes, refused here under the names given here (a prefetch
    with no node too: it would bound nothing)."""
    if concurrency is None:
        if prefetch is not None:
            raise InvalidInput("worker_prefetch", prefetch, "bounds the in-process node: give worker_concurrency too")
        return
    try:
        check_sizes(concurrency, prefetch)
    except InvalidInput as exc:
        raise InvalidInput(f"worker_{exc.field}", exc.value, exc.reason) from None


def _lifespan(app: App, db: Database, worker_concurrency: int | None, worker_prefetch: int | None) -> Lifespan:
    """Open the store in the background when the server starts (and the worker node, if
    any); on the way out, drain the node before the store closes under it."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        db.start()
        node = None
        if worker_concurrency is not None:
            node = BackgroundWorker(app, worker_concurrency, db, prefetch=worker_prefetch)
            node.start()
        try:
            yield
        finally:
            if node is not None:
                await anyio.to_thread.run_sync(node.stop)
            db.stop()

    return lifespan


def _routes(server: FastAPI, app: App, auth: Auth, db: Database) -> None:
    """``/metrics`` follows the API's read rule; ``/healthz`` needs no token."""
    read, _ = api.guards(auth)
    server.include_router(api.router(app, auth, db))
    server.include_router(probes.router(app, read, db))
    server.include_router(dashboard.router(app, auth, db))
    server.mount("/static", StaticFiles(directory=STATIC), name="static")


def _middleware(server: FastAPI, app: App, allowed_hosts: Sequence[str] | None) -> None:
    # Room for max_payload bytes of arguments however they are spelled (escapes, spaces):
    # the App then checks the arguments' own encoded size exactly.
    server.add_middleware(BodyLimit, limit=max(MIN_BODY_LIMIT, 4 * app.max_payload))
    if allowed_hosts is not None:
        server.add_middleware(AllowedHosts, hosts=list(allowed_hosts))
    server.add_middleware(SecurityHeaders)  # the last added is outermost: on every answer


def _version() -> str:
    try:
        return metadata.version("tickwork")
    except metadata.PackageNotFoundError:
        return "0"
