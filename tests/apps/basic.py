"""A real application module for worker-process tests (``tests.apps.basic:app``).

Tasks append one line per run to ``$TICKWORK_TEST_RECORDS/<pid>.log`` (one O_APPEND
write per line, so lines from concurrent runs never interleave)."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import re
import subprocess
import time

import redis

from tests.apps.recording import node_settings, record
from tickwork import App, Context

app = App(
    **node_settings(),
    webhook_url=os.environ.get("TICKWORK_TEST_WEBHOOK") or None,
    webhook_secret=os.environ.get("TICKWORK_TEST_WEBHOOK_SECRET") or None,
    redis_url=os.environ.get("TICKWORK_TEST_REDIS_URL") or None,
    redis_prefix=os.environ.get("TICKWORK_TEST_REDIS_PREFIX") or "tickwork:",
    redis_mode=os.environ.get("TICKWORK_TEST_REDIS_MODE") or "best_effort",
)


@app.task(name="test.record")
def record_task(ctx: Context) -> None:
    record(ctx)


@app.task(name="test.fail")
def fail_task(ctx: Context) -> None:
    record(ctx)
    raise RuntimeError(f"failure on attempt {ctx.attempt}")


@app.task(name="test.slow")
def slow_task(ctx: Context, seconds: float) -> str:
    record(ctx, phase="start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)  # the task's own work, not a test wait
    record(ctx, phase="end")
    return "done"


@app.task(name="test.async_record")
async def async_record(ctx: Context) -> int:
    await asyncio.sleep(0)
    record(ctx)
    return ctx.attempt


@app.task(name="test.until_cancelled")
def until_cancelled(ctx: Context) -> str:
    """A thread task that checks ``ctx.cancelled`` in a loop."""
    record(ctx, phase="start")
    while not ctx.cancelled:
        time.sleep(0.01)
    record(ctx, phase="saw_cancel")
    return "stopped"


@app.task(name="test.async_wait")
async def async_wait(ctx: Context) -> None:
    """An async task that awaits something that never comes."""
    record(ctx, phase="start")
    await asyncio.sleep(3600)


@app.task(name="test.process_record", isolation="process")
def process_record(ctx: Context, value: object = None) -> dict[str, object]:
    record(ctx, phase="start", fence=ctx.fence, renewed=ctx.heartbeat())
    return {"pid": os.getpid(), "value": value}


@app.task(name="test.process_fail", isolation="process")
def process_fail(ctx: Context) -> None:
    record(ctx, phase="start")
    raise ValueError(f"failed in pid {os.getpid()}")


@app.task(name="test.busy_process", isolation="process")
def busy_process(ctx: Context) -> None:
    """A busy loop that never checks ``ctx.cancelled``: only a signal stops it."""
    record(ctx, phase="start")
    while True:
        pass


@app.task(name="test.stubborn_process", isolation="process", kill_grace=1.0)
def stubborn_process(ctx: Context) -> None:
    """Swallows SIGTERM's Cancelled and goes on: only SIGKILL stops it."""
    record(ctx, phase="start")
    while True:
        try:
            while True:
                pass
        except Exception:  # tickwork.Cancelled: this task refuses to stop
            record(ctx, phase="ignored_sigterm")
            continue


@app.task(name="test.overrun", max_runtime=1.0)
def overrun(ctx: Context) -> None:
    """Runs until cancelled: its own node stops it at max_runtime."""
    record(ctx, phase="start")
    while not ctx.cancelled:
        time.sleep(0.01)
    record(ctx, phase="saw_cancel")


@app.task(name="test.overrun_stuck", max_runtime=1.0)
def overrun_stuck(ctx: Context, seconds: float) -> None:
    """Ignores cancellation (a call that never returns, in effect) while its node keeps
    renewing the lease: only another node's reconciler can end the run."""
    record(ctx, phase="start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)  # the task's own work
    record(ctx, phase="end")


@functools.cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["TICKWORK_TEST_REDIS_URL"], socket_timeout=0.5, socket_connect_timeout=0.5)


@app.task(name="test.record_locked")
def record_locked(ctx: Context, hold: float = 0.0) -> None:
    """Records whether this run's Redis lock is held while it runs (None: Redis down)."""
    key = f"{os.environ['TICKWORK_TEST_REDIS_PREFIX']}lock:task:{ctx.task_id}"
    try:
        locked: bool | None = _redis().exists(key) == 1
    except redis.RedisError:
        locked = None
    record(ctx, locked=locked)
    time.sleep(hold)  # the task's own work


@app.task(name="test.c_stuck_process", isolation="process")
def c_stuck_process(ctx: Context) -> None:
    """Stuck inside one C call that holds the GIL (catastrophic regex backtracking)."""
    record(ctx, phase="start")
    re.match(r"(a+)+$", "a" * 64 + "b")


@app.task(name="test.spawning_process", isolation="process")
def spawning_process(ctx: Context) -> None:
    """Starts a process of its own, then waits: cancelling the run must stop both."""
    child = subprocess.Popen(["sleep", "1000"])
    record(ctx, phase="start", grandchild=child.pid, group=os.getpgid(0))
    child.wait()


@app.task(name="test.async_cleanup_process", isolation="process", kill_grace=5.0)
async def async_cleanup_process(ctx: Context) -> None:
    """An async process task whose clean-up takes longer than a heartbeat."""
    record(ctx, phase="start")
    try:
        await asyncio.sleep(3600)
    finally:
        await asyncio.sleep(1.5)
        record(ctx, phase="cleaned")


@app.task(name="test.pool_process", isolation="process")
def pool_process(ctx: Context) -> list[int]:
    """A process task may use multiprocessing itself: with a start method that does not
    fork the child's threads (its link to the node runs on one), as the README says."""
    with multiprocessing.get_context("forkserver").Pool(2) as pool:
        return pool.map(abs, [-1, -2, 3])
