"""The workloads, the same protocol for every system: a fresh database, every task stored
first, 2 worker processes launched, the run over when every task has started (or a
deadline passed: then the figures say how many ran)."""

from __future__ import annotations

import contextlib
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.peers.systems import System
from bench.pg_cpu import database_cpu
from bench.sparse import cpu_seconds
from bench.tickwork_bench import ROOT, Run, drop, fresh_store, lateness_ms, pct

WORKERS = 2


def _launch(run: Run, system: System, count: int = WORKERS) -> None:
    for _ in range(count):
        argv, env = system.command(run.store.url, run.sink)
        run.procs.append(subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.DEVNULL))


def _cpu_s(run: Run) -> float:
    """User + system CPU of the worker processes so far (read before they are stopped;
    a process already gone counts nothing)."""
    total = 0.0
    for p in run.procs:
        with contextlib.suppress(OSError, IndexError):
            total += cpu_seconds(p.pid)
    return total


def _ran(starts: list[tuple[int, float]]) -> int:
    return len({b for b, _ in starts})


def w1(system: System, folder: Path, n: int) -> dict[str, float]:
    """Throughput: n tasks already due. Executions per second from the workers' launch
    to the last start (and, steady, from the first start), the workers' CPU per task,
    and the rate the tasks were stored at."""
    store = fresh_store("skip_locked", folder)
    try:
        took, _ = system.enqueue(store.url, [datetime.now(UTC) - timedelta(seconds=1)] * n)
        run = Run(store, folder)
        database_before = database_cpu()
        launched = time.time()
        _launch(run, system)
        starts = run.wait_for(n)
        cpu = _cpu_s(run)
        database_after = database_cpu()
        run.stop()
        times = sorted(t for _, t in starts)
        figures = {
            "ran": _ran(starts),
            "exec_s": _ran(starts) / (times[-1] - launched),
            "steady": (len(times) - 1) / (times[-1] - times[0]),
            "cpu_ms": 1000 * cpu / n,
            "enqueue_s": n / took,
        }
        if database_before is not None and database_after is not None:
            figures["db_cpu_ms"] = 1000 * (database_after - database_before) / n
        return figures
    finally:
        drop(store)


def w2(system: System, folder: Path, n: int, span: float = 20.0) -> dict[str, float]:
    """Lateness: n tasks due at distinct times spread evenly over ``span`` seconds; start
    minus the due time each system stored, and the workers' CPU for the whole run."""
    store = fresh_store("skip_locked", folder)
    try:
        first = datetime.now(UTC) + timedelta(seconds=_lead(n))
        _, due = system.enqueue(store.url, [first + timedelta(seconds=span * i / n) for i in range(n)])
        run = Run(store, folder)
        _launch(run, system)
        starts = run.wait_for(n, timeout=span + 60 + _lead(n))
        cpu = _cpu_s(run)
        run.stop()
        late = lateness_ms(starts, due)
        return {"ran": _ran(starts), **_percentiles(late), "cpu_s": cpu}
    finally:
        drop(store)


def w3(system: System, folder: Path, n: int) -> dict[str, float]:
    """Herd: n tasks due at one instant; the time from it to the last start, lateness,
    and the largest worker's peak RSS."""
    store = fresh_store("skip_locked", folder)
    try:
        instant = datetime.now(UTC) + timedelta(seconds=_lead(n))
        _, due = system.enqueue(store.url, [instant] * n)
        run = Run(store, folder)
        _launch(run, system)
        starts = run.wait_for(n, timeout=60 + _lead(n))
        rss = run.peak_rss_mb()
        run.stop()
        late = lateness_ms(starts, due)
        return {"ran": _ran(starts), "drain_s": late[-1] / 1000, **_percentiles(late), "rss_mb": max(rss, default=0)}
    finally:
        drop(store)


def _lead(n: int) -> float:
    """Seconds before the first due time: storing n tasks (the slowest system here stores
    about 3,000 a second on a slow machine) and starting the workers come first."""
    return 4.0 + n / 3000


def _percentiles(late: list[float]) -> dict[str, float]:
    return {"p50": pct(late, 50), "p95": pct(late, 95), "p99": pct(late, 99), "max": late[-1]}
