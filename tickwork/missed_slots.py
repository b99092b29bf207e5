"""Slots of a recurring task that are in the past: the runs ``backfill()`` schedules
for a range of them, and the skip ``resume(catch_up=False)`` records for those missed
while paused. Pure: a task and the store's "now" in, the store's write objects out."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from tickwork import validate
from tickwork.errors import InvalidInput
from tickwork.model import Kind, Misfire, NewTask, Skipping, Status, Task
from tickwork.schedules import decide, first_slot_from, jitter_offset, schedule_of

MAX_BACKFILL = 10_000
"""Most slots one backfill call schedules."""


@dataclasses.dataclass(frozen=True)
class Window:
    """A checked backfill range, in UTC (``end`` is kept as given, for messages)."""

    first: datetime
    last: datetime
    end: datetime


def window(start: datetime, end: datetime) -> Window:
    """The range [start, end], refused before the task is read when either is no moment."""
    return Window(validate.moment("start", start), validate.moment("end", end), end)


def backfill_runs(task: Task, span: Window, now: datetime) -> list[NewTask]:
    """One one-time run per slot of ``task`` in ``span``, oldest first.

    Each run keeps the task's function, arguments and options and has the slot as both
    its ``scheduled_at`` and its key (``backfill:<id>:<slot>``), so the store can refuse
    slots already done or waiting. Slots after ``now`` are the schedule's to run."""
    slots = backfill_slots(task, span, now)
    return [
        NewTask(
            name=task.name,
            args=task.args,
            kwargs=task.kwargs,
            kind=Kind.ONE_TIME,
            scheduled_at=s,
            next_run_at=s,
            key=f"backfill:{task.id}:{s.isoformat()}",
            misfire=Misfire.CATCHUP,
            misfire_grace=task.misfire_grace,
            timeout=task.timeout,
            max_retries=task.max_retries,
            retry_backoff=task.retry_backoff,
            priority=task.priority,
            parent_id=task.id,
            on_lost=task.on_lost,
            max_runtime=task.max_runtime,
            max_lost=task.max_lost,
            queue=task.queue,
            lock=task.lock,
            max_running=task.max_running,
            rate_limit=task.rate_limit,
        )
        for s in slots
    ]


def backfill_slots(task: Task, span: Window, now: datetime) -> list[datetime]:
    """The slots of ``task``'s schedule in ``span`` (at most ``MAX_BACKFILL``)."""
    schedule = schedule_of(task)
    if schedule is None:
        raise InvalidInput("task_id", task.id, "only a recurring task can be backfilled")
    if span.last < span.first:
        raise InvalidInput("end", span.end.isoformat(), "must not be before start")
    if span.last > now:
        raise InvalidInput("end", span.end.isoformat(), "must not be in the future: the schedule runs those slots")
    slots: list[datetime] = []
    slot = first_slot_from(schedule, task.scheduled_at, span.first)
    while slot <= span.last:
        if len(slots) == MAX_BACKFILL:
            raise InvalidInput("end", span.end.isoformat(), f"the range holds more than {MAX_BACKFILL} slots")
        slots.append(slot)
        slot = schedule.next_after(slot)
    return slots


def skip_while_paused(task: Task, now: datetime) -> Skipping | None:
    """The missed slots of a paused recurring task, decided as SKIP with no grace (None
    when nothing was missed, or the task is not a paused recurring one)."""
    if task.kind is not Kind.RECURRING or task.status is not Status.PAUSED:
        return None
    policy = dataclasses.replace(task, misfire=Misfire.SKIP, misfire_grace=0.0, triggered=False)
    decision = decide(policy, now)
    if decision.run or decision.skipped_first is None or decision.skipped_last is None:
        return None
    then = decision.next_slot
    return Skipping(
        version=task.version,
        next_slot=then,
        next_run_at=then + jitter_offset(task.id, then, task.jitter),
        count=decision.skipped,
        first=decision.skipped_first,
        last=decision.skipped_last,
        decision=f"resumed without catch-up: {decision.text}",
    )
