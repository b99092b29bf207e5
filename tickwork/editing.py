"""From ``update()``, ``retry()`` and ``schedule(replace=True)`` to the ``Edit`` the
store writes, without a store.

Every edit is checked as ``schedule()`` checks a new task (the same ``planning.check``),
so an edit can store nothing that ``schedule()`` would refuse. What it may change:
the schedule (``cron``, ``every``, ``timezone``), the arguments, the policies and the
schedule's ends. A changed schedule places the next slot from now; a running task
keeps its run as it was claimed and takes the new slot when that run ends
(``replan_at``, applied by the store when the run's outcome is written).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tickwork import binding, planning, validate
from tickwork.changes import Edit
from tickwork.errors import InvalidInput, InvalidState
from tickwork.model import Kind, NewTask, Status, Task
from tickwork.registry import TaskDef, TaskOptions
from tickwork.schedules import jitter_offset, next_slot, schedule_of

SCHEDULE = ("cron", "every", "timezone")
POLICIES = (
    "misfire",
    "misfire_grace",
    "jitter",
    "priority",
    "timeout",
    "max_retries",
    "retry_backoff",
    "overlap",
    "max_runtime",
    "max_catchup",
    "max_lost",
    "queue",
)
NODE_RULES = ("max_runtime", "max_lost")
"""Editable options that ``schedule()`` does not take (they come from ``@app.task``)."""
ENDS = ("until", "max_runs")
EDITABLE = ("args", "kwargs", *SCHEDULE, *POLICIES, *ENDS)
"""What ``update()`` may change, by ``schedule()``'s parameter names."""
CLEARABLE = ("timeout", "max_runtime", "until", "max_runs")
"""Options that None turns off (for the others None means "keep")."""
ENDED = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

DEFINITION = (
    "name", "args", "kwargs", "cron", "timezone", "interval", "misfire", "misfire_grace", "jitter", "timeout",
    "max_retries", "retry_backoff", "priority", "max_catchup", "overlap", "on_lost", "max_runtime", "until",
    "max_runs", "max_lost", "queue", "max_running", "rate_limit",
)  # fmt: skip
"""The fields a task's definition is made of: what an edit writes and a sync compares."""
RESCHEDULING = ("cron", "timezone", "interval")


def changes_of(changes: Mapping[str, Any]) -> dict[str, Any]:
    """``changes`` refused by name when one is not editable."""
    for field in changes:
        if field not in EDITABLE:
            known = ", ".join(EDITABLE)
            raise InvalidInput(str(field), changes[field], f"cannot be changed by update (can: {known})")
    if not changes:
        raise InvalidInput("changes", {}, f"nothing to change (give one of: {', '.join(EDITABLE)})")
    return dict(changes)


def updated(task: Task, changes: Mapping[str, Any], definition: TaskDef | None, now: datetime, **limits: Any) -> Edit:
    """The edit ``update(task.id, **changes)`` makes of ``task``, as read at ``now``.

    ``definition``: the registered function, if this process registers it (its
    signature then checks the arguments); ``limits``: ``max_payload`` and the App's
    ``misfire_grace``, as ``planning.check`` takes them."""
    changes = changes_of(changes)
    if task.status in ENDED:
        raise InvalidState(task.id, task.status.value, "update")
    if task.kind is Kind.ONE_TIME:
        for field in (*SCHEDULE, *ENDS):
            if field in changes:
                raise InvalidInput(
                    field, changes[field], "a one-time task has no schedule: cancel it and schedule a new task"
                )
    _refuse_ending_now(task, changes, now)
    given = _merged(task, changes)
    if definition is not None:
        binding.check_call(definition, list(given.args or []), dict(given.kwargs or {}))
    # Options not changed keep the task's stored values, not the registration's.
    request = planning.check(_stored_definition(task), given, bind=False, **limits)
    new = planning.new_task(dataclasses.replace(request, until=None), now)
    new = dataclasses.replace(
        new, until=request.until, max_runtime=_max_runtime(task, changes), max_lost=_max_lost(task, changes)
    )
    cleared: dict[str, Any] = {field: None for field in CLEARABLE if field in changes and changes[field] is None}
    new = dataclasses.replace(new, **cleared)
    reschedule = any(getattr(new, f) != getattr(task, f) for f in RESCHEDULING)
    return edit_to(task, new, reschedule=reschedule)


def _refuse_ending_now(task: Task, changes: Mapping[str, Any], now: datetime) -> None:
    """An edit of the ends that would end the schedule at once is refused: a typo must not
    end a schedule for good (an ended task cannot be edited back). Cancel it instead."""
    until, max_runs = changes.get("until"), changes.get("max_runs")
    if isinstance(until, datetime) and until.tzinfo is not None and until < now:
        raise InvalidInput("until", until, "is in the past: it would end the schedule now (cancel the task instead)")
    if isinstance(max_runs, int) and not isinstance(max_runs, bool) and 1 <= max_runs <= task.run_count:
        raise InvalidInput(
            "max_runs", max_runs, f"the task has run {task.run_count} times already: it would end the schedule now"
        )


def _max_runtime(task: Task, changes: Mapping[str, Any]) -> float | None:
    if "max_runtime" not in changes:
        return task.max_runtime
    return validate.optional_positive("max_runtime", changes["max_runtime"])


def _max_lost(task: Task, changes: Mapping[str, Any]) -> int:
    return validate.max_lost(changes["max_lost"]) if "max_lost" in changes else task.max_lost


