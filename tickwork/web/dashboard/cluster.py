"""What the cluster did lately and who is in it: the runs page (filtered by task name,
status and slot time) and the nodes page (with the tasks each node is running now)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tickwork.app import App
from tickwork.errors import TaskNotFound
from tickwork.model import Execution, ExecutionStatus
from tickwork.store.insights import grouped
from tickwork.web import reading
from tickwork.web.dashboard import parsing
from tickwork.web.dashboard.insights import SCAN
from tickwork.web.dashboard.pages import PAGE_SIZE, Pages
from tickwork.web.database import Database

NAME_LIMIT = 300
"""Characters of a name filter used (no task name is longer)."""
RUNNING_LIMIT = 500
"""Running tasks the nodes page lists at most."""


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/runs")
    @db.guard
    def runs(request: Request, status: str = "", name: str = "", since: str = "", until: str = "") -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        notes: list[str] = []
        now = db.now()
        status_ = parsing.choice(ExecutionStatus, status, "status", notes)
        name = parsing.text(name, "name", notes)[:NAME_LIMIT]
        start, end = parsing.moment(since, "since", notes, now), parsing.moment(until, "until", notes, now)
        if start is not None and end is not None and start >= end:
            notes.append("Time range ignored: since must be before until.")
            start = end = None
        page = app.store.find_executions(
            name=name or None, status=status_, since=start, until=end, limit=PAGE_SIZE * 2, scan=SCAN
        )
        return pages.render(
            request,
            "runs.html",
            title="Runs",
            runs=page.runs,
            names=page.names,
            searched=page.searched,
            filters={"status": status_.value if status_ else "", "name": name, "since": since, "until": until},
            filtered=bool(status_ or name or start or end),
            task_names=app.registry.names(),
            statuses=[s.value for s in ExecutionStatus],
            notes=notes,
        )

    @r.get("/nodes")
    @db.guard
    def nodes(request: Request) -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        running = app.store.running_tasks(RUNNING_LIMIT)
        return pages.render(
            request,
            "nodes.html",
            title="Nodes",
            nodes=app.nodes(),
            running=grouped(running),
            running_capped=len(running) >= RUNNING_LIMIT,
        )

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
