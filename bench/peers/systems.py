"""The systems compared: how each stores the tasks of a workload (in the harness's own
process, before any worker starts) and which due time it really stored for each."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.peers import bare

PGQUEUER_CHUNK = 5000


@dataclass(frozen=True)
class System:
    name: str
    kind: str  # "tickwork", "pgqueuer", "ceiling" or "bare"
    batch_size: int = 10
    cli: bool = False
    """tickwork's worker started by its CLI (``python -m tickwork.cli worker APP``), not by
    ``run_worker`` from Python: what a deployment usually runs."""

    def command(self, url: str, sink: Path) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of one worker process of this system."""
        if self.cli:
            # -m (the `tickwork` script's own start), so that a checkout run from a worktree
            # starts its own tickwork (python -m puts the working directory first)
            argv = [sys.executable, "-m", "tickwork.cli", "worker", "bench.peers.cli_app:app", "--concurrency", "16"]
            return argv, {**os.environ, "TICKWORK_BENCH_URL": url, "TICKWORK_BENCH_SINK": str(sink)}
        return [sys.executable, "-m", "bench.peers.worker", self.name, url, str(sink)], dict(os.environ)

    def enqueue(self, url: str, due: list[datetime]) -> tuple[float, dict[int, float]]:
        """Stores task ``i`` due at ``due[i]``; the seconds that took and each task's due
        time as stored (epoch seconds)."""
        if self.kind == "pgqueuer":
            return asyncio.run(_pgqueuer_enqueue(url, due))
        if self.kind == "bare":
            return bare.store(url, due)
        from bench.tickwork_bench import CHUNK, make_app  # not at the top: workers parse names too

        app = make_app(url, "skip_locked", None)
        app.stats()  # the schema migrated and a connection open: setup, not enqueue
        started = time.perf_counter()
        for i in range(0, len(due), CHUNK):
            app.schedule_many(
                [{"task": "bench.noop", "kwargs": {"bid": i + j}, "at": t} for j, t in enumerate(due[i : i + CHUNK])]
            )
        elapsed = time.perf_counter() - started
        app.close()
        return elapsed, {i: t.timestamp() for i, t in enumerate(due)}


def parse_system(name: str) -> System:
    kind, _, option = name.partition(":")
    if kind not in ("tickwork", "pgqueuer", "ceiling", "bare"):
        raise SystemExit(f"unknown system {name!r}: tickwork[:cli], pgqueuer[:batch_size=N], ceiling or bare")
    if not option:
        return System(name, kind)
    if kind == "tickwork" and option == "cli":
        return System(name, kind, cli=True)
    key, _, value = option.partition("=")
    if kind != "pgqueuer" or key != "batch_size" or not value.isdigit() or int(value) < 1:
        raise SystemExit(f"unknown option {option!r} of {kind} (tickwork takes cli, pgqueuer batch_size=N, N >= 1)")
    return System(name, kind, int(value))


async def _pgqueuer_enqueue(url: str, due: list[datetime]) -> tuple[float, dict[int, float]]:
    """PgQueuer's own bulk enqueue (lists of entrypoints, payloads, priorities, delays).
    Its due time is relative (``execute_after``, added to the database's clock), so the
    times it stored are read back: lateness is measured from them, not from the asked ones."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(connection))
        await queries.install()
        started = time.perf_counter()
        for i in range(0, len(due), PGQUEUER_CHUNK):
            chunk = due[i : i + PGQUEUER_CHUNK]
            now = datetime.now(UTC)
            await queries.enqueue(
                ["noop"] * len(chunk),
                [str(i + j).encode() for j in range(len(chunk))],
                [0] * len(chunk),
                [max(t - now, timedelta(0)) for t in chunk],
            )
        elapsed = time.perf_counter() - started
        rows = await connection.fetch("SELECT payload, execute_after FROM pgqueuer")
        return elapsed, {int(r["payload"]): r["execute_after"].timestamp() for r in rows}
    finally:
        await connection.close()
