"""Schedules declared in code (``@app.periodic``) and the plan that brings the store in
line with them (``app.sync_schedules``).

A sync owns only code schedules (``origin = "code"``): it creates those declared and
missing, edits in place those whose definition changed, and cancels those of the task
names its App registers that code no longer declares. Tasks scheduled at runtime are
never touched, even when one holds a declared key (the plan reports a conflict).

Rolling deploys: each declaration set (the App's declarations and registered names) has
a digest, and the store remembers when each digest was first seen. A schedule records
the first-seen time of the set that last wrote it (``declared_at``); a set first seen
earlier than that may not change it. So once a new release has synced, a node of the
previous release that starts later changes nothing the new one wrote, and schedules do
not flip back and forth. A deliberate rollback syncs with ``force=True``: the old set
then counts as seen now, the newest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from tickwork import planning, validate
from tickwork.changes import Removal, SyncView, SyncWrites
from tickwork.editing import DEFINITION, ENDED, RESCHEDULING, edit_to
from tickwork.errors import InvalidInput
from tickwork.model import NewTask, Task
from tickwork.registry import Registry

ORIGIN = "code"
REMOVED = "removed: code no longer declares this schedule"
PERIODIC_OPTIONS = (*planning.OVERRIDABLE, "until", "max_runs")
"""What ``@app.periodic`` takes beside the schedule and arguments: ``schedule()``'s options."""


@dataclasses.dataclass(frozen=True)
class Declaration:
    key: str
    func: Callable[..., Any]
    given: planning.ScheduleArgs


