"""The CPU this machine's PostgreSQL has spent so far, read from ``/proc``: what the
benchmarks set beside a node's own CPU (a run's cost is as much the database's)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def database_cpu() -> float | None:
    """CPU seconds of this machine's PostgreSQL so far: every ``postgres`` process's own
    time, plus what each has reaped of its ended children (a backend ends with its
    connection). None if no PostgreSQL runs here (its CPU is then not this machine's to
    read). A backend in the middle of ending shows in neither its own time nor its
    parent's (its ``/proc`` entry already fails to read, or it waits to be reaped), so
    the reading is only taken once two in a row, a few milliseconds apart, find the same
    processes, all readable and none ended, and the same reaped time."""
    previous = None
    for _ in range(400):
        reading = _postgres_ticks()
        if reading is not None and not reading:
            return None
        if reading is not None and previous is not None and _same_processes(previous, reading):
            return sum(own + reaped for own, reaped in reading.values()) / os.sysconf("SC_CLK_TCK")
        previous = reading
        time.sleep(0.005)
    raise SystemExit("PostgreSQL's processes kept changing while their CPU was read")


def _same_processes(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> bool:
    return {p: r for p, (_, r) in before.items()} == {p: r for p, (_, r) in after.items()}


def _postgres_ticks() -> dict[int, tuple[int, int]] | None:
    """Per ``postgres`` process: its own CPU ticks, and its reaped children's. None when
    one could not be read whole or has ended unreaped (see ``database_cpu``)."""
    ticks = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() not in ("postgres", "postmaster"):
                continue
            state, *fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            own, reaped = int(fields[10]) + int(fields[11]), int(fields[12]) + int(fields[13])
        except (OSError, ValueError, IndexError):
            return None  # ending now (or not ours: read again anyway)
        if state == "Z":
            return None
        ticks[int(proc.name)] = (own, reaped)  # utime+stime, cutime+cstime
    return ticks
