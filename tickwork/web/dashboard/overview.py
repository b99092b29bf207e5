"""The dashboard's first page: the queue in numbers, runs per minute over the last hour
(a chart), the newest tasks, the latest failures and the latest runs."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tickwork.app import App
from tickwork.model import Status
from tickwork.web.dashboard import task_order
from tickwork.web.dashboard.cluster import task_names
from tickwork.web.dashboard.insights import depth_chart, throughput_chart
from tickwork.web.dashboard.next_run import running_since
from tickwork.web.dashboard.pages import Pages
from tickwork.web.dashboard.task_order import Filters
from tickwork.web.database import Database
from tickwork.web.views import FAILURE_STATUSES

RECENT = 15


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/")
    @db.guard
    def overview(request: Request) -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        stats = app.stats()
        total = sum(stats.by_status.values())
        newest = task_order.page(app, Filters(), RECENT, 0).items
        failures = sorted(
            [run for status in FAILURE_STATUSES for run in app.executions(status=status, limit=5)],
            key=lambda run: run.id,
            reverse=True,
        )[:5]
        recent = app.executions(limit=RECENT)
        return pages.render(
            request,
            "overview.html",
            title="Overview",
            stats=stats,
            total=total,
            statuses=[s.value for s in Status],
            runs_per_minute=sum(stats.runs_last_minute.values()),
            failures_last_hour=sum(stats.runs_last_hour.get(s, 0) for s in FAILURE_STATUSES),
            tasks=newest,
            running=running_since(app, newest),
            failures=failures,
            names=task_names(app, failures + recent),
            runs=recent,
            chart=throughput_chart(app),
            depth=depth_chart(app),
        )

    return r
