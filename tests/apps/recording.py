"""What the test apps share: their node settings from ``TICKWORK_TEST_*``, a thread dump
on SIGUSR1, and what their tasks record (one JSON line per event in
``$TICKWORK_TEST_RECORDS/<pid>.log``, written with one O_APPEND write, so that lines from
concurrent runs never interleave)."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from tickwork import Context

# A worker that does not stop in time is asked (SIGUSR1) where its threads are (tests/workers.py).
faulthandler.register(signal.SIGUSR1, all_threads=True)


def node_settings() -> dict[str, Any]:
    """The App settings every test app takes from its environment."""
    return {
        "lease": float(os.environ.get("TICKWORK_TEST_LEASE", "5")),
        "heartbeat": float(os.environ.get("TICKWORK_TEST_HEARTBEAT", "0.5")),
        "poll_interval": float(os.environ.get("TICKWORK_TEST_POLL", "0.2")),
        "shutdown_grace": float(os.environ.get("TICKWORK_TEST_GRACE", "10")),
        "claim": os.environ.get("TICKWORK_TEST_CLAIM") or None,
    }


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
