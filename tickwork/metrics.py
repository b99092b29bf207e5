"""Prometheus metrics (prometheus-client's default registry).

Two kinds: counters and histograms of what this process did (runs, durations,
lateness, stale writes, recoveries), and queue gauges read from the database at scrape
time (depth, oldest due age, nodes), so every replica reports the same queue and an
autoscaler may scrape any of them. Labels never carry task ids or arguments: a label
value per task would grow the series without bound; the task *name* is bounded by the
registered functions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

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
RUNS = Counter(
    "tickwork_task_runs",
    "Runs recorded by this node, by task name, execution status and queue.",
    ["task", "status", "queue"],
)
DURATION = Histogram(
    "tickwork_task_duration_seconds",
    "How long runs took on this node, from start to end.",
    ["task"],
    buckets=(0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600),
)
LATENESS = Histogram(
    "tickwork_task_lateness_seconds",
    "How late runs started on this node after they came due (after jitter and retry backoff): queueing delay.",
    ["task"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)


RUNNING = Gauge("tickwork_running", "Runs this node holds now (running, or claimed and waiting for a slot).")
SLOTS = Gauge("tickwork_slots", "Run slots of this node (its concurrency; it moves with autoscaling).")


class PrometheusStats:
    """A node's ``NodeStats`` (tickwork/node/stats.py) as Prometheus series in the default
    registry. Each label set's child is looked up once: ``labels()`` takes a lock and
    checks its arguments on every call, which a node running thousands of short runs a
    second would pay on each."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str, str], Any] = {}
        self._durations: dict[str, Any] = {}
        self._lateness: dict[str, Any] = {}

    def run_ended(self, task: str, status: str, seconds: float | None, queue: str = "default") -> None:
        counter = self._runs.get((task, status, queue))
        if counter is None:
            counter = self._runs[(task, status, queue)] = RUNS.labels(task=task, status=status, queue=queue)
        counter.inc()
        if seconds is not None:
            histogram = self._durations.get(task)
            if histogram is None:
                histogram = self._durations[task] = DURATION.labels(task=task)
            histogram.observe(seconds)

    def run_started(self, task: str, late_by: float) -> None:
        histogram = self._lateness.get(task)
        if histogram is None:
            histogram = self._lateness[task] = LATENESS.labels(task=task)
        histogram.observe(late_by)

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
