"""One claimed run while it is in this node's hands, and its state machine.

A run is touched by four threads: the poll loop (which claims and queues it), a slot
thread (which runs it), the monitor (which renews, times out and cancels it) and the
recorder (which writes its result), plus the shutdown path. Its life is written down
once, here, and every change of state goes through ``Run.advance`` or
``Run.advance_from``, under the run's own lock:

    QUEUED ──start──▶ RUNNING ──result handed to the recorder──▶ RECORDING ──written──▶ DONE
       │                 │
       │                 └──lost (its lease or lock went elsewhere): nothing to write──▶ DONE
       └──given back unstarted at shutdown──▶ RELEASED

QUEUED: claimed, waiting for a slot (prefetched claims wait here). RUNNING: a slot
thread took it (the misfire decision, then the task). RECORDING: its outcome is queued
for the recorder; the run keeps its slot and its lease is still renewed until the
write lands. DONE and RELEASED are final. The race between a slot thread starting a run
and shutdown giving it back is decided by the lock: exactly one of
``advance_from(QUEUED, RUNNING)`` and ``advance_from(QUEUED, RELEASED)`` succeeds.

Cancellation is orthogonal: ``request_cancel`` may come from any thread in any state;
the first reason wins and decides the outcome (see outcomes.py).
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tickwork.context import CancelFlag
from tickwork.model import Claim
from tickwork.registry import Isolation, TaskDef


class CancelReason(enum.StrEnum):
    CANCEL = "cancel"
    TIMEOUT = "timeout"
    LOST = "lost"
    SHUTDOWN = "shutdown"
    REPLACED = "replaced"  # overlap="replace": the task's next slot came due
    CANCEL_RUN = "cancel_run"  # cancel(run_only=True): this run, not the task
    LOCK_LOST = "lock_lost"  # another node took this task's Redis lock
    MAX_RUNTIME = "max_runtime"  # the run reached its task's max_runtime


class RunState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    RECORDING = "recording"
    DONE = "done"
    RELEASED = "released"


TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.RUNNING, RunState.RELEASED}),
    RunState.RUNNING: frozenset({RunState.RECORDING, RunState.DONE}),
    RunState.RECORDING: frozenset({RunState.DONE}),
    RunState.DONE: frozenset(),
    RunState.RELEASED: frozenset(),
}
"""Every allowed change of state; anything else is a bug of the node."""


class IllegalTransition(RuntimeError):
    """A run was moved along an edge its state machine does not have: a node bug, never
    a user error (so not a TickworkError)."""


class Run:
    """One claimed run. ``renewed_at`` (monotonic) is when its lease was last known to
    be held: the claim's lease start, then each confirmed renewal."""

    def __init__(self, claim: Claim, definition: TaskDef, *, renewed_at: float | None = None) -> None:
        self.claim = claim
        self.definition = definition
        self.cancel_flag = CancelFlag()
        self.cancel_reason: CancelReason | None = None
        self.deadline: float | None = None  # monotonic; set by the runner when the run starts
        self.deadline_reason = CancelReason.TIMEOUT
        self.replace_at: float | None = None  # monotonic; overlap="replace": the next slot
        self.started_at: datetime | None = None
        self.renewed_at = time.monotonic() if renewed_at is None else renewed_at
        self.lock_token: str | None = None  # the Redis lock's owner token, when locks are on
        self.lock_ttl = 0.0
        self._state = RunState.QUEUED
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_task: asyncio.Task[Any] | None = None
        self._on_cancel: Callable[[], None] | None = None
        self.cancel_seen_at: float | None = None
        """Monotonic: when the monitor first saw this run asked to stop (stuck.py)."""
        self.stuck_note: str | None = None
        """Set when reported as not stopping when asked (stuck.py): what the report said."""

    @property
    def killable(self) -> bool:
        """Its code can be stopped from outside: a process run is killed; a thread (or an
        event loop's task stuck in blocking code) stops only when its code lets it."""
        return self.definition.options.isolation is Isolation.PROCESS

    @property
    def limited(self) -> bool:
        """A limit other tasks may wait on governs its task: its end is news (pacing.py)."""
        task = self.claim.task
        return task.lock is not None or task.max_running is not None or task.rate_limit is not None

    @property
    def task_id(self) -> int:
        return self.claim.task.id

    @property
    def execution_id(self) -> int:
        return self.claim.execution_id

    # -- state ------------------------------------------------------------------------

    @property
    def state(self) -> RunState:
        return self._state

    @property
    def started(self) -> bool:
        """A slot thread took it (whatever happened since)."""
        return self._state in (RunState.RUNNING, RunState.RECORDING, RunState.DONE)

    @property
    def finished(self) -> bool:
        """Its outcome is decided: queued for writing, written, or dropped."""
        return self._state in (RunState.RECORDING, RunState.DONE)

    @property
    def released(self) -> bool:
        return self._state is RunState.RELEASED

    def advance(self, to: RunState) -> None:
        """Move to ``to``; raises IllegalTransition if the machine has no such edge."""
        with self._lock:
            if to not in TRANSITIONS[self._state]:
                raise IllegalTransition(f"run {self.execution_id}: {self._state} -> {to} is not allowed")
            self._state = to

    def advance_from(self, expected: RunState, to: RunState) -> bool:
        """Move from ``expected`` to ``to`` if the run is still in ``expected`` (False
        if another thread moved it first): how the start/give-back race is decided."""
        if to not in TRANSITIONS[expected]:
            raise IllegalTransition(f"run {self.execution_id}: {expected} -> {to} is not allowed")
        with self._lock:
            if self._state is not expected:
                return False
            self._state = to
            return True

    # -- cancellation -----------------------------------------------------------------

    def request_cancel(self, reason: CancelReason) -> None:
        with self._lock:
            first = self.cancel_reason is None
            if first:
                self.cancel_reason = reason
            self.cancel_flag.set()
            loop, task, on_cancel = self._loop, self._async_task, self._on_cancel
        if loop is not None and task is not None:
            loop.call_soon_threadsafe(task.cancel)
        if on_cancel is not None and first:
            on_cancel()  # once: a repeated request must not cut the task's clean-up short

    def bind_cancel(self, on_cancel: Callable[[], None] | None) -> None:
        """What stops this run when it is cancelled (a process run: SIGTERM its group)."""
        with self._lock:
            self._on_cancel = on_cancel
            cancelled = self.cancel_flag.is_set()
        if cancelled and on_cancel is not None:
            on_cancel()

    def bind_async(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        with self._lock:
            self._loop, self._async_task = loop, task
            cancelled = self.cancel_flag.is_set()
        if cancelled:
            task.cancel()
