"""What a running task sees of its run: identity, slot, fence and cancellation."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from tickwork.errors import Cancelled


class Flag(Protocol):
    def is_set(self) -> bool: ...


class CancelFlag:
    """Set once, read often: what ``ctx.cancelled`` reads. A plain attribute (atomic under
    the GIL) costs far less per run than a ``threading.Event``."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class Context:
    """Passed as the first argument to every task function.

    ``fence`` is the task version this run was claimed under: pass it along with any
    external write the task makes so that a run whose lease was taken over cannot
    overwrite newer data (compare it, like the store does, before writing).
    """

    def __init__(
        self,
        *,
        task_id: int,
        task_name: str,
        execution_id: int,
        attempt: int,
        scheduled_for: datetime,
        fence: int,
        cancel_flag: Flag,
        renew: Callable[[], bool],
    ) -> None:
        self.task_id = task_id
        self.task_name = task_name
        self.execution_id = execution_id
        self.attempt = attempt
        self.scheduled_for = scheduled_for
        self.fence = fence
        self._cancel_flag = cancel_flag
        self._renew = renew
        self._logger: logging.LoggerAdapter[logging.Logger] | None = None

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """``tickwork.task.<name>``, with the run's ids on every record. Made on first use:
        most runs never log, and a logger lookup per run is a cost every run would pay."""
        if self._logger is None:
            self._logger = logging.LoggerAdapter(
                logging.getLogger(f"tickwork.task.{self.task_name}"),
                {"task_id": self.task_id, "execution_id": self.execution_id, "attempt": self.attempt},
            )
        return self._logger

    @property
    def cancelled(self) -> bool:
        """True once the run was asked to stop (cancel, timeout, lost lease, shutdown)."""
        return self._cancel_flag.is_set()

    def raise_if_cancelled(self) -> None:
        if self._cancel_flag.is_set():
            raise Cancelled(f"task {self.task_id} execution {self.execution_id} was cancelled")

    def heartbeat(self) -> bool:
        """Renew this run's lease now (long steps between node heartbeats).

        Returns False when the lease was lost: the run should stop, its result will be
        dropped as stale.
        """
        return self._renew()

    def __repr__(self) -> str:
        return (
            f"Context(task_id={self.task_id}, execution_id={self.execution_id}, attempt={self.attempt}, "
            f"scheduled_for={self.scheduled_for.isoformat()}, fence={self.fence})"
        )
