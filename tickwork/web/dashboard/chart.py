"""The throughput chart's geometry: runs per bucket by status as stacked bars, computed
here so that the template only writes the SVG elements (every value it prints is a
number or a status name, escaped anyway). Drawn on the server: no script."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from tickwork.store.insights import QueueSample, Throughput

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


DEPTH_HEIGHT = 60


@dataclasses.dataclass(frozen=True, slots=True)
class DepthChart:
    width: int
    height: int
    bars: list[Bar]
    peak: int
    """The deepest sample: the top of the scale."""
    oldest_age: float | None
    """The longest any due task had waited at a sample of the window."""
    sampled: int
    """Minutes of the window with a sample (a node samples; none ran: none)."""
    start_label: str
    end_label: str
    summary: str


def depth(samples: list[QueueSample], start: datetime, minutes: int) -> DepthChart:
    """One bar per sampled minute from ``start``: how many tasks were due and unclaimed."""
    slot = WIDTH / max(minutes, 1)
    peak = max((q.depth for q in samples), default=0)
    bars: list[Bar] = []
    for q in samples:
        i = int((q.minute - start).total_seconds() // 60)
        if not 0 <= i < minutes or not q.depth:
            continue
        tall = DEPTH_HEIGHT * q.depth / peak
        waited = "" if q.oldest_age is None else f", the oldest waiting {q.oldest_age:.0f} s"
        label = f"{q.minute:%H:%M} UTC: {q.depth} due and unclaimed{waited}"
        bars.append(Bar(round(i * slot + 0.5, 2), round(DEPTH_HEIGHT - tall, 2), round(slot - 1, 2), round(tall, 2),
                        "DEPTH", label))  # fmt: skip
    oldest = max((q.oldest_age for q in samples if q.oldest_age is not None), default=None)
    if samples:
        waited = "" if oldest is None else f"; the oldest due task waited up to {oldest:.0f} s"
        summary = f"Queue depth per minute over the last {minutes} min: at most {peak} due and unclaimed{waited}."
    else:
        summary = "No queue samples in this window: nodes sample the queue while they run."
    end = start + timedelta(minutes=minutes)
    labels = f"{start:%H:%M}", f"{end:%H:%M} UTC"
    return DepthChart(WIDTH, DEPTH_HEIGHT, bars, peak, oldest, len(samples), *labels, summary)
