"""What the dashboard's insights read, computed in the database: per task name
statistics, runs per minute by status, the runs page's filtered list and which tasks
each node is running now (queries in insights.sql and postgres_insights.sql).

Every read is bounded: it walks at most ``scan`` of the newest executions (by id, the
way ``stats()`` counts recent runs) before it filters and aggregates, and says whether
it reached that cap (``truncated``: older runs were not looked at). No row list of
unbounded length reaches Python; percentiles are computed by the database.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta

from tickwork.errors import InvalidInput
from tickwork.model import Execution, ExecutionStatus
from tickwork.store.dialect import Dialect
from tickwork.store.rows import Decoder

MAX_NAMES = 200
"""Task names a ``name_stats`` report lists at most (the busiest first)."""
FAILED_STATUSES = ("FAILED", "TIMED_OUT")


@dataclasses.dataclass(frozen=True, slots=True)
class NameStats:
    """The runs of one task name that ended within a window. SKIPPED records are no
    runs; a run's duration is ``finished_at - started_at``, its lateness ``started_at -
    scheduled_for`` (both in seconds; percentiles interpolated as ``percentile_cont``)."""

    name: str
    runs: int
    succeeded: int
    """COMPLETED runs."""
    failed: int
    """FAILED or TIMED_OUT runs (the rest of ``runs`` were CANCELLED)."""
    last_success: datetime | None
    """When the newest COMPLETED run of the window ended (None: none in it)."""
    p50_duration: float | None
    p95_duration: float | None
    p50_lateness: float | None
    p95_lateness: float | None

    @property
    def success_rate(self) -> float | None:
        return None if self.runs == 0 else self.succeeded / self.runs


@dataclasses.dataclass(frozen=True, slots=True)
class NameStatsReport:
    window_s: float
    names: list[NameStats]
    truncated: bool
    """The walk stopped at its cap: runs older than the newest ``scan`` were not counted."""


@dataclasses.dataclass(frozen=True, slots=True)
class Throughput:
    """Runs that ended per bucket of ``bucket_s`` seconds, by status, oldest bucket first."""

    start: datetime
    bucket_s: float
    buckets: int
    counts: dict[str, list[int]]
    """Execution status -> one count per bucket (only statuses with a run)."""
    truncated: bool


@dataclasses.dataclass(frozen=True, slots=True)
class QueueSample:
    """The queue once in a minute: due and unclaimed tasks, and how long the oldest waited."""

    minute: datetime
    depth: int
    oldest_age: float | None


SAMPLES_KEPT = timedelta(days=1)


@dataclasses.dataclass(frozen=True, slots=True)
class RunPage:
    runs: list[Execution]
    names: dict[int, str]
    """Task id -> name, for the runs listed."""
    searched: int
    """How many of the newest runs were searched at most: older ones never match."""


@dataclasses.dataclass(frozen=True, slots=True)
class RunningTask:
    task_id: int
    name: str
    node: str
    attempt: int
    started_at: datetime | None


def check(scan: int, window_s: float, bucket_s: float | None = None, *, field: str = "limit") -> None:
    """The bounds every insight is read with (``scan`` is called ``field`` by the caller);
    raises ``InvalidInput`` naming the bad one."""
    if isinstance(scan, bool) or not isinstance(scan, int) or scan < 1:
        raise InvalidInput(field, scan, "must be a whole number, 1 or more")
    if isinstance(window_s, bool) or not isinstance(window_s, int | float) or not 0 < window_s <= 366 * 86400:
        raise InvalidInput("window_s", window_s, "must be a number of seconds, more than 0 and at most a year")
    if bucket_s is not None and (
        isinstance(bucket_s, bool) or not isinstance(bucket_s, int | float) or not 1 <= bucket_s <= window_s
    ):
        raise InvalidInput("bucket_s", bucket_s, "must be a number of seconds, from 1 to the window")


def check_limit(limit: int) -> None:
    """How many rows a listing returns: a whole number, 1 or more (SQLite reads -1 as none)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInput("limit", limit, "must be a whole number, 1 or more")


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def name_stats(d: Dialect, window_s: float, scan: int, name: str | None = None) -> NameStatsReport:
    check(scan, window_s)
    since = d.approximate_now() - timedelta(seconds=window_s)
    params = {"since": d.encode_time(since), "scan": scan, "name": name, "names": MAX_NAMES}
    with d.reader() as s:
        rows = s.fetch_all("name_stats", params)
    names = [
        NameStats(
            name=r["name"],
            runs=int(r["runs"]),
            succeeded=int(r["succeeded"] or 0),
            failed=int(r["failed"] or 0),
            last_success=d.decode_time(r["last_success"]),
            p50_duration=_float(r["p50_duration"]),
            p95_duration=_float(r["p95_duration"]),
            p50_lateness=_float(r["p50_lateness"]),
            p95_lateness=_float(r["p95_lateness"]),
        )
        for r in rows
    ]
    truncated = bool(rows) and int(rows[0]["scanned"]) >= scan
    return NameStatsReport(window_s, names, truncated)


