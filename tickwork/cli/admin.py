"""The commands that make a database rather than use one: ``db upgrade`` and ``demo``."""

from __future__ import annotations

import click

from tickwork.cli import common
from tickwork.cli.common import SECONDS_OR_ZERO, client, errors_as_messages
from tickwork.urls import masked


@click.group()
def db() -> None:
    """Database schema."""


@db.command()
@click.pass_context
@errors_as_messages
def upgrade(ctx: click.Context) -> None:
    """Create or upgrade the schema to the latest version."""
    app = client(ctx, create=True)
    version = app.store.migrate()
    common.console.print(f"{masked(app.url)}: schema at version {version}", markup=False)


@click.command()
@click.option("--db-path", default="tickwork-demo.db", show_default=True, help="SQLite file (recreated).")
@click.option(
    "--duration",
    type=SECONDS_OR_ZERO,
    metavar="DURATION",
    help="Stop after this long: 20, 20s, 5m (default: until Ctrl-C).",
)
@errors_as_messages
def demo(db_path: str, duration: float | None) -> None:
    """Run example tasks (one-time, delayed, cron, interval, retried) on a local node,
    with the dashboard on 127.0.0.1 (its URL and a sign-in token are printed)."""
    from tickwork.demo import run_demo  # the demo's screen (rich) only where it runs

    run_demo(db_path, duration, common.console)
