"""The entities of DESIGN.md §1 as frozen dataclasses, and their str-valued enums.

Models are plain values: the store builds them from rows, the client API hands them
out, nothing mutates them. A changed task is a new ``Task`` read back from the store.
"""

from __future__ import annotations

import dataclasses
import enum
import traceback
from datetime import datetime
from typing import Any

from tickwork.timing import fire_times


class Status(enum.StrEnum):
    """Task status. RECURRING tasks never reach COMPLETED."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    PAUSED = "PAUSED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})


class ExecutionStatus(enum.StrEnum):
    """Outcome of one run (one row of the execution log)."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"
    SKIPPED = "SKIPPED"


class Kind(enum.StrEnum):
    ONE_TIME = "ONE_TIME"
    RECURRING = "RECURRING"


class Misfire(enum.StrEnum):
    """What to do with slots that were missed by more than ``misfire_grace``."""

    SKIP = "SKIP"
    SINGLE_CATCHUP = "SINGLE_CATCHUP"
    CATCHUP = "CATCHUP"


class Overlap(enum.StrEnum):
    """What a RECURRING task's next slot does while its previous run is still going."""

    SKIP = "skip"  # wait: the slot is then handled by the misfire policy
    REPLACE = "replace"  # cancel the running run, then run the new slot


class OnLost(enum.StrEnum):
    """What becomes of a task whose run was lost with its node."""

    RETRY = "retry"  # a failed attempt: then the retry and recurrence rules
    FAIL = "fail"  # the task ends FAILED


@dataclasses.dataclass(frozen=True, slots=True)
class ErrorInfo:
    """Why a run failed: exception type, message and formatted traceback."""

    type: str
    message: str
    traceback: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        return cls(type(exc).__qualname__, str(exc), "".join(traceback.format_exception(exc)))


