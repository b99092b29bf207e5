"""The JSON shapes of the API, as pydantic models: they validate requests and document
every response in ``/openapi.json``, so clients (and the schema fuzzer) can rely on them.

Field names are those of DESIGN.md §1 and of ``App.schedule()``; times are ISO 8601.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
)

from tickwork.model import ExecutionStatus, Kind, Misfire, OnLost, Overlap, Status


def plain_text(value: str) -> str:
    """Text every store can keep and compare: no NUL (PostgreSQL refuses it) and no lone
    surrogates (not UTF-8). Refused here, so a query filter never reaches the database
    with a value it would fail on."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text") from None
    return value


Text = Annotated[str, AfterValidator(plain_text)]
"""A string input: checked as ``plain_text``."""
MAX_ID = 2**63 - 1


_ISO_DATETIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)?", re.IGNORECASE)


def iso_text(value: Any) -> datetime:
    """A time is ISO 8601 text (date, time and offset), parsed here: a number, or digits
    in a string, would otherwise be read as seconds or milliseconds since the epoch
    depending on their size (253402300800 would land in 1978)."""
    if not isinstance(value, str) or not _ISO_DATETIME.fullmatch(value):
        raise ValueError("must be ISO 8601 text with a date, a time and an offset, e.g. 2030-01-01T09:00:00+01:00")
    try:
        return datetime.fromisoformat(value.upper())
    except ValueError as exc:  # 2030-02-30, 25:00
        raise ValueError(f"not a valid time: {exc}") from None


Seconds = StrictFloat
"""A number of seconds: a JSON number (integer or not), never a boolean or a string."""
Count = StrictInt
"""A whole number: never a boolean, a fraction or a string."""
QueueName = Annotated[Text, Field(min_length=1, max_length=100, examples=["emails"])]
Moment = Annotated[datetime, BeforeValidator(iso_text)]
"""An ISO 8601 time with an offset, as text."""


class ErrorOut(BaseModel):
    """Every error answer: what went wrong, and for invalid input, which field and why."""

    error: str = Field(description="invalid_input, payload_too_large, not_found, conflict, unauthorized, ...")
    message: str
    field: str | None = None
    reason: str | None = None


