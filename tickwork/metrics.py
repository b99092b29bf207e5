"""Prometheus metrics (prometheus-client's default registry).

Two kinds: counters and histograms of what this process did (runs, durations,
lateness, stale writes, recoveries), and queue gauges read from the database at scrape
time (depth, oldest due age, nodes), so every replica reports the same queue and an
autoscaler may scrape any of them. Labels never carry task ids or arguments: a label
value per task would grow the series without bound; the task *name* is bounded by the
registered functions.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:
    from tickwork.store.base import Store

log = logging.getLogger("tickwork.metrics")

STALE_RESULTS = Counter(
    "tickwork_stale_results",
    "Fenced writes of this node that matched nothing because its lease had been lost "
    "(another node owns or ended the run): dropped, never applied.",
    ["write"],  # "heartbeat" (a lease renewal) or "result" (a run's outcome)
)
RECOVERED = Counter(
    "tickwork_reconciler_recovered",
    "Runs this node's reconciler took over: lost with their node, or past max_runtime.",
    ["reason"],  # "lost" or "max_runtime"
)
for _write in ("heartbeat", "result"):
    STALE_RESULTS.labels(write=_write)  # exported as 0 before the first one
for _reason in ("lost", "max_runtime"):
    RECOVERED.labels(reason=_reason)
PRUNED = Counter(
    "tickwork_pruned_rows",
    "Rows this node's retention deleted: old executions, and ended one-time tasks.",
    ["kind"],  # "executions" or "tasks"
)
for _kind in ("executions", "tasks"):
    PRUNED.labels(kind=_kind)
RUNS_HELP = "Runs recorded by this node, by task name, execution status and queue."
DURATION_HELP = "How long runs took on this node, from start to end."
DURATION_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
LATENESS_HELP = (
    "How late runs started on this node after they came due (after jitter and retry backoff): queueing delay."
)
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class _Buckets:
    """One label set of a histogram: its observations per bucket (not yet cumulative),
    their sum, and when it was made."""

    __slots__ = ("counts", "created", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0.0] * size
        self.sum = 0.0
        self.created = time.time()


class RunSeries(Collector):
    """The per-run series (runs, durations, lateness): a counter and two histograms with
    the names, labels, buckets and samples prometheus-client's own would have, kept as
    plain numbers under one lock. Its Counter and Histogram take a lock per number they
    change (five a run) and check their arguments each time: a sixteenth of a W1 node's
    CPU. Every node of the process records into the one ``RUN_SERIES``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str, str], list[float]] = {}  # [count, created]
        self._durations: dict[str, _Buckets] = {}
        self._lateness: dict[str, _Buckets] = {}
        self._duration_bounds = (*map(float, DURATION_BUCKETS), math.inf)
        self._lateness_bounds = (*map(float, LATENESS_BUCKETS), math.inf)

    def run_ended(self, task: str, status: str, queue: str, seconds: float | None) -> None:
        with self._lock:
            run = self._runs.get((task, status, queue))
            if run is None:
                run = self._runs[(task, status, queue)] = [0.0, time.time()]
            run[0] += 1.0
            if seconds is not None:
                self._observe(self._durations, self._duration_bounds, task, seconds)

    def run_started(self, task: str, late_by: float) -> None:
        with self._lock:
            self._observe(self._lateness, self._lateness_bounds, task, late_by)

    @staticmethod
    def _observe(series: dict[str, _Buckets], bounds: tuple[float, ...], task: str, value: float) -> None:
        """Under the lock. A value goes in the first bucket whose bound it does not exceed
        (``le``), as prometheus-client's ``observe``."""
        buckets = series.get(task)
        if buckets is None:
            buckets = series[task] = _Buckets(len(bounds))
        buckets.counts[bisect.bisect_left(bounds, value)] += 1.0
        buckets.sum += value

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily("tickwork_task_runs", RUNS_HELP, labels=["task", "status", "queue"])
        yield HistogramMetricFamily("tickwork_task_duration_seconds", DURATION_HELP, labels=["task"])
        yield HistogramMetricFamily("tickwork_task_lateness_seconds", LATENESS_HELP, labels=["task"])

    def collect(self) -> Iterator[Metric]:
        created = getattr(prometheus_metrics, "_use_created", True)  # PROMETHEUS_DISABLE_CREATED_SERIES
        with self._lock:
            runs = [(labels, count, made) for labels, (count, made) in self._runs.items()]
            durations = [(task, list(b.counts), b.sum, b.created) for task, b in self._durations.items()]
            lateness = [(task, list(b.counts), b.sum, b.created) for task, b in self._lateness.items()]
        counter = CounterMetricFamily("tickwork_task_runs", RUNS_HELP, labels=["task", "status", "queue"])
        for labels, count, made in runs:
            counter.add_metric(labels, count, created=made if created else None)
        yield counter
        yield _histogram("tickwork_task_duration_seconds", DURATION_HELP, self._duration_bounds, durations, created)
        yield _histogram("tickwork_task_lateness_seconds", LATENESS_HELP, self._lateness_bounds, lateness, created)


def _histogram(
    name: str,
    help_text: str,
    bounds: tuple[float, ...],
    series: list[tuple[str, list[float], float, float]],
    created: bool,
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, help_text, labels=["task"])
    les = [floatToGoString(b) for b in bounds]  # type: ignore[no-untyped-call]  # as prometheus-client writes them
    for task, counts, total, made in series:
        cumulative = list(itertools.accumulate(counts))
        family.add_metric([task], list(zip(les, cumulative, strict=True)), total)
        if created:
            family.add_sample(f"{name}_created", {"task": task}, made)
    return family


