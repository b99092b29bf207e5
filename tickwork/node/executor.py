"""Runs one claimed task: a thread for plain functions, an event loop for coroutines.

Cancellation is one mechanism with several causes (a user's cancel, a timeout, a lost
lease, shutdown): ``Run.request_cancel`` records the first cause, sets the context's
flag for cooperative thread tasks and cancels the asyncio task of async ones. The
outcome is then derived from the cause, so a function that returns normally after
seeing ``ctx.cancelled`` still ends CANCELLED (or TIMED_OUT).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

from tickwork.codec import dumps, json_problem
from tickwork.context import CancelFlag, Context
from tickwork.errors import Cancelled
from tickwork.model import ErrorInfo, ExecutionStatus
from tickwork.node.isolation import ChildCancelled, ChildFailed, run_in_process
from tickwork.registry import Isolation, TaskDef
from tickwork.store.base import Claim

log = logging.getLogger("tickwork.executor")


class CancelReason(enum.StrEnum):
    CANCEL = "cancel"
    TIMEOUT = "timeout"
    LOST = "lost"
    SHUTDOWN = "shutdown"
    REPLACED = "replaced"  # overlap="replace": the task's next slot came due
    CANCEL_RUN = "cancel_run"  # cancel(run_only=True): this run, not the task
    LOCK_LOST = "lock_lost"  # another node took this task's Redis lock
    MAX_RUNTIME = "max_runtime"  # the run reached its task's max_runtime


@dataclasses.dataclass(frozen=True)
class RunResult:
    status: ExecutionStatus
    error: ErrorInfo | None = None
    result: Any = None
    note: str | None = None


class Run:
    """One claimed run while it is in this node's hands."""

    def __init__(self, claim: Claim, definition: TaskDef) -> None:
        self.claim = claim
        self.definition = definition
        self.cancel_flag = CancelFlag()
        self.cancel_reason: CancelReason | None = None
        self.started = False
        self.released = False
        self.finished = False  # its result is queued for writing
        self.deadline: float | None = None  # monotonic; set by the node when the run starts
        self.deadline_reason = CancelReason.TIMEOUT
        self.replace_at: float | None = None  # monotonic; overlap="replace": the next slot
        self.started_at: datetime | None = None
        self.renewed_at = time.monotonic()
        self.lock_token: str | None = None  # the Redis lock's owner token, when locks are on
        self.lock_ttl = 0.0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_task: asyncio.Task[Any] | None = None
        self._on_cancel: Callable[[], None] | None = None

    @property
    def task_id(self) -> int:
        return self.claim.task.id

    @property
    def execution_id(self) -> int:
        return self.claim.execution_id

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


class TaskBaseException(Exception):
    """A task's own ``SystemExit``, ``KeyboardInterrupt`` or other ``BaseException``,
    carried out of its coroutine as an ordinary error: asyncio lets those two stop the
    event loop itself, which would strand every async run of the node."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


class AsyncRunner:
    """One event loop in a daemon thread, started on first use, for ``async def`` tasks."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="tickwork-asyncio", daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop

    def run(self, run: Run, coro: Coroutine[Any, Any, Any]) -> Any:
        loop = self.loop()

        async def bound() -> Any:
            task = asyncio.current_task()
            assert task is not None
            run.bind_async(loop, task)
            try:
                return await coro
            except (Exception, asyncio.CancelledError):
                raise
            except BaseException as exc:
                raise TaskBaseException(exc) from exc

        return asyncio.run_coroutine_threadsafe(bound(), loop).result()

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            if not thread.is_alive():
                loop.close()


