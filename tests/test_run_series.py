"""The per-run series (metrics.RunSeries) are what prometheus-client's own Counter and
Histogram would expose for the same runs: names, types, help, labels, buckets (a value
on a bound counts in that bucket), counts, sums and created samples, in the same order;
and counted exactly when many threads record at once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.multiprocess import MultiProcessCollector

from tickwork import metrics
from tickwork.metrics import RunSeries

ENDED = [
    ("a", "COMPLETED", "default", 0.0),
    ("a", "COMPLETED", "default", 0.005),  # on a bound: in its bucket
    ("a", "FAILED", "default", 0.0051),
    ("b", "COMPLETED", "reports", 3600.0),
    ("b", "COMPLETED", "reports", 3600.5),  # past the last bound: +Inf only
    ("a", "TIMED_OUT", "default", None),  # no duration: counted as a run only
    ('é "quoted"\n', "COMPLETED", "default", 12.25),
]
STARTED = [("a", 0.0), ("a", 0.01), ("b", 2.5), ("b", 1e9), ('é "quoted"\n', 0.3)]
CREATED = re.compile(r"^(\w+_created\{.*\}) \S+$", re.MULTILINE)


def reference(registry: CollectorRegistry) -> None:
    """The same runs through prometheus-client's own types."""
    runs = Counter("tickwork_task_runs", metrics.RUNS_HELP, ["task", "status", "queue"], registry=registry)
    duration = Histogram(
        "tickwork_task_duration_seconds", metrics.DURATION_HELP, ["task"],
        buckets=metrics.DURATION_BUCKETS, registry=registry,
    )  # fmt: skip
    lateness = Histogram(
        "tickwork_task_lateness_seconds", metrics.LATENESS_HELP, ["task"],
        buckets=metrics.LATENESS_BUCKETS, registry=registry,
    )  # fmt: skip
    for task, status, queue, seconds in ENDED:
        runs.labels(task=task, status=status, queue=queue).inc()
        if seconds is not None:
            duration.labels(task=task).observe(seconds)
    for task, late_by in STARTED:
        lateness.labels(task=task).observe(late_by)


def ours(registry: CollectorRegistry) -> RunSeries:
    series = RunSeries()
    registry.register(series)
    for task, status, queue, seconds in ENDED:
        series.run_ended(task, status, queue, seconds)
    for task, late_by in STARTED:
        series.run_started(task, late_by)
    return series


def exposed(registry: CollectorRegistry) -> str:
    """The text exposition with the created samples' timestamps masked."""
    return CREATED.sub(r"\1 <created>", generate_latest(registry).decode())


@pytest.mark.parametrize("created", [True, False])
def test_the_exposition_is_prometheus_clients_own(created: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus_metrics, "_use_created", created)
    theirs, mine = CollectorRegistry(), CollectorRegistry()
    reference(theirs)
    ours(mine)
    assert exposed(mine) == exposed(theirs)
    assert ("_created{" in exposed(mine)) is created
    assert (
        mine.get_sample_value("tickwork_task_runs_total", {"task": "a", "status": "COMPLETED", "queue": "default"}) == 2
    )
    assert mine.get_sample_value("tickwork_task_duration_seconds_bucket", {"task": "a", "le": "0.005"}) == 2


def test_threads_recording_at_once_lose_nothing() -> None:
    series = RunSeries()
    registry = CollectorRegistry()
    registry.register(series)
    threads, per_thread = 8, 5_000
    start = threading.Barrier(threads)

    def record() -> None:
        start.wait()
        for i in range(per_thread):
            series.run_started("t", 0.001)
            series.run_ended("t", "COMPLETED", "default", 0.001 * (i % 3))

    workers = [threading.Thread(target=record) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not any(w.is_alive() for w in workers)
    total = threads * per_thread
    assert (
        registry.get_sample_value("tickwork_task_runs_total", {"task": "t", "status": "COMPLETED", "queue": "default"})
        == total
    )
    assert registry.get_sample_value("tickwork_task_lateness_seconds_count", {"task": "t"}) == total
    assert registry.get_sample_value("tickwork_task_duration_seconds_count", {"task": "t"}) == total


def test_in_prometheus_clients_multiprocess_mode_the_series_reach_its_files(tmp_path: Path) -> None:
    """With PROMETHEUS_MULTIPROC_DIR set, only prometheus-client's own types write to the
    files a multiprocess scrape reads: the node's runs must be there, from two processes."""
    script = textwrap.dedent(
        """
        from tickwork.metrics import MULTIPROCESS, PrometheusStats
        assert MULTIPROCESS
        stats = PrometheusStats()
        stats.run_started("t", 0.02)
        stats.run_ended("t", "COMPLETED", 0.003, "default")
        """
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    labels = {"task": "t", "status": "COMPLETED", "queue": "default"}
    assert registry.get_sample_value("tickwork_task_runs_total", labels) == 2
    assert registry.get_sample_value("tickwork_task_lateness_seconds_bucket", {"task": "t", "le": "0.05"}) == 2
    assert registry.get_sample_value("tickwork_task_duration_seconds_count", {"task": "t"}) == 2