@dataclasses.dataclass(frozen=True, slots=True)
class Task:
    id: int
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    key: str | None
    kind: Kind
    cron: str | None
    timezone: str
    interval: float | None
    scheduled_at: datetime
    next_run_at: datetime
    status: Status
    misfire: Misfire
    misfire_grace: float
    jitter: float
    timeout: float | None
    max_retries: int
    retry_backoff: float
    priority: int
    version: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    cancel_requested: bool
    triggered: bool
    attempt: int
    run_count: int
    last_status: ExecutionStatus | None
    created_at: datetime
    updated_at: datetime
    max_catchup: int = 100
    overlap: Overlap = Overlap.SKIP
    last_decision: str | None = None
    """What the node decided the last time this task's slots were missed."""
    parent_id: int | None = None
    """For a backfill run: the recurring task whose slot it runs."""
    on_lost: OnLost = OnLost.RETRY
    cancel_run_only: bool = False
    """The requested cancel is for the current run only (``cancel(id, run_only=True)``)."""
    max_runtime: float | None = None
    """Seconds a run may take, counted from its claim, before any node's reconciler ends
    it TIMED_OUT even though its node still renews the lease (None: no limit)."""
    until: datetime | None = None
    """No slot after this instant: the recurring task then ends COMPLETED."""
    max_runs: int | None = None
    """No run after the ``max_runs``-th (counted as ``run_count``): then COMPLETED."""
    origin: str | None = None
    """``"code"`` for a schedule declared with ``@app.periodic`` (``sync_schedules``
    owns it); None for one scheduled at runtime, which a sync never touches."""
    declared_at: datetime | None = None
    """For a code schedule: when the declaration set that last wrote it was first seen."""
    removed_at: datetime | None = None
    """For a code schedule: when a sync cancelled it because code no longer declared it."""
    revision: int = 0
    """Bumped by every edit (update, retry, sync); ``version`` is bumped by claims."""
    replan_at: datetime | None = None
    """An edit of this running task's schedule: the slot it moves to when the run ends."""
    replan_run_at: datetime | None = None
    """With ``replan_at``: that slot's dispatch time (the slot plus its jitter)."""
    queue: str = "default"
    """The queue it is claimed from: a node claims from the queues it serves."""
    lock: str | None = None
    """At most one task holding this lock runs at a time, cluster-wide (``schedule(lock=)``)."""
    max_running: int | None = None
    """At most this many runs of the task's name at once, cluster-wide (``@app.task``)."""
    rate_limit: str | None = None
    """At most this many starts of the task's name per window, as ``"100/m"`` (``@app.task``)."""
    max_lost: int = 3
    """How many lost runs in a row (its node died or stopped renewing) are run again
    before a lost run counts as a failure (``on_lost="retry"``); apart from retries."""
    lost_runs: int = 0
    """Lost runs of the current slot so far that were run again; reset by any run that
    ends on its node, and by a new slot."""
    existed: bool = dataclasses.field(default=False, compare=False)
    """Only on what ``schedule(key=...)`` returns: True when a live task already held the
    key and was returned unchanged (``replace=True`` updates it instead)."""

    def schedule_text(self) -> str:
        """The schedule in one short line: ``cron 0 9 * * 1-5 (Europe/Berlin)``,
        ``every 300 s`` or ``once``."""
        if self.cron:
            return f"cron {self.cron} ({self.timezone})"
        if self.interval:
            return f"every {self.interval:g} s"
        return "once"

    def next_fire_times(self, count: int = 5) -> list[datetime]:
        """The next ``count`` nominal slots, from ``scheduled_at`` on (empty if one-time),
        by ``tickwork.fire_times``: interval slots on the grid of ``scheduled_at``."""
        if count < 1 or (self.cron is None and self.interval is None):
            return []
        if count == 1:
            return self._within_ends([self.scheduled_at])
        if self.cron is not None:
            later = fire_times(cron=self.cron, timezone=self.timezone, after=self.scheduled_at, n=count - 1)
        else:
            later = fire_times(every=self.interval, anchor=self.scheduled_at, after=self.scheduled_at, n=count - 1)
        return self._within_ends([self.scheduled_at, *later])

    def _within_ends(self, slots: list[datetime]) -> list[datetime]:
        """``slots`` cut at the schedule's ends: none after ``until``, no more than the
        runs ``max_runs`` leaves."""
        if self.until is not None:
            slots = [slot for slot in slots if slot <= self.until]
        if self.max_runs is not None:
            slots = slots[: max(self.max_runs - self.run_count, 0)]
        return slots

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Execution:
    id: int
    task_id: int
    attempt: int
    scheduled_for: datetime
    started_at: datetime | None
    finished_at: datetime | None
    status: ExecutionStatus
    node: str | None
    fence: int | None
    error: ErrorInfo | None
    result: Any
    note: str | None
    skipped: int | None = None
    """For a SKIPPED execution: how many slots, from ``scheduled_for`` to ``skipped_last``."""
    skipped_last: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Stats:
    """The queue and the cluster at one moment, as the store sees them."""

    depth: int
    """Tasks due and not claimed."""
    oldest_age: float | None
    """Seconds since the oldest due, unclaimed task came due (None: none is due) — the
    signal to autoscale on: it grows when the nodes cannot keep up, whatever the depth."""
    running: int
    nodes: int
    by_status: dict[str, int]
    """Tasks per status."""
    runs_last_minute: dict[str, int]
    """Executions that ended in the last minute, per execution status."""
    runs_last_hour: dict[str, int]
    window_full: bool = False
    """The per-minute/hour counts looked at only the newest executions and may be low."""

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class StuckRun:
    """A run whose thread its node could not stop (Python cannot kill a thread): its
    outcome is recorded, but it keeps one of the node's slots until it returns."""

    task_id: int
    execution_id: int
    task_name: str
    reason: str
    """What it was asked to stop for: cancel, timeout, max_runtime, replaced, lost..."""
    since: datetime
    """When it was asked to stop."""


@dataclasses.dataclass(frozen=True, slots=True)
class Node:
    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    capacity: int
    running: int
    """Busy slots, stuck ones included."""
    stuck: tuple[StuckRun, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)


