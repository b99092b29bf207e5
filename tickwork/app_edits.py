"""The App's operations that change stored tasks in place: schedules declared in code
and their sync, ``update``, ``retry``, and ``schedule(replace=True)``.

Each edit is computed from the task as read and written under that read's guard
(``Store.edit_task``); when the task changed in between (a claim, an ended run, another
edit), it is read again and the edit computed anew, a few times, before giving up with
``EditConflict``."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from tickwork import declarations, editing, validate
from tickwork.changes import Edit, SyncView, SyncWrites
from tickwork.declarations import Declarations, ScheduleChange
from tickwork.errors import EditConflict, InvalidInput, TaskNotFound
from tickwork.model import Kind, NewTask, Task
from tickwork.registry import Registry
from tickwork.store import Store
from tickwork.wakeup import Wakeup

F = TypeVar("F", bound=Callable[..., Any])
EDIT_ATTEMPTS = 5
log = logging.getLogger("tickwork.app")


class EditsMixin:
    """Part of ``App`` (see there); kept apart so each module stays one job."""

    registry: Registry
    declarations: Declarations
    wakeup: Wakeup
    max_payload: int
    misfire_grace: float

    @property
    def store(self) -> Store:  # provided by App
        raise NotImplementedError

    # -- schedules in code ----------------------------------------------------------

    def periodic(
        self,
        cron: str | None = None,
        *,
        every: float | timedelta | None = None,
        key: str | None = None,
        timezone: str = "UTC",
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Callable[[F], F]:
        """Declare a schedule owned by code, above ``@app.task``: ``sync_schedules()``
        (which every node runs at start-up) creates it, keeps it as declared, and
        cancels it once code no longer declares it. ``key`` (default: the task's name)
        identifies it across deploys; several on one task need distinct keys.
        ``options``: ``schedule()``'s (misfire, jitter, priority, until, max_runs, …)."""
        given = declarations.periodic_args(cron, every, timezone, list(args), kwargs, options)

        def declare(func: F) -> F:
            declaration = self.declarations.add(self.registry, func, key, given)
            # Checked now, so that a bad declaration fails at import, not at the sync.
            limits = {"max_payload": self.max_payload, "misfire_grace": self.misfire_grace}
            declarations.resolved([declaration], self.registry, datetime.now(UTC), **limits)
            return func

        return declare

    def sync_schedules(self, dry_run: bool = False, *, force: bool = False) -> list[ScheduleChange]:
        """Bring the stored code schedules in line with this code's ``@app.periodic``
        declarations; return the plan (create / update, with each changed field old →
        new / remove / unchanged / kept / conflict). ``dry_run``: change nothing.
        ``force``: a deliberate rollback — this code's declarations win even over those
        of a newer release (see the README's "Schedules in code")."""
        for attempt in range(1, EDIT_ATTEMPTS + 1):
            try:
                changes = self._sync_once(dry_run, force)
            except EditConflict:  # a node claimed a schedule the plan edits: plan again
                if attempt == EDIT_ATTEMPTS:
                    raise
                continue
            if not dry_run:
                self.wakeup.set()
            return changes
        raise AssertionError("unreachable")

    def _sync_once(self, dry_run: bool, force: bool) -> list[ScheduleChange]:
        now = self.store.approximate_now()
        limits = {"max_payload": self.max_payload, "misfire_grace": self.misfire_grace}
        declared = declarations.resolved(self.declarations, self.registry, now, **limits)
        names = self.registry.names()
        changes: list[ScheduleChange] = []

        def plan(view: SyncView) -> SyncWrites:
            planned, writes = declarations.plan(declared, names, view)
            changes[:] = planned
            return writes

        digest = declarations.digest(declared, names)
        keys = [key for key, _ in declared]
        self.store.sync_schedules(digest, keys, names, plan, dry_run=dry_run, force=force)
        return changes

    # -- edits --------------------------------------------------------------------------

    def update(self, task_id: int, **changes: Any) -> Task:
        """Edit a task in place (same id, history kept): its schedule (``cron``,
        ``every``, ``timezone``), ``args``, ``kwargs``, policies and ends, checked as
        ``schedule()`` checks them. A changed schedule's next slot is placed from now; a
        running task finishes its run as it was claimed, and the change applies to its
        next run. None turns off ``timeout``, ``max_runtime``, ``until`` or ``max_runs``.
        An ended task cannot be updated (``InvalidState``)."""
        editing.changes_of(changes)
        limits = {"max_payload": self.max_payload, "misfire_grace": self.misfire_grace}
        return self._edit(
            task_id,
            lambda task: editing.updated(
                task, changes, self.registry.get(task.name), self.store.approximate_now(), **limits
            ),
        )

    def retry(self, task_id: int) -> Task:
        """Run a FAILED or CANCELLED task again: PENDING, due now, with a fresh attempt
        count and its history kept (a recurring task then goes on with its schedule)."""
        return self._edit(task_id, lambda task: editing.retried(task, self.store.approximate_now()))

    def _edit(self, task_id: int, compute: Callable[[Task], Edit]) -> Task:
        validate.task_id(task_id)
        for _ in range(EDIT_ATTEMPTS):
            task = self.store.get_task(task_id)
            if task is None:
                raise TaskNotFound(task_id)
            written = self.store.edit_task(compute(task))
            if written is not None:
                self.wakeup.set()
                return written
        raise EditConflict(task_id)

    def _replace(self, existing: Task, new: NewTask, *, start_given: bool) -> Task:
        """``schedule(key=..., replace=True)`` found ``existing`` holding the key: give it
        the call's definition in place, as ``update()`` would."""
        if existing.name != new.name or existing.kind is not new.kind:
            raise InvalidInput(
                "key", new.key, f"is held by task {existing.id} ({existing.kind.value} {existing.name}): "
                "replace=True can change its schedule, arguments and options, not its task or kind",
            )  # fmt: skip
        if existing.lock != new.lock:  # a running task's lock cannot move without its key
            raise InvalidInput(
                "lock", new.lock, f"task {existing.id} holding the key has lock {existing.lock!r}: "
                "replace=True cannot change a lock; cancel the task and schedule it again",
            )  # fmt: skip

        def compute(task: Task) -> Edit:
            if task.status in editing.ENDED:
                raise EditConflict(task.id)
            moved = any(getattr(new, f) != getattr(task, f) for f in editing.RESCHEDULING)
            reschedule = moved or (task.kind is Kind.ONE_TIME and start_given)
            return editing.edit_to(task, new, reschedule=reschedule)

        replaced = self._edit(existing.id, compute)
        log.info("task %s replaced for key %r", replaced.id, new.key)
        return dataclasses.replace(replaced, existed=True)
