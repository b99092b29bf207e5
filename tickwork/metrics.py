"""Prometheus metrics of this process (prometheus-client's default registry).

Labels never carry task ids or arguments: a label value per task would grow the
series without bound. ``serve_metrics`` exposes them for ``tickwork worker
--metrics-port``.
"""

from __future__ import annotations

from prometheus_client import Counter, start_http_server

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


def serve_metrics(port: int, host: str = "0.0.0.0") -> None:  # scraped from other hosts
    """Serve /metrics on a daemon thread."""
    start_http_server(port, addr=host)