class ScheduleIn(BaseModel):
    """``POST /api/v1/tasks``: the keyword arguments of ``App.schedule()``, with the task's
    registered ``name``. Give at most one of ``delay``/``at`` and of ``cron``/``every``."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[Text, Field(min_length=1, max_length=300, examples=["reports.daily"])]
    args: list[Any] | None = None
    kwargs: dict[str, Any] | None = None
    delay: Seconds | None = Field(None, description="Seconds from now.")
    at: Moment | None = Field(
        None, description="ISO 8601 text with an offset, e.g. 2030-01-01T09:00:00+01:00 (never a number)."
    )
    cron: Annotated[Text, Field(max_length=200, examples=["0 9 * * 1-5"])] | None = None
    timezone: Annotated[Text, Field(max_length=64)] = "UTC"
    every: Seconds | None = Field(None, description="Interval in seconds.")
    key: Annotated[Text, Field(max_length=300)] | None = Field(None, description="Idempotency key.")
    misfire: Misfire | None = None
    misfire_grace: Seconds | None = None
    jitter: Seconds | None = None
    timeout: Seconds | None = None
    max_retries: Count | None = None
    retry_backoff: Seconds | None = None
    priority: Count | None = None
    max_catchup: Count | None = None
    overlap: Overlap | None = None
    until: Moment | None = Field(None, description="Recurring only: no slot after this time (ISO 8601 with an offset).")
    max_runs: Count | None = Field(None, description="Recurring only: no run after this many.")
    queue: QueueName | None = Field(None, description="The queue it goes to (default: the task's registered one).")
    lock: Text | None = Field(
        None, max_length=200, description="At most one task holding this lock runs at a time, across every node."
    )
    replace: StrictBool = Field(
        False, description="With a key held by a live task: update that task in place to this definition."
    )


KEEP: Any = None
"""The default of an edit's field: left out means "keep"; on a type without null (the
default is not validated), an explicit null is refused."""


class TaskEditIn(BaseModel):
    """``PATCH /api/v1/tasks/{id}``: the fields to change, named as ``App.update()``'s
    (``every`` in seconds, ``until`` ISO 8601 with an offset); a field left out is kept.
    ``null`` turns off ``timeout``, ``max_runtime``, ``until`` or ``max_runs`` and is
    refused for the others. Giving ``cron`` replaces ``every``, and back."""

    model_config = ConfigDict(extra="forbid")

    args: list[Any] = Field(KEEP)
    kwargs: dict[str, Any] = Field(KEEP)
    cron: Annotated[Text, Field(max_length=200, examples=["*/5 * * * *"])] = Field(KEEP)
    every: Seconds = Field(KEEP, description="Interval in seconds (replaces cron).")
    timezone: Annotated[Text, Field(max_length=64)] = Field(KEEP)
    misfire: Misfire = Field(KEEP)
    misfire_grace: Seconds = Field(KEEP)
    jitter: Seconds = Field(KEEP)
    priority: Count = Field(KEEP)
    timeout: Seconds | None = Field(KEEP, description="null: no timeout.")
    max_retries: Count = Field(KEEP)
    retry_backoff: Seconds = Field(KEEP)
    overlap: Overlap = Field(KEEP)
    max_runtime: Seconds | None = Field(KEEP, description="null: no limit.")
    max_catchup: Count = Field(KEEP)
    until: Moment | None = Field(KEEP, description="ISO 8601 with an offset; null: no end time.")
    max_runs: Count | None = Field(KEEP, description="null: no limit on the number of runs.")
    max_lost: Count = Field(KEEP, description="Lost runs run again in a row before one counts as a failure.")
    queue: QueueName = Field(KEEP, description="Move it to this queue.")


class BackfillIn(BaseModel):
    """``POST /api/v1/tasks/{id}/backfill``: run every slot in [start, end] once."""

    model_config = ConfigDict(extra="forbid")

    start: Moment
    end: Moment


class TaskOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

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
    max_catchup: int
    overlap: Overlap
    last_decision: str | None
    parent_id: int | None
    on_lost: OnLost
    cancel_run_only: bool
    max_runtime: float | None
    until: datetime | None = Field(description="Recurring: no slot after this time; then COMPLETED.")
    max_runs: int | None = Field(description="Recurring: no run after the max_runs-th (counted as run_count).")
    origin: str | None = Field(description="code: declared with @app.periodic (sync_schedules owns it); null: runtime.")
    declared_at: datetime | None
    revision: int = Field(description="Bumped by every edit (update, retry, sync); version is bumped by claims.")
    replan_at: datetime | None = Field(description="A running task's edited schedule: its slot after this run.")
    replan_run_at: datetime | None
    max_lost: int = Field(description="Lost runs (node died) run again in a row before one counts as a failure.")
    queue: str = Field(description="The queue it is claimed from.")
    lock: str | None = Field(None, description="At most one task holding this lock runs at a time (schedule(lock=)).")
    max_running: int | None = Field(None, description="At most this many runs of its name at once, cluster-wide.")
    rate_limit: str | None = Field(None, description="At most this many starts of its name per window, e.g. 100/m.")
    waiting: str | None = Field(
        None, description="Why a due task is not running, e.g. its queue is paused (GET /tasks/{id} only)."
    )
    lost_runs: int = Field(description="Lost runs of the current slot run again so far (reset by any other end).")


class UndecodableTaskOut(BaseModel):
    """A task row that cannot be decoded (written by something other than tickwork): it
    stands in the task's place, saying what can be read of it and why the rest cannot.
    Repair or delete the row; operations on it answer 409."""

    id: int
    name: str | None = Field(description="The stored name, if it can be read.")
    status: str | None = Field(description="The stored status text, if it can be read.")
    undecodable: Annotated[Literal[True], Field(description="Always true: tells this shape from a task's.")] = True
    reason: str = Field(description="Why the row cannot be decoded.")


AnyTaskOut = TaskOut | UndecodableTaskOut
"""A task, or the row in its place that cannot be decoded (``undecodable: true``)."""


class ErrorInfoOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    type: str
    message: str
    traceback: str


class ExecutionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    task_id: int
    attempt: int
    scheduled_for: datetime
    started_at: datetime | None
    finished_at: datetime | None
    status: ExecutionStatus
    node: str | None
    fence: int | None
    error: ErrorInfoOut | None
    result: Any = None
    note: str | None
    skipped: int | None
    skipped_last: datetime | None


class StuckRunOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    task_id: int
    execution_id: int
    task_name: str
    reason: str
    since: datetime


class NodeOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    capacity: int
    running: int = Field(description="Busy slots, stuck threads included.")
    stuck: list[StuckRunOut] = Field(
        description="Runs that did not stop when asked (cancel, timeout): recorded, but each keeps a slot until "
        "its thread returns."
    )


class StatsOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    depth: int = Field(description="Tasks due and not claimed.")
    oldest_age: float | None = Field(description="Seconds since the oldest due, unclaimed task came due.")
    running: int
    nodes: int
    by_status: dict[str, int] = Field(description="Tasks per status.")
    runs_last_minute: dict[str, int] = Field(description="Runs that ended in the last minute, per status.")
    runs_last_hour: dict[str, int]
    window_full: bool = Field(description="The run counts looked only at the newest runs and may be low.")


class TaskPage(BaseModel):
    items: list[AnyTaskOut] = Field(description="Tasks in id order; a row that cannot be decoded is in its place.")
    limit: int
    offset: int
    next_offset: int | None = Field(description="Where the next page starts; null on the last page.")
    scanned: int = Field(description="Tasks looked at to answer (with q, at most the scan limit).")


class ExecutionList(BaseModel):
    items: list[ExecutionOut]


class NodeList(BaseModel):
    items: list[NodeOut]


class TaskList(BaseModel):
    items: list[TaskOut]


class FireTimesOut(BaseModel):
    timezone: str = Field(description="The zone of the local times (UTC for an interval).")
    times: list[datetime] = Field(description="Fire times strictly after `after`, in UTC.")
    local: list[str] = Field(description="The same times in `timezone`, ISO 8601 with their offset.")


class NameList(BaseModel):
    names: list[str] = Field(description="The task names this server's application registered.")


class FieldChangeOut(BaseModel):
    old: Any = None
    new: Any = None


class ScheduleChangeOut(BaseModel):
    """One line of a sync's plan."""

    action: Literal["create", "update", "remove", "unchanged", "kept", "conflict"] = Field(
        description="kept: a newer release's declarations wrote it; "
        "conflict: a task scheduled at runtime holds the key."
    )
    key: str
    name: str
    task_id: int | None = Field(description="The stored task, if there is one.")
    fields: dict[str, FieldChangeOut] = Field(description="For an update: each changed field, old and new.")
    note: str | None


class ScheduleChangeList(BaseModel):
    items: list[ScheduleChangeOut] = Field(description="One line per declared schedule, then the removals.")


class HealthOut(BaseModel):
    status: str = Field(description="ok, or unavailable")
    database: str
    schema_version: int | None = None
    reason: str | None = None


class QueueOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    paused: bool = Field(description="Paused: no task of it is claimed until it is resumed.")
    changed_at: datetime | None = Field(description="When it was last paused or resumed.")
    pending: int
    due: int = Field(description="PENDING tasks due now: the queue's depth.")
    running: int
    oldest_due: datetime | None = Field(description="The oldest due task's dispatch time.")


class QueueList(BaseModel):
    items: list[QueueOut]
