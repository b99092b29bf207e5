"""The commands that read tasks and runs: ``tasks list``, ``tasks show ID`` and
``executions ID``, in text within 80 columns (narrower on a narrower terminal) or, with
``--json``, as JSON (times ISO 8601 in UTC).

List rows never wrap: a long cell ends in an ellipsis. A run's error, result and
traceback are shown in full, folded onto indented lines."""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Any

import click

from tickwork.cli import common
from tickwork.cli.common import BadInput, both_zones, client, errors_as_messages, json_option, print_json
from tickwork.cli.shown import fit_columns, seconds_text, wrapped
from tickwork.model import Execution, Kind, Status, Task

MAX_WIDTH = 80


class Named(click.ParamType[Any, Any]):
    """One of an enum's values, in any case; anything else is a one-line usage error
    (exit 2) naming the option and the value."""

    name = "choice"

    def __init__(self, kind: type[enum.Enum]) -> None:
        self.kind = kind

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "|".join(str(m.value) for m in self.kind)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.kind):
            return value
        for member in self.kind:
            if str(member.value).upper() == str(value).strip().upper():
                return member
        choices = ", ".join(str(m.value) for m in self.kind)
        raise BadInput(f"{_option(param)}={value!r}: expected one of {choices}")


class Whole(click.ParamType[Any, Any]):
    """A whole number from ``low`` to ``high``; else a one-line usage error (exit 2)."""

    name = "integer"

    def __init__(self, low: int, high: int | None = None) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            number = int(str(value).strip())
        except ValueError:
            number = None
        if number is None or number < self.low or (self.high is not None and number > self.high):
            span = f"from {self.low} to {self.high}" if self.high is not None else f"{self.low} or more"
            raise BadInput(f"{_option(param)}={value!r}: expected a whole number, {span}")
        return number


def _option(param: click.Parameter | None) -> str:
    return param.opts[0] if param is not None and param.opts else "value"


def _width() -> int:
    return max(40, min(common.console.width, MAX_WIDTH))


def _print(line: str) -> None:
    common.console.print(line, markup=False, highlight=False, crop=False, soft_wrap=True)


# -- tasks list ---------------------------------------------------------------------------


@click.command("list")
@click.option("--status", type=Named(Status), help="Only tasks in this status.")
@click.option("--kind", type=Named(Kind), help="Only one-time or only recurring tasks.")
@click.option("--name", help="Only tasks of this task name.")
@click.option("--queue", help="Only tasks of this queue.")
@click.option("--limit", default=50, show_default=True, type=Whole(1, 10_000), help="At most this many tasks.")
@click.option("--offset", default=0, show_default=True, type=Whole(0), help="Skip this many (newest first).")
@json_option("Print the tasks as one JSON list (Task fields).")
@click.pass_context
@errors_as_messages
def tasks_list(
    ctx: click.Context, status: Status | None, kind: Kind | None, name: str | None, queue: str | None, limit: int,
    offset: int, as_json: bool,
) -> None:  # fmt: skip
    """List tasks, newest first, one line each (the schedule tells the kind: "once" for
    a one-time task)."""
    rows = client(ctx).tasks(
        status=status, kind=kind, name=name, queue=queue, limit=limit, offset=offset, newest_first=True
    )
    if as_json:
        print_json([t.to_dict() for t in rows])
        return
    header = ["id", "name", "schedule", "status", "next run (UTC)", "runs", "last"]
    table = [header, *(_list_row(t) for t in rows)]
    for line in fit_columns(table, _width(), shrink=(1, 2, 6)):
        _print(line)
    if not rows:
        _print("no tasks" + (" on this page" if offset else ""))


def _list_row(t: Task) -> list[str]:
    upcoming = "" if t.status.is_terminal else f"{t.next_run_at:%Y-%m-%d %H:%M:%S}"
    last = t.last_status.value if t.last_status else ""
    return [str(t.id), t.name, t.schedule_text(), t.status.value, upcoming, str(t.run_count), last]


# -- tasks show ---------------------------------------------------------------------------


