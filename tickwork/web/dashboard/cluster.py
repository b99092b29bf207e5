"""What the cluster did lately and who is in it: the runs page and the nodes page."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tickwork.app import App
from tickwork.errors import TaskNotFound
from tickwork.model import Execution, ExecutionStatus
from tickwork.web import reading
from tickwork.web.dashboard import parsing
from tickwork.web.dashboard.pages import PAGE_SIZE, Pages
from tickwork.web.database import Database


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/runs")
    @db.guard
    def runs(request: Request, status: str = "") -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        notes: list[str] = []
        status_ = parsing.choice(ExecutionStatus, status, "status", notes)
        rows = app.executions(status=status_, limit=PAGE_SIZE * 2)
        return pages.render(
            request,
            "runs.html",
            title="Runs",
            runs=rows,
            names=task_names(app, rows),
            selected=status_.value if status_ else "",
            statuses=[s.value for s in ExecutionStatus],
            notes=notes,
        )

    @r.get("/nodes")
    @db.guard
    def nodes(request: Request) -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        return pages.render(request, "nodes.html", title="Nodes", nodes=app.nodes())

    return r


def task_names(app: App, runs: list[Execution]) -> dict[int, str]:
    """Task names of the runs listed (one read per distinct task, a page at most)."""
    names: dict[int, str] = {}
    for run in runs:
        if run.task_id not in names:
            try:
                names[run.task_id] = reading.task(app, run.task_id).name or "?"
            except TaskNotFound:
                names[run.task_id] = "?"
    return names
