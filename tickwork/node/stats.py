"""What a node reports about itself, as a small listener interface.

The node's parts call a ``NodeStats`` they are given and know nothing of Prometheus:
``NO_STATS`` (the default) ignores everything, which is what a unit test or an embedded
node wants; tickwork/metrics.py's ``PrometheusStats`` is the implementation ``App.worker``
passes, and any other sink (StatsD, OpenTelemetry, a test's recorder) implements the same
seven methods. Calls come from the node's hot paths and several threads: an implementation
must be cheap and thread-safe, and must not raise.
"""

from __future__ import annotations

from typing import Protocol


class NodeStats(Protocol):
    def run_started(self, task: str, late_by: float) -> None:
        """A run of ``task`` started ``late_by`` seconds after it came due."""

    def run_ended(self, task: str, status: str, seconds: float | None, queue: str = "default") -> None:
        """A run's result was written: its execution status, how long it ran, its queue."""

    def stale_write(self, write: str) -> None:
        """A fenced write matched nothing: ``"heartbeat"`` or ``"result"``."""

    def recovered(self, reason: str, count: int) -> None:
        """The reconciler took over ``count`` runs: ``"lost"`` or ``"max_runtime"``."""

    def running(self, count: int) -> None:
        """The node now holds ``count`` runs (running, or claimed and waiting)."""

    def slots(self, count: int) -> None:
        """The node now has ``count`` slots."""

    def pruned(self, kind: str, count: int) -> None:
        """Retention deleted ``count`` rows: ``"executions"`` or ``"tasks"``."""


class NoStats:
    """Reports nothing."""

    def run_started(self, task: str, late_by: float) -> None:
        pass

    def run_ended(self, task: str, status: str, seconds: float | None, queue: str = "default") -> None:
        pass

    def stale_write(self, write: str) -> None:
        pass

    def recovered(self, reason: str, count: int) -> None:
        pass

    def running(self, count: int) -> None:
        pass

    def slots(self, count: int) -> None:
        pass

    def pruned(self, kind: str, count: int) -> None:
        pass


NO_STATS: NodeStats = NoStats()
