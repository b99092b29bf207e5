"""What the test apps' tasks record: one JSON line per event in
``$TICKWORK_TEST_RECORDS/<pid>.log``, written with one O_APPEND write, so that lines from
concurrent runs never interleave."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tickwork import Context


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
