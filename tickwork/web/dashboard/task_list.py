"""The tasks page: tasks filtered by status, name, kind and a search over names, newest
first or sorted by a column (``task_order``), a page at a time."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tickwork.app import App
from tickwork.errors import InvalidInput
from tickwork.model import Status
from tickwork.web.dashboard import parsing, task_order
from tickwork.web.dashboard.next_run import running_since
from tickwork.web.dashboard.pages import PAGE_SIZE, Pages
from tickwork.web.dashboard.task_order import Filters
from tickwork.web.database import Database


def router(app: App, db: Database, pages: Pages) -> APIRouter:
    r = APIRouter(include_in_schema=False)

    @r.get("/tasks")
    @db.guard
    def tasks(
        request: Request,
        status: str = "",
        name: str = "",
        q: str = "",
        kind: str = "",
        queue: str = "",
        sort: str = "",
        offset: str = "0",
    ) -> Response:
        if not pages.viewer(request).can_read:
            return pages.to_login(request)
        notes: list[str] = []
        start = parsing.offset(offset, notes)
        wanted = _wanted(status, name, q, kind, sort, queue, notes)
        try:
            rows = task_order.page(app, wanted, PAGE_SIZE, start)
        except InvalidInput as exc:
            notes.append(f"Filter ignored: {exc}")
            wanted, start = Filters(sort=wanted.sort), 0
            rows = task_order.page(app, wanted, PAGE_SIZE, 0)
        filters = _shown(wanted)
        pager = _pager(filters, rows, start)
        return pages.render(
            request,
            "tasks.html",
            title="Tasks",
            page=rows,
            running=running_since(app, rows.items),
            filters=filters,
            sort=wanted.sort,
            sort_links=_sort_links(filters),
            sorts=task_order.SORTS,
            kinds=task_order.KINDS,
            window=task_order.WINDOW,
            statuses=[s.value for s in Status],
            names=app.registry.names(),
            queue_names=app.registry.queues(),
            notes=notes,
            next_url=pager["next_url"],
            previous_url=pager["previous_url"],
        )

    return r


def _wanted(status: str, name: str, q: str, kind: str, sort: str, queue: str, notes: list[str]) -> Filters:
    """The filters asked for, read leniently: what cannot be used is dropped with a note."""
    return Filters(
        parsing.choice(Status, status, "status", notes),
        parsing.text(name, "name", notes) or None,
        parsing.text(q, "search", notes) or None,
        task_order.kind_of(kind, notes),
        task_order.sort_of(sort, notes),
        parsing.text(queue.strip(), "queue", notes) or None,
    )


def _shown(wanted: Filters) -> dict[str, str]:
    """The filters as the page's form and links carry them."""
    return {
        "status": wanted.status.value if wanted.status else "",
        "name": wanted.name or "",
        "q": wanted.q or "",
        "kind": wanted.kind.value if wanted.kind else "",
        "queue": wanted.queue or "",
        "sort": "" if wanted.sort == task_order.DEFAULT_SORT else wanted.sort,
    }


def _kept(filters: dict[str, str], **changed: str | int) -> str:
    """This page's URL with the filters kept (the empty ones left out) and ``changed``."""
    query = {k: v for k, v in {**filters, **changed}.items() if v != ""}
    return "/tasks" + (f"?{urlencode(query)}" if query else "")


def _sort_links(filters: dict[str, str]) -> dict[str, str]:
    """The column headers' links: each sorts by its column, from the first page (the id
    column flips between newest and oldest first)."""
    flip = "oldest" if filters["sort"] in ("", "newest") else ""
    links = {column: _kept(filters, sort=column) for column in ("next", "name", "status")}
    links["id"] = _kept(filters, sort=flip)
    return links


def _pager(filters: dict[str, str], rows: task_order.Rows, start: int) -> dict[str, str | None]:
    """The next and previous pages' links. A search in the store's order skips what
    does not match, so its pages only go forward (and back to the first)."""
    by_store = (filters["sort"] or task_order.DEFAULT_SORT) in task_order.STORE_SORTS
    back = 0 if filters["q"] and by_store else max(0, start - PAGE_SIZE)
    return {
        "next_url": None if rows.next_offset is None else _kept(filters, offset=rows.next_offset),
        "previous_url": None if start == 0 else _kept(filters, offset=back),
    }
