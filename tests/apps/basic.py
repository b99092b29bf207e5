"""A real application module for worker-process tests (``tests.apps.basic:app``).

Tasks append one line per run to ``$TICKWORK_TEST_RECORDS/<pid>.log`` (one O_APPEND
write per line, so lines from concurrent runs never interleave)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from tickwork import App, Context

app = App(
    lease=float(os.environ.get("TICKWORK_TEST_LEASE", "5")),
    heartbeat=float(os.environ.get("TICKWORK_TEST_HEARTBEAT", "0.5")),
    poll_interval=float(os.environ.get("TICKWORK_TEST_POLL", "0.2")),
    shutdown_grace=float(os.environ.get("TICKWORK_TEST_GRACE", "10")),
    claim=os.environ.get("TICKWORK_TEST_CLAIM") or None,
    webhook_url=os.environ.get("TICKWORK_TEST_WEBHOOK") or None,
    webhook_secret=os.environ.get("TICKWORK_TEST_WEBHOOK_SECRET") or None,
)


def record(ctx: Context, **extra: object) -> None:
    folder = Path(os.environ["TICKWORK_TEST_RECORDS"])
    line = json.dumps(
        {
            "task_id": ctx.task_id,
            "execution_id": ctx.execution_id,
            "attempt": ctx.attempt,
            "scheduled_for": ctx.scheduled_for.isoformat(),
            "at": time.time(),
            "pid": os.getpid(),
            **extra,
        }
    )
    fd = os.open(folder / f"{os.getpid()}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


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
