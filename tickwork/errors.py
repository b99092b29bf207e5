"""The exception hierarchy: one root so callers can catch everything tickwork raises."""

from __future__ import annotations

from typing import Any


class TickworkError(Exception):
    """Root of every error tickwork raises on purpose."""


class NodeError(TickworkError, RuntimeError):
    """A node cannot go on: one of its threads died, or it met a state it cannot be in."""


class InvalidInput(TickworkError, ValueError):
    """A value given to tickwork is not acceptable; nothing was stored.

    The message always names the field and the offending value so that a user (or an
    HTTP client, later) can tell exactly what to fix.
    """

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        try:
            shown = repr(value)
        except ValueError:  # an int past the interpreter's limit on digits in a string
            shown = f"<{type(value).__name__} too long to show>"
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{field}={shown}: {reason}")


class InvalidCron(InvalidInput):
    """A cron expression that does not parse or never fires."""


class InvalidTimezone(InvalidInput):
    """A time zone name that is not a known IANA zone."""


class UnknownTask(InvalidInput):
    """A task name that was never registered with ``@app.task``."""


class PayloadTooLarge(InvalidInput):
    """Arguments whose JSON encoding exceeds ``max_payload`` bytes."""


class TaskNotFound(TickworkError, LookupError):
    """No task with this id exists in the store."""

    def __init__(self, task_id: int) -> None:
        self.task_id = task_id
        super().__init__(f"task_id={task_id!r}: no such task")


class InvalidState(TickworkError):
    """The task is in a state that does not allow the requested operation."""

    def __init__(self, task_id: int, status: str, operation: str) -> None:
        self.task_id = task_id
        self.status = status
        self.operation = operation
        super().__init__(f"task_id={task_id}: cannot {operation} a task that is {status}")


class Cancelled(TickworkError):
    """Raised inside a task by ``ctx.raise_if_cancelled()`` once cancellation was requested."""


class QueueFull(TickworkError):
    """``max_pending`` is reached: the nodes are behind, nothing was stored. Retry later
    (the HTTP API answers 429)."""

    def __init__(self, limit: int, depth: int, adding: int) -> None:
        self.field = "max_pending"
        self.limit = limit
        self.depth = depth
        self.adding = adding
        shown = f"{depth}+" if depth > limit else str(depth)
        super().__init__(
            f"max_pending={limit}: {shown} tasks are due and unclaimed; adding {adding} more due now "
            "would exceed the limit (nothing was stored; retry later)"
        )


class StoreError(TickworkError):
    """The store could not be opened or its schema is not usable."""


class KeyHeld(InvalidState):
    """The operation would give a second live task the idempotency key another one holds."""

    def __init__(self, task_id: int, status: str, operation: str, key: str, holder: int | None) -> None:
        self.key = key
        self.holder = holder
        super().__init__(task_id, status, operation)
        held_by = f"live task {holder}" if holder is not None else "another live task"
        self.args = (f"{self.args[0]}: key={key!r} is held by {held_by}",)


class EditConflict(TickworkError):
    """The task kept changing (claimed, ended, edited elsewhere) while an edit was being
    applied: nothing was changed. Read it again and retry."""

    def __init__(self, task_id: int) -> None:
        self.task_id = task_id
        super().__init__(f"task_id={task_id}: the task changed while it was being edited; nothing was changed")


class PruneBusy(TickworkError):
    """Another node held the store's prune lock all the while: nothing more was pruned."""

    def __init__(self, waited: float) -> None:
        super().__init__(f"another node held the prune lock for {waited:g} s: try again later")