def throughput(d: Dialect, window_s: float, bucket_s: float, scan: int) -> Throughput:
    check(scan, window_s, bucket_s)
    buckets = int(-(-window_s // bucket_s))
    since = d.approximate_now() - timedelta(seconds=buckets * bucket_s)
    params = {"since": d.encode_time(since), "bucket_s": bucket_s, "bucket_us": int(bucket_s * 1e6), "scan": scan}
    with d.reader() as s:
        rows = s.fetch_all("throughput", params)
    counts: dict[str, list[int]] = {}
    for r in rows:
        bucket = min(max(int(r["bucket"]), 0), buckets - 1)  # a run ending just now: the last bucket
        counts.setdefault(r["status"], [0] * buckets)[bucket] += int(r["n"])
    truncated = bool(rows) and int(rows[0]["scanned"]) >= scan
    return Throughput(since, float(bucket_s), buckets, counts, truncated)


def find_runs(
    d: Dialect,
    rows_of: Decoder,
    *,
    name: str | None,
    status: ExecutionStatus | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    scan: int,
) -> RunPage:
    check(scan, 1, field="scan")
    check_limit(limit)
    params = {
        "name": name,
        "status": status.value if status else None,
        "since": d.encode_time(since),
        "until": d.encode_time(until),
        "limit": limit,
        "scan": scan,
    }
    with d.reader() as s:
        rows = s.fetch_all("find_runs", params)
    runs = [rows_of.execution(r) for r in rows]
    names = {run.task_id: str(r["task_name"]) for run, r in zip(runs, rows, strict=True)}
    return RunPage(runs, names, scan)


def running_by_node(d: Dialect, limit: int) -> list[RunningTask]:
    check_limit(limit)
    with d.reader() as s:
        rows = s.fetch_all("running_by_node", {"limit": limit})
    return [
        RunningTask(int(r["id"]), r["name"], r["lease_owner"] or "", int(r["attempt"]), d.decode_time(r["started_at"]))
        for r in rows
    ]


def grouped(running: Sequence[RunningTask]) -> dict[str, list[RunningTask]]:
    """Node id -> its running tasks, in the order read."""
    out: dict[str, list[RunningTask]] = {}
    for task in running:
        out.setdefault(task.node, []).append(task)
    return out


def sample_queue(d: Dialect, depth: int, oldest: datetime | None) -> None:
    """Keep this minute's queue depth (a node calls it about once a minute; the first
    sample of a minute stays), and forget samples older than SAMPLES_KEPT."""
    now = d.approximate_now()
    minute = now.replace(second=0, microsecond=0)
    age = None if oldest is None else max(0.0, (now - oldest).total_seconds())
    with d.transaction() as s:
        s.execute("insert_queue_sample", {"minute": d.encode_time(minute), "depth": depth, "oldest_age": age})
        s.execute("prune_queue_samples", {"cutoff": d.encode_time(now - SAMPLES_KEPT)})


def queue_samples(d: Dialect, since: datetime) -> list[QueueSample]:
    with d.reader() as s:
        rows = s.fetch_all("queue_samples", {"since": d.encode_time(since)})
    return [
        QueueSample(d.decode_time(r["minute"]), int(r["depth"]), _float(r["oldest_age"]))  # type: ignore[arg-type]
        for r in rows
    ]
