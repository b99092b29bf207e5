"""``tickwork tasks update ID`` and ``tickwork tasks retry ID``: a stored task changed in
place (same id, its history kept), through ``App.update`` and ``App.retry``.

They work with ``--db`` alone, like the other ``tasks`` commands: without APP's code
the edit is checked against the task's stored options (with ``--app``, its arguments
are checked against the function's signature too)."""

from __future__ import annotations

from typing import Any

import click

from tickwork.cli import common
from tickwork.cli.common import (
    CLEAR,
    SECONDS,
    SECONDS_OR_NONE,
    SECONDS_OR_ZERO,
    Count,
    Moment,
    client,
    errors_as_messages,
    parse_json,
)
from tickwork.cli.shown import ends_text
from tickwork.editing import ENDED
from tickwork.errors import InvalidState
from tickwork.model import Misfire, Overlap, Status, Task

MISFIRES = [m.value for m in Misfire]
OVERLAPS = [o.value for o in Overlap]


@click.command("update")
@click.argument("task_id", type=int)
@click.option("--cron", help="New cron expression (replaces --every).")
@click.option("--every", type=SECONDS, metavar="DURATION", help="New interval, e.g. 300 or 5m (replaces --cron).")
@click.option("--timezone", help="IANA zone the cron expression is read in.")
@click.option("--args", "args_json", metavar="JSON", help="Positional arguments as a JSON list.")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Keyword arguments as a JSON object.")
@click.option("--misfire", type=click.Choice(MISFIRES, case_sensitive=False), help="What missed slots do.")
@click.option("--misfire-grace", type=SECONDS_OR_ZERO, metavar="DURATION", help="Lateness that is not a misfire.")
@click.option("--jitter", type=SECONDS_OR_ZERO, metavar="DURATION", help="Spread each dispatch by up to this.")
@click.option("--priority", type=int, help="Higher first among tasks due together.")
@click.option("--timeout", type=SECONDS_OR_NONE, metavar="DURATION|none", help="A run's time limit.")
@click.option("--max-retries", type=click.IntRange(min=0), help="Retries after a failed run.")
@click.option("--retry-backoff", type=SECONDS, metavar="DURATION", help="First retry's delay (then doubled).")
@click.option("--overlap", type=click.Choice(OVERLAPS, case_sensitive=False), help="A slot due while a run goes on.")
@click.option("--max-runtime", type=SECONDS_OR_NONE, metavar="DURATION|none", help="Hard limit, even if heartbeating.")
@click.option("--max-catchup", type=click.IntRange(min=1), help="Missed slots CATCHUP runs at most.")
@click.option("--until", type=Moment(clearable=True), metavar="ISO8601|none", help="No slot after this time.")
@click.option("--max-runs", type=Count(clearable=True), metavar="N|none", help="At most N runs in all.")
@click.option("--max-lost", type=click.IntRange(0, 1000), help="Lost runs run again in a row (then a failure).")
@click.option("--queue", help="Move it to this queue.")
@click.pass_context
@errors_as_messages
def tasks_update(
    ctx: click.Context, task_id: int, args_json: str | None, kwargs_json: str | None, **given: Any
) -> None:
    """Change a task in place: its schedule, arguments, policies or ends (only the
    options given; "none" turns off --timeout, --max-runtime, --until, --max-runs).

    A changed schedule places the next slot from now; a running task finishes its run
    as it was claimed and the change applies from its next one. An ended task cannot be
    updated."""
    changes = {field: None if value is CLEAR else value for field, value in given.items() if value is not None}
    if args_json is not None:
        changes["args"] = parse_json("args", args_json)
    if kwargs_json is not None:
        changes["kwargs"] = parse_json("kwargs", kwargs_json)
    if not changes:
        raise click.UsageError("nothing to change: give at least one option (see tickwork tasks update --help)")
    try:
        task = client(ctx).update(task_id, **changes)
    except InvalidState as exc:
        raise _ended(exc) from exc
    fields = ", ".join(sorted(changes))
    _print(f"task {task.id} ({task.name}) updated: {fields}")
    for line in summary(task):
        _print("  " + line)


def _ended(exc: InvalidState) -> click.ClickException:
    if exc.status not in {s.value for s in ENDED}:
        return common.as_message(exc)
    hint = f"; run it again with `tickwork tasks retry {exc.task_id}`" if exc.status != Status.COMPLETED.value else ""
    return click.ClickException(
        f"task_id={exc.task_id}: the task has ended ({exc.status}) and cannot be updated: schedule a new one{hint}"
    )


def summary(task: Task) -> list[str]:
    """The task after a change, in a few lines: schedule, status and next run, ends."""
    lines = [f"schedule: {task.schedule_text()}"]
    if task.status.is_terminal:
        lines.append(f"status: {task.status.value}" + (f" ({task.last_decision})" if task.last_decision else ""))
    else:
        lines.append(f"status: {task.status.value}; next run at {task.next_run_at.isoformat()}")
    if task.replan_at is not None:
        lines.append(
            f"running: the edited schedule takes over when this run ends (next slot {task.replan_at.isoformat()})"
        )
    if ends := ends_text(task):
        lines.append(f"ends: {ends}")
    if task.origin == "code":
        lines.append("declared in code (@app.periodic): the next sync puts it back as declared")
    return lines


@click.command("retry")
@click.argument("task_id", type=int)
@click.pass_context
@errors_as_messages
def tasks_retry(ctx: click.Context, task_id: int) -> None:
    """Run a FAILED or CANCELLED task again: PENDING and due now, with a fresh attempt
    count and its history kept (a recurring task then goes on with its schedule)."""
    task = client(ctx).retry(task_id)
    _print(f"task {task.id} ({task.name}): {task.status.value}, due now")


def _print(line: str) -> None:
    common.console.print(line, markup=False, highlight=False)
