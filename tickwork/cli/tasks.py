"""The commands that write and manage tasks: ``schedule`` and ``tasks ...`` (the reads,
``tasks list``, ``tasks show`` and ``executions``, live in ``tickwork.cli.reads``)."""

from __future__ import annotations

from datetime import datetime

import click

from tickwork.cli import common, reads
from tickwork.cli.common import (
    SECONDS,
    SECONDS_OR_ZERO,
    Count,
    Moment,
    client,
    errors_as_messages,
    load_app,
    parse_datetime,
    parse_json,
)
from tickwork.model import Status


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
@click.option("--queue", help="The queue it goes to (default: the task's, else 'default').")
@click.option("--lock", help="At most one task holding this lock runs at a time, across every node.")
@errors_as_messages
def schedule(
    app_spec: str, name: str, cron: str | None, timezone: str, every: float | None, delay: float | None,
    at_text: str | None, args_json: str, kwargs_json: str, key: str | None, replace: bool, max_retries: int | None,
    retry_backoff: float | None, timeout: float | None, jitter: float | None, priority: int | None,
    misfire: str | None, until: datetime | None, max_runs: int | None, queue: str | None, lock: str | None,
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
        priority=priority, misfire=misfire, until=until, max_runs=max_runs, queue=queue, lock=lock,
        replace=replace,
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


for _command in (reads.tasks_list, reads.tasks_show):
    tasks.add_command(_command)
executions = reads.executions
