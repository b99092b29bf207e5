"""The ``tickwork`` group: its global options, and the one place every command is added."""

from __future__ import annotations

import os

import click

from tickwork.cli import admin, edits, queues, reports, retention, schedules, serve, tasks, worker
from tickwork.cli.common import set_up_logging


@click.group()
@click.option("--db", envvar="TICKWORK_DB", help="Database URL (default sqlite:///tickwork.db).")
@click.option("--app", "app_spec", metavar="MODULE:ATTR", help="Application whose App (and database) to use.")
@click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug).")
@click.pass_context
def main(ctx: click.Context, db: str | None, app_spec: str | None, verbose: int) -> None:
    """tickwork: a persistent, distributed task scheduler."""
    set_up_logging(verbose, db)
    if db:
        os.environ["TICKWORK_DB"] = db  # an App() without an explicit URL reads it
    ctx.obj = {"db": db, "app_spec": app_spec}


for _command in (
    worker.worker,
    serve.serve,
    tasks.schedule,
    tasks.tasks,
    tasks.executions,
    schedules.schedules,
    queues.queues,
    reports.stats,
    reports.cron,
    retention.prune,
    admin.db,
    admin.demo,
):
    main.add_command(_command)
for _command in (edits.tasks_update, edits.tasks_retry):
    tasks.tasks.add_command(_command)
