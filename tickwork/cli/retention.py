"""``tickwork prune APP [--older-than 7d] [--keep-last N] [--dry-run]``: retention on
demand, in the same bounded batches a node uses (``Store.prune``)."""

from __future__ import annotations

from datetime import timedelta

import click

from tickwork.cli import common
from tickwork.cli.common import DURATION, errors_as_messages, load_app
from tickwork.errors import PruneBusy


@click.command()
@click.argument("app_spec", metavar="APP")
@click.option("--older-than", type=DURATION, help="Age past which history goes, e.g. 7d (default: APP's retention).")
@click.option(
    "--keep-last", type=click.IntRange(min=0), help="Runs of each recurring task always kept (default: APP's)."
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@errors_as_messages
def prune(app_spec: str, older_than: float | None, keep_last: int | None, dry_run: bool) -> None:
    """Delete APP's old history: executions that ended before --older-than (a recurring
    task keeps its newest --keep-last whatever their age) and ended one-time tasks with
    theirs. Live tasks and running runs are never touched."""
    app = load_app(app_spec)
    common.protect(app)
    age = timedelta(seconds=older_than) if older_than is not None else app.retention
    if age is None:
        common.console.print("retention=None keeps everything: give --older-than to prune anyway", markup=False)
        return
    keep = app.keep_last if keep_last is None else keep_last
    cutoff = app.store.now() - age
    try:
        counts = app.prune(age, keep_last=keep, dry_run=dry_run)
    except PruneBusy as exc:
        raise click.ClickException(str(exc)) from None
    verb = "would delete" if dry_run else "deleted"
    common.console.print(
        f"{verb} {counts.executions} executions and {counts.tasks} ended one-time tasks "
        f"(ended before {cutoff.isoformat(timespec='seconds')}; keeping the newest {keep} runs of each recurring task)",
        markup=False,
    )