@click.command("show")
@click.argument("task_id", type=int)
@click.option("--traceback", "tracebacks", is_flag=True, help="Print each failed run's stored traceback.")
@click.option("--runs", default=10, show_default=True, type=Whole(1, 10_000), help="How many latest runs to show.")
@json_option("Print the task, its next fire times and latest runs as one JSON object.")
@click.pass_context
@errors_as_messages
def tasks_show(ctx: click.Context, task_id: int, tracebacks: bool, runs: int, as_json: bool) -> None:
    """Show one task, its next fire times and its latest runs."""
    app = client(ctx)
    task = app.get(task_id)
    upcoming = [] if task.status.is_terminal else task.next_fire_times(5)
    latest = app.executions(task_id, limit=runs)
    if as_json:
        body: dict[str, object] = {"task": task.to_dict(), "next_fire_times": [w.isoformat() for w in upcoming]}
        body["waiting"] = app.why_waiting(task)
        print_json({**body, "executions": [execution_dict(e) for e in latest]})
        return
    from rich.table import Table  # only where a table is shown: tickwork.cli.common

    table = Table(show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for field, value in task.to_dict().items():
        if (shown := _field(task, field, value)) is not None:
            table.add_row(field, shown)
    common.console.print(table, width=_width(), markup=False, highlight=False)
    if upcoming:
        zone = task.timezone if task.cron else "UTC"
        _print(f"next fire times ({zone}):")
        for when in upcoming:
            _print("  " + both_zones(when, zone))
    if task.last_decision:
        for line in wrapped(f"last decision: {task.last_decision}", _width()):
            _print(line)
    if (why := app.why_waiting(task)) is not None:
        _print(f"waiting: {why}")
    if latest:
        _print("latest runs:")
        print_runs(latest, tracebacks)
    else:
        _print("no runs yet")


def _field(task: Task, field: str, value: Any) -> str | None:
    """A row of ``tasks show``: the schedule's ends with the runs so far, where the task
    came from, a pending replan only when there is one (None: no row)."""
    if field == "origin":
        return "code (@app.periodic)" if value == "code" else "runtime"
    if field == "max_runs" and value is not None:
        return f"{value} ({task.run_count} run so far)"
    if field == "lost_runs" and value:
        return f"{value} (lost with their node and run again, of at most {task.max_lost} in a row)"
    if field == "replan_at":
        return None if value is None else f"{value} (the edited schedule's slot, once the current run ends)"
    if field in ("replan_run_at", "declared_at", "lock", "max_running", "rate_limit") and value is None:
        return None
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


# -- executions ---------------------------------------------------------------------------


@click.command()
@click.argument("task_id", type=int)
@click.option("--limit", default=50, show_default=True, type=Whole(1, 10_000), help="At most this many runs.")
@click.option("--traceback", "tracebacks", is_flag=True, help="Print each failed run's stored traceback.")
@json_option("Print the runs as one JSON list (Execution fields, duration and lateness in seconds).")
@click.pass_context
@errors_as_messages
def executions(ctx: click.Context, task_id: int, limit: int, tracebacks: bool, as_json: bool) -> None:
    """Show the execution log of a task, newest first: each run's timing (how long it
    took, how late it started after its slot), then its full error, result or note."""
    rows = client(ctx).executions(task_id, limit=limit)
    if as_json:
        print_json([execution_dict(e) for e in rows])
        return
    print_runs(rows, tracebacks)
    if not rows:
        _print(f"task {task_id}: no runs yet")


def duration(e: Execution) -> float | None:
    """Seconds from the run's start to its end (None while it runs, or if it never started)."""
    if e.started_at is None or e.finished_at is None:
        return None
    return (e.finished_at - e.started_at).total_seconds()


def lateness(e: Execution) -> float | None:
    """Seconds from the slot the run was for to its start (``started_at - scheduled_for``)."""
    return None if e.started_at is None else (e.started_at - e.scheduled_for).total_seconds()


def execution_dict(e: Execution) -> dict[str, Any]:
    """An execution's fields as JSON, with its ``duration`` and ``lateness`` in seconds."""
    return {**e.to_dict(), "duration": duration(e), "lateness": lateness(e)}


def print_runs(rows: Sequence[Execution], tracebacks: bool) -> None:
    """One line per run (fitted to the width), then each run's details in full."""
    width = _width()
    header = ["id", "try", "scheduled for (UTC)", "status", "took", "late", "node"]
    table = [header, *(_run_row(e) for e in rows)]
    for line in fit_columns(table, width, shrink=(6, 2)):
        _print(line)
    for e in rows:
        for line in _details(e, tracebacks, width):
            _print(line)


def _run_row(e: Execution) -> list[str]:
    when = f"{e.scheduled_for:%Y-%m-%d %H:%M:%S}"
    return [str(e.id), str(e.attempt), when, e.status.value, seconds_text(duration(e)), seconds_text(lateness(e)),
            e.node or ""]  # fmt: skip


def _details(e: Execution, tracebacks: bool, width: int) -> list[str]:
    """``run 7 error: ValueError: …`` in full, its traceback (if asked), result, note."""
    lines: list[str] = []
    if e.error is not None:
        lines += wrapped(f"run {e.id} error: {e.error.type}: {e.error.message}", width)
        if tracebacks:
            stored = e.error.traceback.rstrip("\n")
            lines += wrapped(f"run {e.id} traceback:", width)
            lines += wrapped(stored, width, "    ") if stored else ["    (none stored)"]
    if e.result is not None:
        lines += wrapped(f"run {e.id} result: {json.dumps(e.result, ensure_ascii=False, default=str)}", width)
    if e.note:
        lines += wrapped(f"run {e.id} note: {e.note}", width)
    if e.skipped and e.skipped_last is not None:
        lines += wrapped(f"run {e.id} skipped {e.skipped} slots, to {e.skipped_last.isoformat()}", width)
    return lines
