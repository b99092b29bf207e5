"""The tasks page: tasks filtered by status, name and a search over names, a page at a
time."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tickwork.app import App
from tickwork.errors import InvalidInput
from tickwork.model import Status
from tickwork.web.dashboard import parsing
from tickwork.web.dashboard.pages import PAGE_SIZE, Pages
from tickwork.web.database import Database
from tickwork.web.listing import find_tasks


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/tasks")
    @db.guard
    def tasks(request: Request, status: str = "", name: str = "", q: str = "", offset: str = "0") -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        notes: list[str] = []
        status_ = parsing.choice(Status, status, "status", notes)
        start = parsing.offset(offset, notes)
        name, q = parsing.text(name, "name", notes), parsing.text(q, "search", notes)
        try:
            page = find_tasks(app, status=status_, name=name or None, q=q or None, limit=PAGE_SIZE, offset=start)
        except InvalidInput as exc:
            notes.append(f"Filter ignored: {exc}")
            page = find_tasks(app, status=None, name=None, q=None, limit=PAGE_SIZE, offset=0)
        filters = {"status": status_.value if status_ else "", "name": name, "q": q}
        kept = {k: v for k, v in filters.items() if v}
        return pages.render(
            request,
            "tasks.html",
            title="Tasks",
            page=page,
            filters=filters,
            statuses=[s.value for s in Status],
            names=app.registry.names(),
            notes=notes,
            next_url=None if page.next_offset is None else "/tasks?" + urlencode({**kept, "offset": page.next_offset}),
            # A search skips what does not match, so its pages only go forward (and back to the first).
            previous_url=None
            if start == 0
            else "/tasks?" + urlencode({**kept, "offset": 0 if q else max(0, start - PAGE_SIZE)}),
        )

    return r