@dataclasses.dataclass(frozen=True)
class ScheduleChange:
    """One line of a sync's plan."""

    action: str
    """create | update | remove | unchanged | kept (a newer declaration wrote it) |
    conflict (a task scheduled at runtime holds the key)."""
    key: str
    name: str
    task_id: int | None = None
    fields: dict[str, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    """For an update: each changed field, old → new."""
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        fields = {f: {"old": _shown(old), "new": _shown(new)} for f, (old, new) in self.fields.items()}
        return {"action": self.action, "key": self.key, "name": self.name, "task_id": self.task_id,
                "fields": fields, "note": self.note}  # fmt: skip


def _shown(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return getattr(value, "value", value)


class Declarations:
    """The schedules an App's code declares, by key."""

    def __init__(self) -> None:
        self._by_key: dict[str, Declaration] = {}

    def add(
        self, registry: Registry, func: Callable[..., Any], key: str | None, given: planning.ScheduleArgs
    ) -> Declaration:
        try:
            definition = registry.resolve(func)
        except InvalidInput:
            raise InvalidInput(
                "periodic", getattr(func, "__qualname__", repr(func)),
                "put @app.periodic above @app.task: the function must be registered first",
            ) from None  # fmt: skip
        if given.cron is None and given.every is None:
            raise InvalidInput("cron", None, "a periodic schedule needs cron or every")
        key = definition.name if key is None else key
        validate.text("key", key)
        held = self._by_key.get(key)
        if held is not None:
            other = registry.resolve(held.func).name
            raise InvalidInput("key", key, f"already declared by @app.periodic on {other}: give each a distinct key")
        declaration = self._by_key[key] = Declaration(key, func, given)
        return declaration

    def __iter__(self) -> Iterator[Declaration]:
        return iter(self._by_key.values())


def periodic_args(
    cron: str | None, every: Any, timezone: str, args: Sequence[Any], kwargs: Mapping[str, Any] | None,
    options: Mapping[str, Any],
) -> planning.ScheduleArgs:  # fmt: skip
    for option in options:
        if option not in PERIODIC_OPTIONS:
            raise InvalidInput(
                option, options[option], f"not an option of @app.periodic ({', '.join(PERIODIC_OPTIONS)})"
            )
    return planning.ScheduleArgs(args=args, kwargs=kwargs, cron=cron, every=every, timezone=timezone, **options)


def resolved(
    declarations: Iterable[Declaration], registry: Registry, now: datetime, **limits: Any
) -> list[tuple[str, NewTask]]:
    """Each declaration as the task it declares (checked as ``schedule()`` checks),
    sorted by key."""
    out = []
    for declaration in sorted(declarations, key=lambda d: d.key):
        definition = registry.resolve(declaration.func)
        given = dataclasses.replace(declaration.given, key=declaration.key)
        try:
            request = planning.check(definition, given, **limits)
            new = planning.new_task(dataclasses.replace(request, until=None), now)
        except InvalidInput as exc:
            raise type(exc)(f"periodic[{declaration.key}].{exc.field}", exc.value, exc.reason) from exc
        # As the store will give them back (tuples as lists), so that an unchanged
        # declaration compares equal to what it stored.
        args, kwargs = json.loads(json.dumps(new.args)), json.loads(json.dumps(new.kwargs))
        new = dataclasses.replace(new, args=args, kwargs=kwargs, until=request.until, origin=ORIGIN)
        out.append((declaration.key, new))
    return out


def digest(declared: Sequence[tuple[str, NewTask]], names: Sequence[str]) -> str:
    """The identity of a declaration set: its definitions and the names it registers."""
    body = [{"key": key, **{f: _shown(getattr(new, f)) for f in DEFINITION}} for key, new in declared]
    text = json.dumps({"declared": body, "names": sorted(names)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def plan(
    declared: Sequence[tuple[str, NewTask]], names: Sequence[str], view: SyncView
) -> tuple[list[ScheduleChange], SyncWrites]:
    """What a sync of ``declared`` does, given what the store holds (``view``)."""
    changes: list[ScheduleChange] = []
    writes = SyncWrites()
    keys = {key for key, _ in declared}
    for key, new in declared:
        change = _plan_one(key, new, view, writes)
        changes.append(change)
    registered = set(names)
    for key, task in sorted(view.code.items()):
        if key in keys or task.status in ENDED or task.name not in registered:
            continue
        if task.declared_at is not None and task.declared_at > view.seen:
            changes.append(ScheduleChange("kept", key, task.name, task.id, note=_newer(task)))
            continue
        writes.remove.append(Removal(task, REMOVED, view.seen))
        changes.append(ScheduleChange("remove", key, task.name, task.id, note=REMOVED))
    return changes, writes


def _plan_one(key: str, new: NewTask, view: SyncView, writes: SyncWrites) -> ScheduleChange:
    holder = view.holders.get(key)
    if holder is not None:
        note = f"key is held by task {holder.id}, scheduled at runtime: left alone"
        return ScheduleChange("conflict", key, new.name, holder.id, note=note)
    stored = view.code.get(key)
    declared = dataclasses.replace(new, declared_at=view.seen)
    over = new.until is not None and new.scheduled_at > new.until
    if stored is None and over:
        return ScheduleChange("unchanged", key, new.name, note="its until has passed: nothing to create")
    if stored is None:
        writes.create.append(declared)
        return ScheduleChange("create", key, new.name)
    if stored.declared_at is not None and stored.declared_at > view.seen:
        return ScheduleChange("kept", key, stored.name, stored.id, note=_newer(stored))
    fields = differences(stored, new)
    if stored.status in ENDED:
        removed = stored.removed_at is not None
        if (removed or fields) and not over:  # declared again, or declared anew: a fresh schedule
            writes.create.append(declared)
            return ScheduleChange("create", key, new.name, note=f"task {stored.id} ended {stored.status.value}")
        return ScheduleChange("unchanged", key, stored.name, stored.id, note=f"ended {stored.status.value}")
    if not fields:
        return ScheduleChange("unchanged", key, stored.name, stored.id)
    reschedule = any(f in fields for f in RESCHEDULING)
    writes.edit.append(edit_to(stored, new, reschedule=reschedule, declared_at=view.seen))
    return ScheduleChange("update", key, stored.name, stored.id, fields)


def differences(stored: Task, new: NewTask) -> dict[str, tuple[Any, Any]]:
    return {f: (getattr(stored, f), getattr(new, f)) for f in DEFINITION if getattr(stored, f) != getattr(new, f)}


def _newer(task: Task) -> str:
    seen = task.declared_at.isoformat() if task.declared_at else "?"
    return f"written by a newer declaration (first seen {seen}): this code is older, so it is left as it is"
