"""What the "next run" column says of a task: a time only when there is one to wait
for. A PAUSED task's ``next_run_at`` is the slot it was due at before it was paused and
a RUNNING task's is the slot being run, both usually past: shown as a next run they
would read as overdue. So a paused task says "paused" (and its slot), a running
one "running since" its run started, an ended one "—".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime

from tickwork.app import App
from tickwork.clock import utcnow
from tickwork.model import Execution, ExecutionStatus, Status, Task
from tickwork.web.views import when

NONE = "—"


@dataclasses.dataclass(frozen=True)
class NextRun:
    """The column's text and, muted beside it, a detail (empty when there is none)."""

    text: str
    detail: str = ""


def next_run(task: Task, running_since: datetime | None = None, now: datetime | None = None) -> NextRun:
    """The next run of ``task`` as the dashboard shows it; ``running_since``: when its
    current run started, if known; ``now``: the page's time (a paused task's slot may
    be past, "was due", or still ahead, paused before it came)."""
    status = task.status
    if status is Status.PENDING:
        return NextRun(when(task.next_run_at))
    if status is Status.PAUSED:
        past = task.next_run_at <= (now or utcnow())
        return NextRun("paused", f"{'was due' if past else 'next slot'} {when(task.next_run_at)}")
    if status is Status.RUNNING:
        cancelling = "cancelling" if task.cancel_requested else ""
        if running_since is None:
            return NextRun("running", cancelling)
        return NextRun(f"running since {when(running_since)}", cancelling)
    return NextRun(NONE)


def running_since(app: App, tasks: Iterable[object]) -> dict[int, datetime]:
    """When the current run of each RUNNING task among ``tasks`` started: its newest
    execution (the claim writes it), one indexed read per running task of the page.
    A run claimed but not yet started has no start: it is left out."""
    found: dict[int, datetime] = {}
    for task in tasks:
        if not isinstance(task, Task) or task.status is not Status.RUNNING:
            continue
        newest = app.store.list_executions(task_id=task.id, limit=1)
        if newest and newest[0].status is ExecutionStatus.RUNNING and newest[0].started_at is not None:
            found[task.id] = newest[0].started_at
    return found


def started(runs: Iterable[Execution]) -> datetime | None:
    """The start of the newest RUNNING run among a task's ``runs`` (newest first)."""
    for run in runs:
        if run.status is ExecutionStatus.RUNNING:
            return run.started_at
    return None