def _to_dict(obj: Any) -> dict[str, Any]:
    """JSON-ready dict: enums as their values, datetimes as ISO 8601 in UTC."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(obj):
        if not field.compare:
            continue  # a fact about the call that returned the object, not about it
        value = getattr(obj, field.name)
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, ErrorInfo):
            value = dataclasses.asdict(value)
        elif isinstance(value, tuple) and all(isinstance(v, StuckRun) for v in value):
            value = [_to_dict(v) for v in value]
        out[field.name] = value
    return out


@dataclasses.dataclass(frozen=True)
class TaskHeader:
    """What every task row can tell, even one that cannot be decoded as a ``Task``."""

    id: int
    name: str | None
    status: str | None


# -- what the node and the store exchange about runs --------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Encoded:
    """Arguments beside the JSON text ``codec.dumps`` made of them when they were checked,
    so that a store writes that text instead of encoding them again. It keeps the very
    objects it was made from: a copy of a task given other arguments
    (``dataclasses.replace``) no longer matches, and is encoded anew."""

    args: list[Any]
    kwargs: dict[str, Any]
    text: tuple[str, str]
    flat: bool = False
    """Every argument is a str, int, float, bool or None (exactly those types): the
    values are then what decoding ``text`` gives, and a store need not decode it."""

    def text_of(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[str, str] | None:
        return self.text if args is self.args and kwargs is self.kwargs else None


@dataclasses.dataclass(frozen=True, slots=True)
class NewTask:
    """A validated task to insert; the client API builds these, the store only writes."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    kind: Kind
    scheduled_at: datetime
    next_run_at: datetime
    key: str | None = None
    cron: str | None = None
    timezone: str = "UTC"
    interval: float | None = None
    misfire: Misfire = Misfire.SINGLE_CATCHUP
    misfire_grace: float = 60.0
    jitter: float = 0.0
    timeout: float | None = None
    max_retries: int = 0
    retry_backoff: float = 1.0
    priority: int = 0
    max_catchup: int = 100
    overlap: Overlap = Overlap.SKIP
    parent_id: int | None = None
    on_lost: OnLost = OnLost.RETRY
    max_runtime: float | None = None
    until: datetime | None = None
    max_runs: int | None = None
    origin: str | None = None
    declared_at: datetime | None = None
    max_lost: int = 3
    queue: str = "default"
    lock: str | None = None
    max_running: int | None = None
    rate_limit: str | None = None
    encoded: Encoded | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claimed run: the task as claimed (its version is the fence) and its log row."""

    task: Task
    execution_id: int
    scheduled_for: datetime
    judged_at: datetime | None = None
    """When a limit held the task back: the moment the misfire policy judges it at (the
    time it waited for the limit does not count as late); None: now."""

    @property
    def fence(self) -> int:
        return self.task.version


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """How one run ended, and the task's next state as the policy decided it."""

    task_id: int
    fence: int
    execution_id: int
    status: ExecutionStatus
    task_status: Status
    scheduled_at: datetime
    next_run_at: datetime
    attempt: int
    triggered: bool
    finished_at: datetime
    error: ErrorInfo | None = None
    started_at: datetime | None = None
    """When the run really started, if later than its claim (it waited as prefetch)."""
    skipped: int | None = None
    """For a SKIPPED execution: how many slots it stands for, up to ``skipped_last``."""
    skipped_last: datetime | None = None
    decision: str | None = None
    """A misfire decision to keep on the task (``last_decision``)."""
    result: Any = None
    note: str | None = None
    counts: bool = True
    """The run counts in ``run_count`` (and toward ``max_runs``); not one interrupted by
    its node's shutdown, whose slot runs again."""
    lost_runs: int = 0
    """The task's ``lost_runs`` after this write: one more for a lost run run again,
    else 0 (a run that ended on its node, or a new slot)."""


@dataclasses.dataclass(frozen=True)
class Skipping:
    """Missed slots to pass over when a paused task is resumed without catching up."""

    version: int
    """The version the skipped slots were computed from: a task changed since is left alone."""
    next_slot: datetime
    next_run_at: datetime
    count: int
    first: datetime
    last: datetime
    decision: str


@dataclasses.dataclass(frozen=True)
class Renewal:
    """A lease that was renewed, and whether someone asked to cancel the run."""

    task_id: int
    fence: int
    cancel_requested: bool
    run_only: bool = False
    """The cancel is for the current run only: the task's schedule goes on."""


@dataclasses.dataclass(frozen=True)
class PruneCounts:
    """What one prune deleted (or, in a dry run, would delete)."""

    executions: int = 0
    """Execution rows, those of the deleted tasks included."""
    tasks: int = 0
    """Ended one-time tasks."""
    busy: bool = False
    """Another pruner held the store's prune lock: this one did nothing."""

    def __add__(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(self.executions + other.executions, self.tasks + other.tasks, self.busy or other.busy)

    @property
    def rows(self) -> int:
        return self.executions + self.tasks
