"""The commands that write and read tasks: ``schedule``, ``tasks ...`` and ``executions``."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click
from rich.table import Table

from tickwork.cli import common
from tickwork.cli.common import (
    SECONDS,
    SECONDS_OR_ZERO,
    Count,
    Moment,
    both_zones,
    client,
    errors_as_messages,
    load_app,
    parse_datetime,
    parse_json,
    print_executions,
)
from tickwork.model import Status, Task


@click.command()
@click.argument("app_spec", metavar="APP")
@click.argument("name")
@click.option("--cron", help="Cron expression (5 fields or @daily, @hourly, ...).")
@click.option("--timezone", default="UTC", show_default=True, help="IANA zone the cron expression is read in.")
@click.option("--every", type=SECONDS, metavar="DURATION", help="Run every N seconds, or 30s, 15m, 12h, 7d, 1h30m.")
@click.option("--delay", type=SECONDS_OR_ZERO, metavar="DURATION", help="Run once, this long from now (60, 1m, ...).")
@click.option("--at", "at_text", help="Run once at an ISO 8601 time with offset, e.g. 2030-01-01T09:00:00+01:00.")
@click.option("--args", "args_json", default="[]", help="Positional arguments as a JSON list.")
@click.option("--kwargs", "kwargs_json", default="{}", help="Keyword arguments as a JSON object.")
@click.option("--key", help="Idempotency key: no second live task with the same key.")
@click.option("--replace", is_flag=True, help="With --key: update the live task holding it to this definition.")
@click.option("--max-retries", type=int)
@click.option("--retry-backoff", type=SECONDS, metavar="DURATION")
@click.option("--timeout", type=SECONDS, metavar="DURATION")
@click.option("--jitter", type=SECONDS_OR_ZERO, metavar="DURATION")
@click.option("--priority", type=int)
@click.option("--misfire", type=click.Choice(["SKIP", "SINGLE_CATCHUP", "CATCHUP"], case_sensitive=False))
@click.option("--until", type=Moment(), metavar="ISO8601", help="Recurring: no slot after this time.")
@click.option("--max-runs", type=Count(), metavar="N", help="Recurring: at most N runs in all.")
@errors_as_messages
def schedule(
    app_spec: str, name: str, cron: str | None, timezone: str, every: float | None, delay: float | None,
    at_text: str | None, args_json: str, kwargs_json: str, key: str | None, replace: bool, max_retries: int | None,
    retry_backoff: float | None, timeout: float | None, jitter: float | None, priority: int | None,
    misfire: str | None, until: datetime | None, max_runs: int | None,
) -> None:  # fmt: skip
    """Schedule task NAME of APP once (now, --delay, --at) or recurring (--cron, --every).

    With --key, a live task that already holds the key is left as it is (and said so),
    or, with --replace, updated in place to this definition."""
    if replace and key is None:
        raise click.UsageError("--replace needs --key: it replaces the live task that holds the key")
    app = load_app(app_spec)
    task = app.schedule(
        name, args=parse_json("args", args_json), kwargs=parse_json("kwargs", kwargs_json), delay=delay,
        at=parse_datetime("at", at_text), cron=cron, timezone=timezone, every=every, key=key,
        max_retries=max_retries, retry_backoff=retry_backoff, timeout=timeout, jitter=jitter,
        priority=priority, misfire=misfire, until=until, max_runs=max_runs, replace=replace,
    )  # fmt: skip
    if task.existed:
        verdict = (
            f"task {task.id} for key {key} replaced"
            if replace
            else f"task {task.id} already exists for key {key} (unchanged)"
        )
        common.console.print(verdict, markup=False, highlight=False)
        return
    common.console.print(
        f"scheduled task {task.id} ({task.name}), next run at {task.next_run_at.isoformat()}", markup=False
    )


@click.group()
def tasks() -> None:
    """List, inspect and manage tasks."""


@tasks.command("list")
@click.option("--status", type=click.Choice([s.value for s in Status], case_sensitive=False))
@click.option("--name")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.pass_context
@errors_as_messages
def tasks_list(ctx: click.Context, status: str | None, name: str | None, limit: int) -> None:
    """List tasks."""
    table = Table()
    for column in ("id", "name", "kind", "schedule", "status", "next run (UTC)", "runs", "last"):
        table.add_column(column)
    for t in client(ctx).tasks(status=status, name=name, limit=limit):
        table.add_row(
            str(t.id), t.name, t.kind.value, t.schedule_text(), t.status.value,
            f"{t.next_run_at:%Y-%m-%d %H:%M:%S}" if not t.status.is_terminal else "",
            str(t.run_count), t.last_status.value if t.last_status else "",
        )  # fmt: skip
    common.console.print(table)


@tasks.command("show")
@click.argument("task_id", type=int)
@click.pass_context
@errors_as_messages
def tasks_show(ctx: click.Context, task_id: int) -> None:
    """Show one task, its next fire times and its latest runs."""
    app = client(ctx)
    task = app.get(task_id)
    console = common.console
    table = Table(show_header=False)
    for field, value in task.to_dict().items():
        if (shown := _field(task, field, value)) is not None:
            table.add_row(field, shown)
    console.print(table)
    if not task.status.is_terminal and (upcoming := task.next_fire_times(5)):
        zone = task.timezone if task.cron else "UTC"
        console.print(f"next fire times ({zone}):", markup=False)
        for when in upcoming:
            console.print("  " + both_zones(when, zone), markup=False)
    if task.last_decision:
        console.print(f"last decision: {task.last_decision}")
    print_executions(app.executions(task_id, limit=10))


def _field(task: Task, field: str, value: Any) -> str | None:
    """A row of ``tasks show``: the schedule's ends with the runs so far, where the task
    came from, a pending replan only when there is one (None: no row)."""
    if field == "origin":
        return "code (@app.periodic)" if value == "code" else "runtime"
    if field == "max_runs" and value is not None:
        return f"{value} ({task.run_count} run so far)"
    if field == "replan_at":
        return None if value is None else f"{value} (the edited schedule's slot, once the current run ends)"
    if field in ("replan_run_at", "declared_at") and value is None:
        return None
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


@tasks.command("cancel")
@click.argument("task_id", type=int)
@click.option("--run-only", is_flag=True, help="Stop only the current run of a recurring task.")
@click.pass_context
@errors_as_messages
def tasks_cancel(ctx: click.Context, task_id: int, run_only: bool) -> None:
    """Cancel a task (a running one is asked to stop)."""
    task = client(ctx).cancel(task_id, run_only=run_only)
    running = task.status is Status.RUNNING
    common.console.print(f"task {task.id}: {'cancel requested (running)' if running else task.status.value}")


@tasks.command("pause")
@click.argument("task_id", type=int)
@click.pass_context
@errors_as_messages
def tasks_pause(ctx: click.Context, task_id: int) -> None:
    """Pause a pending task."""
    common.console.print(f"task {client(ctx).pause(task_id).id}: PAUSED")


@tasks.command("resume")
@click.argument("task_id", type=int)
@click.option("--no-catch-up", is_flag=True, help="Skip (and record) the slots missed while paused.")
@click.pass_context
@errors_as_messages
def tasks_resume(ctx: click.Context, task_id: int, no_catch_up: bool) -> None:
    """Resume a paused task; its misfire policy decides about slots missed meanwhile."""
    common.console.print(f"task {client(ctx).resume(task_id, catch_up=not no_catch_up).id}: PENDING")


@tasks.command("backfill")
@click.argument("task_id", type=int)
@click.option("--start", "start_text", required=True, help="ISO 8601 time with offset; the range includes it.")
@click.option("--end", "end_text", required=True, help="ISO 8601 time with offset; the range includes it.")
@click.pass_context
@errors_as_messages
def tasks_backfill(ctx: click.Context, task_id: int, start_text: str, end_text: str) -> None:
    """Run every slot of a recurring task in [--start, --end] once, oldest first."""
    start, end = parse_datetime("start", start_text), parse_datetime("end", end_text)
    assert start is not None and end is not None
    runs = client(ctx).backfill(task_id, start, end)
    common.console.print(f"task {task_id}: {len(runs)} slots scheduled for backfill")
    for run in runs:
        common.console.print(f"  run {run.id} for {run.scheduled_at.isoformat()}")


@tasks.command("trigger")
@click.argument("task_id", type=int)
@click.pass_context
@errors_as_messages
def tasks_trigger(ctx: click.Context, task_id: int) -> None:
    """Run a pending task now (a recurring one keeps its schedule)."""
    common.console.print(f"task {client(ctx).trigger(task_id).id}: due now")


@click.command()
@click.argument("task_id", type=int)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.pass_context
@errors_as_messages
def executions(ctx: click.Context, task_id: int, limit: int) -> None:
    """Show the execution log of a task, newest first."""
    print_executions(client(ctx).executions(task_id, limit=limit))
