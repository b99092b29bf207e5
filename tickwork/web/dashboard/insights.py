"""The task names page: per task name, over the last hour and the last day, how many
runs ended, how many succeeded, p50/p95 of duration and lateness, and the last success;
with the throughput chart. Computed by the store over a bounded number of the newest
runs (``SCAN``): the page says when that cap cut the window short."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tickwork.app import App
from tickwork.store.insights import NameStatsReport
from tickwork.web.dashboard import chart
from tickwork.web.dashboard.pages import Pages
from tickwork.web.database import Database

SCAN = 50_000
"""Newest executions an insight looks at, at most."""
WINDOWS = ((3600.0, "last hour"), (86400.0, "last day"))
CHART_WINDOW = 3600.0
CHART_BUCKET = 60.0
NAMES_REFRESH = 30
"""Seconds between refreshes of the Names page: its day window is the costliest read."""


def name_reports(app: App, name: str | None = None) -> list[tuple[str, NameStatsReport]]:
    """The statistics over each of ``WINDOWS``: (its label, the report)."""
    return [(label, app.store.task_name_stats(window, SCAN, name=name)) for window, label in WINDOWS]


def throughput_chart(app: App) -> chart.Chart:
    return chart.stacked(app.store.throughput(CHART_WINDOW, CHART_BUCKET, SCAN))


def depth_chart(app: App) -> chart.DepthChart:
    """The queue's depth over the throughput chart's window (the minutes it draws)."""
    minutes = round(CHART_WINDOW / 60)
    start = app.store.approximate_now().replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    return chart.depth(app.store.queue_samples(start), start, minutes)


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/names")
    @db.guard
    def names(request: Request) -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        return pages.render(
            request,
            "names.html",
            refresh=NAMES_REFRESH,
            title="Task names",
            reports=name_reports(app),
            chart=throughput_chart(app),
        )

    return r
