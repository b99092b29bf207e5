"""Runs a task in a child process: the one way to stop code that never checks
``ctx.cancelled`` (a busy loop, a blocking C call) without stopping the node.

The node's run thread supervises the child. Cancellation (a user's cancel, a timeout,
a lost lease, shutdown) sends SIGTERM, which in the child sets ``ctx.cancelled`` and
raises ``Cancelled`` (or cancels the coroutine of an ``async def`` task) so its
``finally`` blocks run; a child still alive ``kill_grace`` seconds later gets SIGKILL.

Only JSON crosses the pipe after start: arguments go in as the stored JSON text, the
result and errors come back as JSON. The function itself travels by reference (module
and qualified name), which is how the child finds the registered function; nothing
read from the store decides what is imported. A child whose node dies sees its pipe
close and exits, so a crashed node leaves no run going on unowned.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Any

from tickwork.codec import dumps, json_problem
from tickwork.context import Context
from tickwork.errors import Cancelled
from tickwork.model import ErrorInfo

if TYPE_CHECKING:
    from tickwork.executor import Run

# forkserver: children fork from a small single-threaded server, never from the node
# (whose threads hold locks a fork would copy mid-use), and start faster than spawn.
START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
# How often the supervisor looks at the cancel flag while the child is quiet.
SUPERVISE_TICK_S = 0.05
# Exit code of a child whose node went away.
ORPHANED_EXIT = 70


class ChildFailed(Exception):
    """The task raised in its child process (or the child died): carries the error as
    the child saw it, traceback included."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.message)
        self.info = info


class ChildCancelled(Exception):
    """The child stopped because it was asked to (SIGTERM or SIGKILL)."""


class _Flag:
    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


def run_in_process(run: Run, ctx: Context, func: Callable[..., Any], kill_grace: float) -> tuple[Any, str | None]:
    """Run ``func`` in a child process; return its (JSON) result and a note on it.
    ``ctx.heartbeat()`` in the child renews the lease through the node (``ctx`` here).

    Raises ``ChildFailed`` for an error in the task, ``ChildCancelled`` when the run was
    cancelled and the child stopped."""
    mp = multiprocessing.get_context(START_METHOD)
    parent_end, child_end = mp.Pipe(duplex=True)
    task = run.claim.task
    info = {
        "task_id": ctx.task_id,
        "task_name": ctx.task_name,
        "execution_id": ctx.execution_id,
        "attempt": ctx.attempt,
        "scheduled_for": ctx.scheduled_for.isoformat(),
        "fence": ctx.fence,
    }
    process = mp.Process(  # type: ignore[attr-defined]  # typeshed: BaseContext lacks Process
        target=_child_main,
        args=(child_end, func, dumps(task.args), dumps(task.kwargs), dumps(info)),
        name=f"tickwork-task-{task.id}",
        daemon=True,
    )
    process.start()
    child_end.close()
    try:
        run.bind_process(process)
        return _supervise(run, process, parent_end, ctx.heartbeat, kill_grace)
    finally:
        parent_end.close()
        if process.is_alive():  # only after an error of ours: never leave it running
            process.kill()
        process.join(timeout=5)


def _supervise(
    run: Run,
    process: multiprocessing.process.BaseProcess,
    conn: multiprocessing.connection.Connection,
    renew: Callable[[], bool],
    kill_grace: float,
) -> tuple[Any, str | None]:
    message: dict[str, Any] | None = None
    kill_at: float | None = None
    pipe_open = True
    while True:
        waitables: list[Any] = [process.sentinel]
        if pipe_open:
            waitables.append(conn)
        ready = multiprocessing.connection.wait(waitables, timeout=SUPERVISE_TICK_S)
        if conn in ready:
            try:
                received = json.loads(conn.recv_bytes())
            except (EOFError, OSError):
                pipe_open = False
            else:
                if received["kind"] == "renew":
                    _reply(conn, {"kind": "renewed", "ok": bool(renew())})
                else:
                    message = received
        if run.cancel_flag.is_set() and process.is_alive():
            if kill_at is None:
                kill_at = time.monotonic() + kill_grace
            elif time.monotonic() >= kill_at:
                process.kill()
        if process.sentinel in ready and not (pipe_open and conn.poll()):
            break
    process.join()
    if message is not None and message["kind"] == "result":
        return message.get("value"), message.get("note")
    if message is not None and message["kind"] == "error":
        raise ChildFailed(ErrorInfo(message["type"], message["message"], message["traceback"]))
    if run.cancel_reason is not None:
        raise ChildCancelled(f"child process stopped (exit code {process.exitcode})")
    raise ChildFailed(
        ErrorInfo("ProcessDied", f"the task's process ended with exit code {process.exitcode} before returning")
    )


def _reply(conn: multiprocessing.connection.Connection, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the child is gone; the supervisor sees it exit
        conn.send_bytes(json.dumps(message).encode())


# -- in the child ------------------------------------------------------------------


def _child_main(
    conn: multiprocessing.connection.Connection,
    func: Callable[..., Any],
    args_json: str,
    kwargs_json: str,
    info_json: str,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the node, which stops its runs in order
    flag = _Flag()
    replies: queue.SimpleQueue[bool] = queue.SimpleQueue()
    send_lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with send_lock:
            conn.send_bytes(json.dumps(message).encode())

    def listen() -> None:
        """The node's end of the pipe closes only when the node is gone: stop then."""
        while True:
            try:
                received = json.loads(conn.recv_bytes())
            except (EOFError, OSError):
                os._exit(ORPHANED_EXIT)
            if received.get("kind") == "renewed":
                replies.put(bool(received["ok"]))

    def renew() -> bool:
        send({"kind": "renew"})
        ok = replies.get()
        if not ok:
            flag.set()
        return ok

    info = json.loads(info_json)
    ctx = Context(
        task_id=info["task_id"],
        task_name=info["task_name"],
        execution_id=info["execution_id"],
        attempt=info["attempt"],
        scheduled_for=datetime.fromisoformat(info["scheduled_for"]),
        fence=info["fence"],
        cancel_flag=flag,
        renew=renew,
    )
    threading.Thread(target=listen, name="tickwork-lifeline", daemon=True).start()
    args, kwargs = json.loads(args_json), json.loads(kwargs_json)
    try:
        if inspect.iscoroutinefunction(func):
            value = asyncio.run(_run_async(func, ctx, args, kwargs, flag))
        else:
            signal.signal(signal.SIGTERM, _raise_cancelled(flag))
            value = func(ctx, *args, **kwargs)
    except BaseException as exc:  # reported to the node, whatever it is
        send({"kind": "error", "type": type(exc).__qualname__, "message": str(exc), "traceback": _format(exc)})
        return
    problem = json_problem(value)
    if problem is not None:
        send({"kind": "result", "value": None, "note": f"result not stored: {problem}"})
    else:
        send({"kind": "result", "value": value})


def _raise_cancelled(flag: _Flag) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        first = not flag.is_set()
        flag.set()
        if first:  # once: a second SIGTERM must not interrupt the task's clean-up
            raise Cancelled("the run was cancelled (SIGTERM)")

    return handler


async def _run_async(
    func: Callable[..., Any], ctx: Context, args: list[Any], kwargs: dict[str, Any], flag: _Flag
) -> Any:
    task = asyncio.current_task()
    assert task is not None

    def cancel() -> None:
        flag.set()
        task.cancel()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, cancel)
    return await func(ctx, *args, **kwargs)


def _format(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))
