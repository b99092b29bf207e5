"""``tickwork serve APP``: the HTTP API and dashboard on uvicorn.

The command lives with the other commands, not in ``tickwork.web``: the web package is
the HTTP layer and knows nothing of the command line, so the dependency runs one way
(cli -> web) and the shared plumbing in ``tickwork.cli.common`` serves every command.
"""

from __future__ import annotations

import logging
import os

import click

from tickwork import logs
from tickwork.cli.common import DURATION, as_message, load_app, log_options, refuse_without_tasks
from tickwork.errors import TickworkError
from tickwork.urls import new_sqlite_file
from tickwork.web.auth import check_session_ttl


@click.command()
@click.argument("app_spec", metavar="APP")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (beyond loopback, a token is required).",
)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.option("--public-read", is_flag=True, help="Reads need no token (writes always do).")
@click.option("--with-worker", is_flag=True, help="Also run a worker node in this process.")
@click.option(
    "--concurrency",
    "-c",
    default=8,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Slots of the --with-worker node.",
)
@click.option(
    "--prefetch",
    type=click.IntRange(min=0),
    metavar="N",
    help="Claims the --with-worker node holds beyond its busy slots (default: sized to how long runs take; 0: none).",
)
@click.option(
    "--session-ttl",
    default="8h",
    show_default=True,
    type=DURATION,
    metavar="DURATION",
    help="How long a dashboard sign-in lasts: 30m, 12h, 7d (1 minute to 30 days). Signing out ends it at once.",
)
@log_options("the server's and node's")
def serve(
    app_spec: str,
    host: str,
    port: int,
    public_read: bool,
    with_worker: bool,
    concurrency: int,
    prefetch: int | None,
    session_ttl: float,
    log_level: str | None,
    log_format: str,
) -> None:
    """Serve the HTTP API (/api/v1) and the dashboard (/) of APP (module:attribute).

    The token is read from TICKWORK_API_TOKEN: it guards every write, and every read
    unless --public-read. Without it the server runs read-only, on loopback only.
    The server listens at once; while the database cannot be used it answers 503."""
    # Imported here: uvicorn is needed only by this command, not by every `tickwork` run.
    from tickwork.web.server import serve as run

    if prefetch is not None and not with_worker:
        raise click.UsageError("--prefetch applies to the node of --with-worker: give both, or neither")
    try:
        ttl = check_session_ttl(session_ttl)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--session-ttl") from exc
    logs.configure(log_level, log_format)
    app = load_app(app_spec)
    if with_worker:
        refuse_without_tasks(app, app_spec)
    if (new := new_sqlite_file(app.url)) is not None:  # opened in the background, once listening
        logging.getLogger("tickwork.web").warning(
            "no database at %s: a new, empty one is created (check TICKWORK_DB or --db)", new
        )
    try:
        run(
            app,
            host=host,
            port=port,
            token=os.environ.get("TICKWORK_API_TOKEN"),
            public_read=public_read,
            worker_concurrency=concurrency if with_worker else None,
            worker_prefetch=prefetch,
            session_ttl=ttl,
        )
    except TickworkError as exc:  # ServeConfigError and TokenConfigError among them
        raise as_message(exc) from exc