def _merged(task: Task, changes: Mapping[str, Any]) -> planning.ScheduleArgs:
    """``schedule()``'s arguments that would make ``task`` as ``changes`` want it: what
    is not changed is the task's own (giving ``every`` replaces ``cron``, and back)."""
    cron, every = task.cron, task.interval
    if changes.get("cron") is not None and changes.get("every") is not None:
        raise InvalidInput("every", changes["every"], "give either cron or every, not both")
    if changes.get("cron") is not None:
        cron, every = changes["cron"], None
    if changes.get("every") is not None:
        cron, every = None, changes["every"]
    timezone = changes.get("timezone", task.timezone if cron is not None else "UTC")
    overrides = {f: changes.get(f, getattr(task, f)) for f in POLICIES if f not in NODE_RULES}
    return planning.ScheduleArgs(
        args=changes.get("args", task.args),
        kwargs=changes.get("kwargs", task.kwargs),
        cron=cron,
        every=every,
        timezone=timezone,
        until=changes.get("until", task.until),
        max_runs=changes.get("max_runs", task.max_runs),
        **overrides,
    )


def _stored_definition(task: Task) -> TaskDef:
    """A definition made of the task's stored options, for a process that does not
    register its function: the edit is checked as schedule() would, but for the
    arguments against a signature it cannot see."""
    options = TaskOptions(
        timeout=task.timeout, max_retries=task.max_retries, retry_backoff=task.retry_backoff, misfire=task.misfire,
        misfire_grace=task.misfire_grace, jitter=task.jitter, priority=task.priority, max_catchup=task.max_catchup,
        overlap=task.overlap, on_lost=task.on_lost, max_runtime=task.max_runtime, max_lost=task.max_lost,
        queue=task.queue, max_running=task.max_running, rate_limit=task.rate_limit,
    )  # fmt: skip
    return TaskDef(task.name, _unregistered, options)


def _unregistered(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("an edit never calls the task")


def edit_to(task: Task, new: NewTask, *, reschedule: bool, declared_at: datetime | None = None) -> Edit:
    """The edit that gives ``task`` ``new``'s definition in place (same id, history
    kept). ``reschedule``: the schedule changed, so the next slot is ``new``'s first
    (placed from now); a running task takes it when its run ends."""
    after = dataclasses.replace(task, **{f: getattr(new, f) for f in DEFINITION})
    if declared_at is not None:
        after = dataclasses.replace(after, declared_at=declared_at)
    slot = new.scheduled_at
    run_at = slot + jitter_offset(task.id, slot, new.jitter)
    ends_changed = (new.until, new.max_runs) != (task.until, task.max_runs)
    if reschedule and task.status is Status.RUNNING:
        after = dataclasses.replace(after, replan_at=slot, replan_run_at=run_at)
    elif ends_changed and task.status is Status.RUNNING and task.kind is Kind.RECURRING and task.replan_at is None:
        # The run was claimed with the old ends, which may complete the task when it
        # ends: a pending replan to the slot it goes on to makes the store judge the new
        # ends at the next claim instead (schedules.edited_decision).
        going_on = task.scheduled_at if task.triggered else next_slot(task, task.scheduled_at)
        after = dataclasses.replace(
            after, replan_at=going_on, replan_run_at=going_on + jitter_offset(task.id, going_on, task.jitter)
        )
    elif reschedule and task.triggered:  # a manual run is waiting: it stays, ahead of the new slot
        after = dataclasses.replace(after, scheduled_at=slot, replan_at=None, replan_run_at=None)
    elif reschedule:
        after = dataclasses.replace(
            after, scheduled_at=slot, next_run_at=run_at, attempt=0, triggered=False, replan_at=None,
            replan_run_at=None,
        )  # fmt: skip
    elif new.jitter != task.jitter and task.status is not Status.RUNNING and not task.triggered and task.attempt == 0:
        jittered = task.scheduled_at + jitter_offset(task.id, task.scheduled_at, new.jitter)
        after = dataclasses.replace(after, next_run_at=jittered)
    if task.status is not Status.RUNNING and task.kind is Kind.RECURRING and _over(after):
        after = dataclasses.replace(after, status=Status.COMPLETED, last_decision="the schedule's end was edited")
    return Edit(task, after)


def _over(task: Task) -> bool:
    """The edited ends leave the task no slot: it completes now."""
    if task.until is not None and task.scheduled_at > task.until:
        return True
    return task.max_runs is not None and task.run_count >= task.max_runs


def retried(task: Task, now: datetime) -> Edit:
    """The edit ``retry()`` makes: a FAILED or CANCELLED task PENDING again, due now,
    with a fresh attempt count and its history kept. A recurring task's run now is an
    extra one (``triggered``): its schedule then goes on from the next slot after now."""
    if task.status not in (Status.FAILED, Status.CANCELLED):
        raise InvalidState(task.id, task.status.value, "retry")
    after = dataclasses.replace(
        task, status=Status.PENDING, next_run_at=now, attempt=0, replan_at=None, replan_run_at=None,
        last_decision=f"retried at {now.isoformat()}",
    )  # fmt: skip
    if task.kind is Kind.ONE_TIME:
        after = dataclasses.replace(after, scheduled_at=now, triggered=False)
    else:
        after = dataclasses.replace(after, scheduled_at=_next_slot_from(task, now), triggered=True)
    return Edit(task, after, reset_cancel=True)


def _next_slot_from(task: Task, now: datetime) -> datetime:
    schedule = schedule_of(task)
    assert schedule is not None
    return schedule.next_after(now)
