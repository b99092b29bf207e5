"""The throughput chart's geometry: runs per bucket by status as stacked bars, computed
here so that the template only writes the SVG elements (every value it prints is a
number or a status name, escaped anyway). Drawn on the server: no script."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from tickwork.store.insights import Throughput

WIDTH = 600
HEIGHT = 120
STACK_ORDER = ("COMPLETED", "CANCELLED", "FAILED", "TIMED_OUT", "RUNNING", "SKIPPED")
"""Bottom to top: failures sit on top, where the eye lands."""


@dataclasses.dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    status: str
    label: str
    """What a pointer over it (and a screen reader) says: when, how many, which status."""


@dataclasses.dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    peak: int
    """The most runs of one bucket: the top of the scale."""
    totals: dict[str, int]
    """Runs per status over the whole window."""
    start_label: str
    end_label: str
    summary: str
    """The chart in words (its SVG <desc>)."""
    truncated: bool
    """Counted over the newest runs only: the bars may be low."""


def stacked(flow: Throughput) -> Chart:
    statuses = sorted(flow.counts, key=lambda s: (STACK_ORDER.index(s) if s in STACK_ORDER else 99, s))
    per_bucket = [sum(flow.counts[s][i] for s in statuses) for i in range(flow.buckets)]
    peak = max(per_bucket, default=0)
    slot = WIDTH / max(flow.buckets, 1)
    bars: list[Bar] = []
    for i in range(flow.buckets):
        base = float(HEIGHT)
        at = flow.start + timedelta(seconds=i * flow.bucket_s)
        for status in statuses:
            n = flow.counts[status][i]
            if not n:
                continue
            tall = HEIGHT * n / peak
            base -= tall
            label = f"{at:%H:%M} UTC: {n} {status}"
            bars.append(
                Bar(round(i * slot + 0.5, 2), round(base, 2), round(slot - 1, 2), round(tall, 2), status, label)
            )
    totals = {s: sum(flow.counts[s]) for s in statuses}
    minutes = round(flow.buckets * flow.bucket_s / 60)
    words = ", ".join(f"{n} {s}" for s, n in totals.items()) or "no runs"
    summary = f"Runs that ended per {flow.bucket_s:g} s over the last {minutes} min: {words}; at most {peak} in one."
    end = flow.start + timedelta(seconds=flow.buckets * flow.bucket_s)
    return Chart(WIDTH, HEIGHT, bars, peak, totals, f"{flow.start:%H:%M}", f"{end:%H:%M} UTC", summary, flow.truncated)