class Executor:
    def __init__(self, max_result_bytes: int) -> None:
        self.async_runner = AsyncRunner()
        self.max_result_bytes = max_result_bytes

    def execute(self, run: Run, ctx: Context) -> RunResult:
        task = run.claim.task
        func = run.definition.func
        try:
            if run.definition.options.isolation is Isolation.PROCESS:
                options = run.definition.options
                arguments = (task.args, task.kwargs)
                value, note = run_in_process(run, ctx, func, arguments, options.kill_grace, self.max_result_bytes)
                if note is not None and run.cancel_reason is None:
                    return RunResult(ExecutionStatus.COMPLETED, note=note)
            elif run.definition.is_async:
                value = self.async_runner.run(run, func(ctx, *task.args, **task.kwargs))
            else:
                value = func(ctx, *task.args, **task.kwargs)
        except (Cancelled, asyncio.CancelledError, concurrent.futures.CancelledError, ChildCancelled) as exc:
            if run.cancel_reason is None:  # raised by the task itself, not by us
                return RunResult(ExecutionStatus.FAILED, ErrorInfo.from_exception(exc))
            return self._cancelled(run)
        except ChildFailed as exc:
            if run.cancel_reason is not None:
                stopped = exc.info.type in ("Cancelled", "CancelledError")  # how a cancelled child ends
                return self._cancelled(run, None if stopped else exc.info)
            return RunResult(ExecutionStatus.FAILED, exc.info)
        except TaskBaseException as exc:
            return self._raised(run, exc.original)
        except BaseException as exc:
            # Task code's SystemExit / KeyboardInterrupt end the run, never its node thread
            # (signals reach only the main thread, so none of these is the node's own).
            return self._raised(run, exc)
        if run.cancel_reason is not None:
            return self._cancelled(run)
        return self._completed(value)

    def _raised(self, run: Run, exc: BaseException) -> RunResult:
        if run.cancel_reason is not None:
            return self._cancelled(run, ErrorInfo.from_exception(exc))
        return RunResult(ExecutionStatus.FAILED, ErrorInfo.from_exception(exc))

    def cancelled(self, run: Run) -> RunResult:
        """The result of a run stopped (by ``run.cancel_reason``) before it started."""
        return self._cancelled(run)

    def _cancelled(self, run: Run, error: ErrorInfo | None = None) -> RunResult:
        reason = run.cancel_reason
        if reason is CancelReason.TIMEOUT:
            timeout = run.claim.task.timeout
            return RunResult(
                ExecutionStatus.TIMED_OUT,
                error or ErrorInfo("TimeoutError", f"run exceeded its timeout of {timeout} s"),
                note="timeout",
            )
        if reason is CancelReason.MAX_RUNTIME:
            limit = run.claim.task.max_runtime
            return RunResult(
                ExecutionStatus.TIMED_OUT,
                error or ErrorInfo("MaxRuntimeExceeded", f"run exceeded its max_runtime of {limit} s"),
                note="max_runtime",
            )
        if reason is CancelReason.CANCEL:
            return RunResult(ExecutionStatus.CANCELLED, error, note="cancelled on request")
        if reason is CancelReason.REPLACED:
            return RunResult(ExecutionStatus.CANCELLED, error, note="replaced: the next slot came due")
        if reason is CancelReason.CANCEL_RUN:
            return RunResult(ExecutionStatus.CANCELLED, error, note="run cancelled on request; the schedule goes on")
        message = {
            CancelReason.LOST: "lease lost: the run was stopped because this node no longer owns it",
            CancelReason.LOCK_LOST: "lock lost: another node took this task's Redis lock; the run was stopped",
            CancelReason.SHUTDOWN: "interrupted: the node shut down before the run finished",
        }[reason or CancelReason.SHUTDOWN]
        return RunResult(ExecutionStatus.FAILED, error or ErrorInfo("Interrupted", message), note=str(reason))

    def _completed(self, value: Any) -> RunResult:
        if value is None:
            return RunResult(ExecutionStatus.COMPLETED)
        problem = json_problem(value)
        if problem is not None:
            return RunResult(ExecutionStatus.COMPLETED, note=f"result not stored: {problem}")
        try:
            size = len(dumps(value).encode())
        except (TypeError, ValueError, RecursionError) as exc:  # a result must never fail its run
            return RunResult(ExecutionStatus.COMPLETED, note=f"result not stored: {exc}")
        if size > self.max_result_bytes:
            return RunResult(ExecutionStatus.COMPLETED, note=f"result not stored: over {self.max_result_bytes} bytes")
        return RunResult(ExecutionStatus.COMPLETED, result=value)

    def close(self) -> None:
        self.async_runner.close()
