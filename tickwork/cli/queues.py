"""``tickwork queues list|pause|resume``: the queues, what waits in each, and pausing one."""

from __future__ import annotations

import json
from datetime import datetime

import click

from tickwork.cli import common
from tickwork.cli.common import client, errors_as_messages, json_option
from tickwork.store.queues import QueueInfo


@click.group()
def queues() -> None:
    """Queues: what waits in each, and pausing or resuming one (for every node at once)."""


@queues.command("list")
@json_option("Print the queues as one JSON list.")
@click.pass_context
@errors_as_messages
def queues_list(ctx: click.Context, as_json: bool) -> None:
    """Every queue a live task uses or that was ever paused: paused or not, PENDING tasks,
    those due now (the depth), RUNNING ones, and how long the oldest due one has waited."""
    app = client(ctx)
    rows, now = app.queues(), app.store.approximate_now()
    if as_json:
        click.echo(json.dumps([_as_dict(q, now) for q in rows], sort_keys=True))
        return
    if not rows:
        click.echo("no queues: no live task, and none was ever paused")
        return
    from rich.table import Table  # only where a table is shown: tickwork.cli.common

    table = Table(box=None, pad_edge=False)
    for column in ("queue", "state", "pending", "due", "running", "oldest due"):
        table.add_column(column, no_wrap=column != "queue", overflow="ellipsis", justify="left")
    for q in rows:
        age = "-" if q.oldest_due is None else f"{max(0.0, (now - q.oldest_due).total_seconds()):.0f} s"
        table.add_row(q.name, "PAUSED" if q.paused else "active", str(q.pending), str(q.due), str(q.running), age)
    common.console.print(table, markup=False, highlight=False)


@queues.command("pause")
@click.argument("name")
@click.pass_context
@errors_as_messages
def queues_pause(ctx: click.Context, name: str) -> None:
    """No task of queue NAME is claimed until it is resumed; runs going on finish."""
    client(ctx).pause_queue(name)
    click.echo(f"queue {name} paused: its tasks wait (tickwork queues resume {name})")


@queues.command("resume")
@click.argument("name")
@click.pass_context
@errors_as_messages
def queues_resume(ctx: click.Context, name: str) -> None:
    """Claim queue NAME's tasks again; the misfire policy decides about late slots."""
    client(ctx).resume_queue(name)
    click.echo(f"queue {name} resumed")


def _as_dict(q: QueueInfo, now: datetime) -> dict[str, object]:
    return {
        "name": q.name, "paused": q.paused, "changed_at": q.changed_at.isoformat() if q.changed_at else None,
        "pending": q.pending, "due": q.due, "running": q.running,
        "oldest_due_age": None if q.oldest_due is None else max(0.0, (now - q.oldest_due).total_seconds()),
    }  # fmt: skip
