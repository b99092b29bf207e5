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
import logging
import threading
from collections.abc import Coroutine
from typing import Any

from tickwork.codec import dumps, json_problem
from tickwork.context import Context
from tickwork.errors import Cancelled
from tickwork.model import ErrorInfo, ExecutionStatus
from tickwork.node.isolation import ChildCancelled, ChildFailed, run_in_process
from tickwork.node.outcomes import RunResult, cancelled_result
from tickwork.node.run import Run
from tickwork.registry import Isolation

log = logging.getLogger("tickwork.executor")


_COMPLETED = RunResult(ExecutionStatus.COMPLETED)
"""What most runs come to: one frozen value for all of them."""


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
        func, options = run.definition.func, run.definition.options
        args = [ctx, *task.args] if options.context else task.args  # context=False: func(*args, **kwargs)
        try:
            if options.isolation is Isolation.PROCESS:
                arguments = (task.args, task.kwargs)
                value, note = run_in_process(
                    run, ctx, func, arguments, options.kill_grace, self.max_result_bytes, context=options.context
                )
                if note is not None and run.cancel_reason is None:
                    return RunResult(ExecutionStatus.COMPLETED, note=note)
            elif run.definition.is_async:
                value = self.async_runner.run(run, func(*args, **task.kwargs))
            else:
                value = func(*args, **task.kwargs)
        except (Cancelled, asyncio.CancelledError, concurrent.futures.CancelledError, ChildCancelled) as exc:
            if run.cancel_reason is None:  # raised by the task itself, not by us
                return RunResult(ExecutionStatus.FAILED, ErrorInfo.from_exception(exc))
            return cancelled_result(run)
        except ChildFailed as exc:
            if run.cancel_reason is not None:
                stopped = exc.info.type in ("Cancelled", "CancelledError")  # how a cancelled child ends
                return cancelled_result(run, None if stopped else exc.info)
            return RunResult(ExecutionStatus.FAILED, exc.info)
        except TaskBaseException as exc:
            return self._raised(run, exc.original)
        except BaseException as exc:
            # Task code's SystemExit / KeyboardInterrupt end the run, never its node thread
            # (signals reach only the main thread, so none of these is the node's own).
            return self._raised(run, exc)
        if run.cancel_reason is not None:
            return cancelled_result(run)
        return self._completed(value)

    def _raised(self, run: Run, exc: BaseException) -> RunResult:
        if run.cancel_reason is not None:
            return cancelled_result(run, ErrorInfo.from_exception(exc))
        return RunResult(ExecutionStatus.FAILED, ErrorInfo.from_exception(exc))

    def _completed(self, value: Any) -> RunResult:
        if value is None:
            return _COMPLETED
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