class LibrarySeries:
    """The per-run series through prometheus-client's own Counter and Histogram: for its
    multiprocess mode, where only they write to the files a scrape of the processes
    reads. Each label set's child is looked up once (``labels()`` takes a lock and checks
    its arguments on every call)."""

    def __init__(self) -> None:
        self._runs = Counter("tickwork_task_runs", RUNS_HELP, ["task", "status", "queue"])
        self._durations = Histogram("tickwork_task_duration_seconds", DURATION_HELP, ["task"], buckets=DURATION_BUCKETS)
        self._lateness = Histogram("tickwork_task_lateness_seconds", LATENESS_HELP, ["task"], buckets=LATENESS_BUCKETS)
        self._children: dict[tuple[Any, ...], Any] = {}

    def run_ended(self, task: str, status: str, queue: str, seconds: float | None) -> None:
        self._child(self._runs, task, status, queue).inc()
        if seconds is not None:
            self._child(self._durations, task).observe(seconds)

    def run_started(self, task: str, late_by: float) -> None:
        self._child(self._lateness, task).observe(late_by)

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child


MULTIPROCESS = "PROMETHEUS_MULTIPROC_DIR" in os.environ or "prometheus_multiproc_dir" in os.environ
"""prometheus-client runs in its multiprocess mode (the variables it reads itself)."""
RUN_SERIES: RunSeries | LibrarySeries = LibrarySeries() if MULTIPROCESS else RunSeries()
if isinstance(RUN_SERIES, RunSeries):
    REGISTRY.register(RUN_SERIES)


RUNNING = Gauge("tickwork_running", "Runs this node holds now (running, or claimed and waiting for a slot).")
SLOTS = Gauge("tickwork_slots", "Run slots of this node (its concurrency; it moves with autoscaling).")


class PrometheusStats:
    """A node's ``NodeStats`` (tickwork/node/stats.py) as Prometheus series in the default
    registry: the per-run ones in ``RUN_SERIES``, the rare ones through prometheus-client."""

    def run_ended(self, task: str, status: str, seconds: float | None, queue: str = "default") -> None:
        RUN_SERIES.run_ended(task, status, queue, seconds)

    def run_started(self, task: str, late_by: float) -> None:
        RUN_SERIES.run_started(task, late_by)

    def stale_write(self, write: str) -> None:
        STALE_RESULTS.labels(write=write).inc()

    def recovered(self, reason: str, count: int) -> None:
        RECOVERED.labels(reason=reason).inc(count)

    def running(self, count: int) -> None:
        RUNNING.set(count)

    def slots(self, count: int) -> None:
        SLOTS.set(count)

    def pruned(self, kind: str, count: int) -> None:
        PRUNED.labels(kind=kind).inc(count)


DEPTH_HELP = "Tasks due and not claimed by any node, by queue (sum() for the whole cluster)."
AGE_HELP = (
    "Seconds since the oldest due, unclaimed task of the queue came due (0 when none is): scale out its worker "
    "group when it grows."
)


class QueueCollector(Collector):
    """Queue gauges computed from the store when scraped."""

    def __init__(self, store: Callable[[], Store], queues: Iterable[str] = ()) -> None:
        self._store = store
        self._served = {"default", *queues}
        """Queues that always have a series (0 when empty), so that a worker group's
        autoscaler query finds data, and scales down, once its backlog is gone."""

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The gauges' names, without a value: registering must not open the store."""
        yield GaugeMetricFamily("tickwork_queue_depth", DEPTH_HELP, labels=["queue"])
        yield GaugeMetricFamily("tickwork_queue_oldest_age_seconds", AGE_HELP, labels=["queue"])
        yield GaugeMetricFamily("tickwork_nodes", "Worker node rows.")

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            store = self._store()
            by_queue = store.due_by_queue()
            now = store.approximate_now()
            nodes = len(store.list_nodes())
        except Exception:  # a scrape must not fail because the database is away
            log.warning("queue metrics unavailable", exc_info=True)
            return
        depth = GaugeMetricFamily("tickwork_queue_depth", DEPTH_HELP, labels=["queue"])
        age = GaugeMetricFamily("tickwork_queue_oldest_age_seconds", AGE_HELP, labels=["queue"])
        for queue, (due, oldest) in sorted({**dict.fromkeys(self._served, (0, None)), **by_queue}.items()):
            depth.add_metric([queue], due)
            age.add_metric([queue], 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds()))
        yield depth
        yield age
        yield GaugeMetricFamily(
            "tickwork_nodes",
            "Worker node rows: nodes that heartbeat (dead ones are pruned after 3 leases).",
            value=nodes,
        )


_collector_lock = threading.Lock()
_collector: QueueCollector | None = None


def watch_queue(store: Callable[[], Store], queues: Iterable[str] = ()) -> None:
    """Export the queue gauges of one App's store (the first one asked for, per process;
    ``store`` is called at each scrape, so a reopened store is followed); ``queues``: the
    queues this process's node serves, which always have a series."""
    global _collector
    with _collector_lock:
        if _collector is None:
            _collector = QueueCollector(store, queues)
            REGISTRY.register(_collector)


def exposition() -> tuple[bytes, str]:
    """The /metrics body and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def serve_metrics(port: int, host: str = "0.0.0.0") -> None:  # scraped from other hosts
    """Serve /metrics on a daemon thread."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=host)
