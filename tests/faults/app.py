"""The application the fault suite's nodes run (``tests.faults.app:app``).

Every run records itself: one JSON line per phase ("start", then "end" when its work is
done, or "stopped" when it saw ``ctx.cancelled`` first) appended to
``$FAULTS_RECORDS/<pid>.log`` with one O_APPEND write, keyed by task id, slot and a run
uuid of its own. Times are CLOCK_MONOTONIC, which every process on the host shares and
libfaketime leaves alone (``FAKETIME_DONT_FAKE_MONOTONIC=1``), so runs on nodes with
skewed wall clocks compare. The suite counts runs from these lines, never from
tickwork's own log.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tickwork import App, Context

app = App(
    lease=float(os.environ.get("FAULTS_LEASE", "5")),
    heartbeat=float(os.environ.get("FAULTS_HEARTBEAT", "0.5")),
    poll_interval=float(os.environ.get("FAULTS_POLL", "0.2")),
    shutdown_grace=float(os.environ.get("FAULTS_GRACE", "5")),
    claim=os.environ.get("FAULTS_CLAIM") or None,
    redis_url=os.environ.get("FAULTS_REDIS_URL") or None,
    redis_prefix=os.environ.get("FAULTS_REDIS_PREFIX") or "tickwork:",
    redis_mode=os.environ.get("FAULTS_REDIS_MODE") or "best_effort",
)


class Trace:
    """The lines of one run."""

    def __init__(self, ctx: Context) -> None:
        self.fields = {
            "run": uuid.uuid4().hex,
            "task": ctx.task_id,
            "slot": ctx.scheduled_for.isoformat(),
            "attempt": ctx.attempt,
            "execution": ctx.execution_id,
            "fence": ctx.fence,
            "node": os.environ.get("FAULTS_NODE", "?"),
            "pid": os.getpid(),
        }

    def write(self, phase: str, **extra: Any) -> None:
        line = json.dumps({**self.fields, "phase": phase, "mono": time.monotonic(), "wall": time.time(), **extra})
        folder = Path(os.environ["FAULTS_RECORDS"])
        fd = os.open(folder / f"{os.getpid()}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


def _work(ctx: Context, seconds: float) -> str:
    """Record the start, work ``seconds`` (stopping early when cancelled), record the end."""
    rec = Trace(ctx)
    rec.write("start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.cancelled:
            rec.write("stopped")
            return "stopped"
        time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))  # the task's own work
    if ctx.cancelled:
        rec.write("stopped")
        return "stopped"
    rec.write("end")
    return "done"


@app.task(name="faults.work")
def work(ctx: Context, seconds: float = 0.0) -> str:
    return _work(ctx, seconds)


@app.task(name="faults.tick")
def tick(ctx: Context, seconds: float = 0.05) -> str:
    """The recurring task of the suite's workloads."""
    return _work(ctx, seconds)


@app.task(name="faults.locked_work")
def locked_work(ctx: Context, seconds: float = 0.0) -> str:
    """As faults.work; scheduled with a Redis lock in the Redis cases."""
    return _work(ctx, seconds)


# -- task code that misbehaves ---------------------------------------------------------


class Boom(BaseException):
    """A BaseException that is neither SystemExit nor KeyboardInterrupt."""


RAISES: dict[str, type[BaseException]] = {
    "SystemExit": SystemExit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "Boom": Boom,
}


def _raise(ctx: Context, kind: str) -> None:
    rec = Trace(ctx)
    rec.write("start")
    rec.write("end")  # its work is done; raising is all that is left
    raise RAISES[kind](f"{kind} raised by task {ctx.task_id}")


@app.task(name="faults.raise")
def raise_base(ctx: Context, kind: str) -> None:
    _raise(ctx, kind)


@app.task(name="faults.raise_async")
async def raise_base_async(ctx: Context, kind: str) -> None:
    await asyncio.sleep(0)
    _raise(ctx, kind)


@app.task(name="faults.raise_process", isolation="process")
def raise_base_process(ctx: Context, kind: str) -> None:
    _raise(ctx, kind)


@app.task(name="faults.os_exit", max_lost=1, retry_backoff=0.01)
def os_exit(ctx: Context, code: int = 3) -> None:
    rec = Trace(ctx)
    rec.write("start")
    os._exit(code)


@app.task(name="faults.os_exit_process", isolation="process")
def os_exit_process(ctx: Context, code: int = 3) -> None:
    rec = Trace(ctx)
    rec.write("start")
    os._exit(code)


def _forever() -> None:
    while True:
        time.sleep(0.5)  # a leaked thread's own loop


@app.task(name="faults.leak_thread")
def leak_thread(ctx: Context) -> str:
    """Leaves a non-daemon thread running behind it."""
    rec = Trace(ctx)
    rec.write("start")
    thread = threading.Thread(target=_forever, name=f"leaked-by-task-{ctx.task_id}", daemon=False)
    thread.start()
    rec.write("end", thread=thread.name)
    return "leaked"


@app.task(name="faults.non_json")
def non_json(ctx: Context) -> Any:
    rec = Trace(ctx)
    rec.write("start")
    rec.write("end")
    return {"when": object(), "set": {1, 2}}


BIG = 10 * 1024 * 1024


@app.task(name="faults.big_result")
def big_result(ctx: Context) -> str:
    rec = Trace(ctx)
    rec.write("start")
    rec.write("end")
    return "x" * BIG


@app.task(name="faults.big_result_process", isolation="process")
def big_result_process(ctx: Context) -> str:
    rec = Trace(ctx)
    rec.write("start")
    rec.write("end")
    return "x" * BIG


@app.task(name="faults.segfault", isolation="process")
def segfault(ctx: Context) -> None:
    rec = Trace(ctx)
    rec.write("start")
    ctypes.string_at(0)  # reads address 0: SIGSEGV
