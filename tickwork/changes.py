"""What edits of stored tasks and syncs of code schedules ask the store to write.

Pure values: the client API computes them (schedules need the cron library), the store
writes them under its guards. An edit is the task as it was read (``before``: its
version, revision and status are the guard) and as it should be (``after``)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from tickwork.model import NewTask, Task


@dataclasses.dataclass(frozen=True)
class Edit:
    """Write ``after``'s definition and state over ``before``, if the stored task is
    still ``before`` (same version, revision and status); ``reset_cancel`` clears a
    cancel request (a retry), which an edit never does otherwise: a request landing
    between the read and the write must not be lost."""

    before: Task
    after: Task
    reset_cancel: bool = False


@dataclasses.dataclass(frozen=True)
class Removal:
    """A code schedule no longer declared: cancelled, with ``note`` on record."""

    task: Task
    note: str
    declared_at: datetime


@dataclasses.dataclass(frozen=True)
class SyncView:
    """What a sync decides from, read in the sync's transaction, under its lock."""

    now: datetime
    seen: datetime
    """When the declaration set being synced was first seen (a forced sync: now)."""
    code: dict[str, Task]
    """The newest code schedule of each declared key (live or ended), and every live
    code schedule of the registered task names, by key."""
    holders: dict[str, Task]
    """Live tasks scheduled at runtime that hold a declared key (a sync leaves them)."""


@dataclasses.dataclass(frozen=True)
class SyncWrites:
    create: list[NewTask] = dataclasses.field(default_factory=list)
    edit: list[Edit] = dataclasses.field(default_factory=list)
    remove: list[Removal] = dataclasses.field(default_factory=list)
