"""Runs a task in a child process: the one way to stop code that never checks
``ctx.cancelled`` (a busy loop, a blocking C call) without stopping the node.

The node's run thread supervises the child. Cancellation (a user's cancel, a timeout,
a lost lease, shutdown) sends SIGTERM, once, to the child's process group — the child
and whatever it started — which in the child sets ``ctx.cancelled`` and raises
``Cancelled`` (or cancels the coroutine of an ``async def`` task) so its ``finally``
blocks run; a group still alive ``kill_grace`` seconds later gets SIGKILL. The child
leads a process group of its own, so signals meant for the node's group (Ctrl-C, a
shell's or a supervisor's group stop) reach the node, which stops its runs in order.

Only JSON crosses the pipe after start: arguments go in as the stored JSON text, the
result and errors come back as JSON. The function itself travels by reference (module
and qualified name), which is how the child finds the registered function; nothing
read from the store decides what is imported.

A child must not outlive its node: a node killed with SIGKILL cannot stop it. Each
child forks a tiny watchdog process before running the task; it holds the read end of
a lifeline pipe whose only write end is the node's, and kills the child's group when
that pipe closes. A process of its own, so a task stuck in C code holding the GIL
cannot keep it from acting.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import os
import queue
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from tickwork.codec import dumps, json_problem
from tickwork.context import CancelFlag, Context
from tickwork.errors import Cancelled, InvalidInput, TickworkError
from tickwork.model import ErrorInfo

if TYPE_CHECKING:  # imported where used (_context): most nodes have no process task
    import multiprocessing.connection
    import multiprocessing.context
    import multiprocessing.process


class Stoppable(Protocol):
    """What the supervisor needs of a run: whether and why it was cancelled, and where
    to hook the signal that stops its child (the node's Run; tests pass their own)."""

    @property
    def cancel_flag(self) -> CancelFlag: ...

    @property
    def cancel_reason(self) -> object | None: ...

    def bind_cancel(self, on_cancel: Callable[[], None] | None) -> None: ...


@functools.cache
def _context() -> multiprocessing.context.BaseContext:
    """forkserver: children fork from a small single-threaded server, never from the node
    (whose threads hold locks a fork would copy mid-use), and start faster than spawn."""
    import multiprocessing  # here: a node without process tasks never needs it (~4 ms)

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


# How often the supervisor looks at the cancel flag while the child is quiet.
SUPERVISE_TICK_S = 0.05
# How often a watchdog checks that the child it guards is still there.
WATCHDOG_TICK_S = 0.5
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


def prepare(funcs: Iterable[Callable[..., Any]]) -> None:
    """Check that each process task's function can be found by name in a child, and
    have the fork server import their modules once, not every child on every run.

    Call before the first run (the fork server starts then); a function that is not
    reachable as ``module.qualname`` (wrapped by another decorator, say) fails here,
    with its name, instead of failing every run."""
    modules: set[str] = set()
    for func in funcs:
        module_name, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", "")
        found: Any = sys.modules.get(module_name or "")
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if found is not func:
            raise InvalidInput(
                "isolation",
                "process",
                f"{module_name}.{qualname} does not name the registered function (another decorator "
                "wraps it, or it is not at module level): a child process could not find it",
            )
        if module_name and module_name != "__main__":
            modules.add(module_name)
    if modules and _context().get_start_method() == "forkserver":
        _context().set_forkserver_preload(["tickwork.node.isolation", *sorted(modules)])


def run_in_process(
    run: Stoppable,
    ctx: Context,
    func: Callable[..., Any],
    arguments: tuple[list[Any], dict[str, Any]],
    kill_grace: float,
    max_result_bytes: int,
    *,
    context: bool,
) -> tuple[Any, str | None]:
    """Run ``func`` in a child process; return its (JSON) result and a note on it.
    ``ctx.heartbeat()`` in the child renews the lease through the node (``ctx`` here);
    with ``context`` False the child calls ``func(*args, **kwargs)``, without one.

    Raises ``ChildFailed`` for an error in the task, ``ChildCancelled`` when the run was
    cancelled and the child stopped."""
    mp = _context()
    parent_end, child_end = mp.Pipe(duplex=True)
    lifeline_read, lifeline_write = mp.Pipe(duplex=False)
    args, kwargs = arguments
    info = {
        "task_id": ctx.task_id,
        "task_name": ctx.task_name,
        "execution_id": ctx.execution_id,
        "attempt": ctx.attempt,
        "scheduled_for": ctx.scheduled_for.isoformat(),
        "fence": ctx.fence,
        "max_result_bytes": max_result_bytes,
        "context": context,
    }
    # Not a daemon: a task may start processes of its own (a Pool); the supervisor, the
    # watchdog and the finally below make sure no child is left behind.
    process = mp.Process(  # type: ignore[attr-defined]  # typeshed: BaseContext lacks Process
        target=_child_main,
        args=(child_end, lifeline_read, func, dumps(args), dumps(kwargs), dumps(info)),
        name=f"tickwork-task-{ctx.task_id}",
    )
    process.start()
    child_end.close()
    lifeline_read.close()
    try:
        run.bind_cancel(lambda: _signal_group(process, signal.SIGTERM))
        return _Supervisor(run, process, parent_end, ctx.heartbeat, kill_grace).watch()
    finally:
        run.bind_cancel(None)
        parent_end.close()
        _signal_group(process, signal.SIGKILL)  # the task's own leftovers, or the child after an error of ours
        process.join(timeout=5)
        lifeline_write.close()


def _signal_group(process: multiprocessing.process.BaseProcess, signum: int) -> None:
    """Signal the child's process group; before the child made it, the child alone."""
    pid = process.pid
    if pid is None:
        return
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            if process.exitcode is None:
                os.kill(pid, signum)


class _Supervisor:
    """Waits for the child, answers its lease renewals, escalates to SIGKILL."""

    def __init__(
        self,
        run: Stoppable,
        process: multiprocessing.process.BaseProcess,
        conn: multiprocessing.connection.Connection,
        renew: Callable[[], bool],
        kill_grace: float,
    ) -> None:
        self.run, self.process, self.conn = run, process, conn
        self.renew, self.kill_grace = renew, kill_grace
        self.send_lock = threading.Lock()

    def watch(self) -> tuple[Any, str | None]:
        from multiprocessing.connection import wait

        message: dict[str, Any] | None = None
        kill_at: float | None = None
        pipe_open = True
        conn, process = self.conn, self.process
        while True:
            waitables: list[Any] = [process.sentinel]
            if pipe_open:
                waitables.append(conn)
            ready = wait(waitables, timeout=SUPERVISE_TICK_S)
            if conn in ready:
                try:
                    received = json.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    pipe_open = False
                else:
                    if received["kind"] == "renew":
                        # Off this loop: a renewal stuck on the database must not hold up a SIGKILL.
                        threading.Thread(target=self._renew, name="tickwork-child-renew", daemon=True).start()
                    else:
                        message = received
            if self.run.cancel_flag.is_set() and process.exitcode is None:
                if kill_at is None:
                    kill_at = time.monotonic() + self.kill_grace
                elif time.monotonic() >= kill_at:
                    _signal_group(process, signal.SIGKILL)
            if process.sentinel in ready and not (pipe_open and conn.poll()):
                break
        process.join()
        return self._outcome(message)

    def _outcome(self, message: dict[str, Any] | None) -> tuple[Any, str | None]:
        if message is not None and message["kind"] == "result":
            return message.get("value"), message.get("note")
        if message is not None and message["kind"] == "error":
            raise ChildFailed(ErrorInfo(message["type"], message["message"], message["traceback"]))
        if self.run.cancel_reason is not None:
            raise ChildCancelled(f"child process stopped (exit code {self.process.exitcode})")
        raise ChildFailed(
            ErrorInfo(
                "ProcessDied", f"the task's process ended with exit code {self.process.exitcode} before returning"
            )
        )

    def _renew(self) -> None:
        try:
            reply: dict[str, Any] = {"kind": "renewed", "ok": bool(self.renew())}
        except Exception as exc:
            reply = {"kind": "renewed", "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        with self.send_lock, contextlib.suppress(OSError):  # the child is gone; the loop sees it exit
            self.conn.send_bytes(json.dumps(reply).encode())


# -- in the child ------------------------------------------------------------------


class _NodeLink:
    """The child's end of the pipe: messages to the node, and the replies to renewals,
    read by a thread of their own so that the task's thread only waits when it renews."""

    def __init__(self, conn: multiprocessing.connection.Connection, flag: CancelFlag) -> None:
        self.conn, self.flag = conn, flag
        self._replies: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._send_lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._listen, name="tickwork-node-link", daemon=True).start()

    def send(self, message: dict[str, Any]) -> None:
        with self._send_lock:
            self.conn.send_bytes(json.dumps(message).encode())

    def renew(self) -> bool:
        """``ctx.heartbeat()`` in the child: the node renews the lease and answers."""
        self.send({"kind": "renew"})
        reply = self._replies.get()
        if "error" in reply:
            raise TickworkError(f"lease renewal failed: {reply['error']}")
        if not reply["ok"]:
            self.flag.set()
        return bool(reply["ok"])

    def _listen(self) -> None:
        while True:
            try:
                received = json.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                os._exit(ORPHANED_EXIT)  # the node is gone (the watchdog would see to it too)
            if received.get("kind") == "renewed":
                self._replies.put(received)


def _child_main(
    conn: multiprocessing.connection.Connection,
    lifeline: multiprocessing.connection.Connection,
    func: Callable[..., Any],
    args_json: str,
    kwargs_json: str,
    info_json: str,
) -> None:
    os.setpgid(0, 0)  # a group of our own: the node signals it, the node's group signals miss it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the node, which stops its runs in order
    _start_watchdog(lifeline)
    lifeline.close()
    flag = CancelFlag()
    link = _NodeLink(conn, flag)
    info = json.loads(info_json)
    ctx = Context(
        task_id=info["task_id"],
        task_name=info["task_name"],
        execution_id=info["execution_id"],
        attempt=info["attempt"],
        scheduled_for=datetime.fromisoformat(info["scheduled_for"]),
        fence=info["fence"],
        cancel_flag=flag,
        renew=link.renew,
    )
    link.start()
    args, kwargs = json.loads(args_json), json.loads(kwargs_json)
    if info["context"]:
        args.insert(0, ctx)
    try:
        if inspect.iscoroutinefunction(func):
            value = asyncio.run(_run_async(func, args, kwargs, flag))
        else:
            signal.signal(signal.SIGTERM, _raise_cancelled(flag))
            value = func(*args, **kwargs)
    except BaseException as exc:  # reported to the node, whatever it is
        message = {"kind": "error", "type": type(exc).__qualname__, "message": str(exc), "traceback": _format(exc)}
    else:
        message = _result_message(value, int(info["max_result_bytes"]))
    link.send(message)
    # The run is over: threads the task left behind must not keep it going.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _result_message(value: Any, max_bytes: int) -> dict[str, Any]:
    """The result as the node will store it, judged here so a huge one never crosses."""
    problem = json_problem(value)
    if problem is not None:
        return {"kind": "result", "value": None, "note": f"result not stored: {problem}"}
    try:
        size = len(dumps(value).encode())
    except (TypeError, ValueError, RecursionError) as exc:
        return {"kind": "result", "value": None, "note": f"result not stored: {exc}"}
    if size > max_bytes:
        return {"kind": "result", "value": None, "note": f"result not stored: over {max_bytes} bytes"}
    return {"kind": "result", "value": value}


def _start_watchdog(lifeline: multiprocessing.connection.Connection) -> None:
    """Fork the process that kills this child's group when the node's end of the
    lifeline closes (the node died), and ends by itself when the child is gone."""
    group, guarded = os.getpgid(0), os.getpid()
    if os.fork() != 0:
        return
    try:  # the watchdog: never runs task code, never returns
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a cancel's SIGTERM is for the task
        fd = lifeline.fileno()
        while os.getppid() == guarded:
            readable, _, _ = select.select([fd], [], [], WATCHDOG_TICK_S)
            if readable and not os.read(fd, 1):
                os.killpg(group, signal.SIGKILL)  # the node is gone: so is its run
    finally:
        os._exit(0)


def _raise_cancelled(flag: CancelFlag) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        first = not flag.is_set()
        flag.set()
        if first:  # once: a second SIGTERM must not interrupt the task's clean-up
            raise Cancelled("the run was cancelled (SIGTERM)")

    return handler


async def _run_async(func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], flag: CancelFlag) -> Any:
    task = asyncio.current_task()
    assert task is not None

    def cancel() -> None:
        if not flag.is_set():  # once: a second SIGTERM must not cut the clean-up short
            flag.set()
            task.cancel()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, cancel)
    return await func(*args, **kwargs)


def _format(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))
