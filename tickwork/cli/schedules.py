"""``tickwork schedules sync APP`` and ``tickwork schedules list APP``: the schedules APP
declares with ``@app.periodic``, brought in line with the store, or compared with it.

Both print one line per schedule, within 80 columns (narrower on a narrower terminal):
long cells end in an ellipsis, notes wrap onto indented lines."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from collections.abc import Sequence
from typing import Any

import click

from tickwork import declarations
from tickwork.app import App
from tickwork.cli import common
from tickwork.cli.common import errors_as_messages, load_app
from tickwork.cli.shown import fit_columns, schedule_text, shown_value, truncated
from tickwork.declarations import ScheduleChange
from tickwork.model import NewTask, Task

MAX_WIDTH = 80
MARKS = {"create": "+", "update": "~", "remove": "-", "unchanged": "=", "kept": "!", "conflict": "!"}
ORDER = ("create", "update", "remove", "unchanged", "kept", "conflict")
DONE = {"create": "created", "update": "updated", "remove": "removed", "unchanged": "unchanged",
        "kept": "kept", "conflict": "conflict"}  # fmt: skip
PLANNED = {"create": "to create", "update": "to update", "remove": "to remove", "unchanged": "unchanged",
           "kept": "kept", "conflict": "conflict"}  # fmt: skip
FIELD_NAMES = {"interval": "every"}
"""A definition field shown by the name ``schedule()`` and the options give it."""


@click.group()
def schedules() -> None:
    """Schedules declared in code (@app.periodic): sync them to the store, or compare."""


@schedules.command("sync")
@click.argument("app_spec", metavar="APP")
@click.option("--dry-run", is_flag=True, help="Show what a sync would do; change nothing.")
@click.option("--force", is_flag=True, help="This code's declarations win even over a newer release's (a rollback).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object.")
@errors_as_messages
def sync(app_spec: str, dry_run: bool, force: bool, as_json: bool) -> None:
    """Create, update and remove APP's code schedules to match its @app.periodic
    declarations (as every worker does at start-up), and print what changed."""
    app = load_app(app_spec)
    changes = app.sync_schedules(dry_run=dry_run, force=force)
    if as_json:
        counts = Counter(c.action for c in changes)
        body = {"dry_run": dry_run, "changes": [c.to_dict() for c in changes], "counts": dict(counts)}
        click.echo(json.dumps(body, sort_keys=True))
        return
    declared = dict(_declared(app))
    width = _width()
    key_width = min(max((len(c.key) for c in changes), default=0), 24)
    for change in changes:
        for line in _plan_lines(change, declared.get(change.key), key_width, width):
            _print(line)
    for line in summary(changes, dry_run):
        _print(line)


def _plan_lines(change: ScheduleChange, new: NewTask | None, key_width: int, width: int) -> list[str]:
    """``+ create  KEY  (name, schedule)``, ``~ update  KEY  task N`` and its fields, …"""
    action = change.action
    head = f"{MARKS[action]} {action:<9}  {truncated(change.key, key_width):<{key_width}}  "
    if action == "create":
        what = f"({change.name}, {schedule_text(new.cron, new.timezone, new.interval)})" if new else f"({change.name})"
    else:
        what = f"task {change.task_id}"
    lines = [truncated(head + what, width)]
    for field, (old, new_value) in change.fields.items():
        name = FIELD_NAMES.get(field, field)
        lines.append(truncated(f"    {name}: {shown_value(old)} → {shown_value(new_value)}", width))
    if change.note:
        lines += textwrap.wrap(change.note, width, initial_indent="    ", subsequent_indent="    ")
    return lines


def summary(changes: Sequence[ScheduleChange], dry_run: bool) -> list[str]:
    """``4 schedules: 1 created, 1 updated, 1 removed, 1 unchanged`` (for a dry run,
    ``1 to create, …`` and a line saying that nothing was changed)."""
    counts = Counter(c.action for c in changes)
    words = PLANNED if dry_run else DONE
    parts = ", ".join(f"{counts[action]} {words[action]}" for action in ORDER if counts[action])
    if changes:
        lines = [f"{len(changes)} schedule{'s' if len(changes) != 1 else ''}: {parts}"]
    else:
        lines = ["no schedules declared with @app.periodic, and none stored from code"]
    return lines + (["dry run: nothing was changed"] if dry_run else [])


@schedules.command("list")
@click.argument("app_spec", metavar="APP")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as one JSON list.")
@errors_as_messages
def schedules_list(app_spec: str, as_json: bool) -> None:
    """APP's declared schedules beside the stored ones: the stored task and its status
    (or "not stored"), and whether it differs from the declaration; code schedules that
    APP no longer declares show as "stored only". Changes nothing."""
    app = load_app(app_spec)
    declared = dict(_declared(app))
    plan = app.sync_schedules(dry_run=True)  # what a sync would do tells what differs
    stored = {c.task_id: app.get(c.task_id) for c in plan if c.task_id is not None}
    rows = [_row(c, declared.get(c.key), stored.get(c.task_id) if c.task_id is not None else None) for c in plan]
    if as_json:
        click.echo(json.dumps(rows, sort_keys=True))
        return
    header = ["key", "task", "schedule", "stored", "differs"]
    table = [header, *([r["key"], r["name"], r["schedule"], _stored_cell(r), _differs_cell(r)] for r in rows)]
    for line in fit_columns(table, _width(), shrink=(0, 1, 2, 4)):
        _print(line)
    if not rows:
        _print("no schedules declared with @app.periodic, and none stored from code")


def _row(change: ScheduleChange, new: NewTask | None, task: Task | None) -> dict[str, Any]:
    """One schedule, declared or stored: what ``list`` shows (and ``--json`` prints)."""
    if new is not None:
        schedule = schedule_text(new.cron, new.timezone, new.interval)
    else:
        schedule = task.schedule_text() if task is not None else ""
    live = change.action != "create"  # a create: no live code schedule holds the key
    return {
        "key": change.key,
        "name": change.name,
        "schedule": schedule,
        "declared": new is not None,
        "task_id": change.task_id if live else None,
        "status": task.status.value if live and task is not None else None,
        "state": change.action,
        "fields": [FIELD_NAMES.get(f, f) for f in change.fields],
        "note": change.note,
    }


def _stored_cell(row: dict[str, Any]) -> str:
    return "not stored" if row["task_id"] is None else f"{row['task_id']} {row['status']}"


def _differs_cell(row: dict[str, Any]) -> str:
    state = str(row["state"])
    if state == "update":
        return "yes: " + ", ".join(row["fields"])
    return {
        "create": "-",
        "unchanged": "no",
        "remove": "stored only",
        "kept": "kept (newer)",
        "conflict": "key held (runtime)",
    }.get(state, state)


def _declared(app: App) -> list[tuple[str, NewTask]]:
    """Each declaration as the task it declares (for the schedule it shows)."""
    now = app.store.approximate_now()
    limits = {"max_payload": app.max_payload, "misfire_grace": app.misfire_grace}
    return declarations.resolved(app.declarations, app.registry, now, **limits)


def _width() -> int:
    return max(40, min(common.console.width, MAX_WIDTH))


def _print(line: str) -> None:
    common.console.print(line, markup=False, highlight=False)
