"""The demo: example tasks of every kind on an embedded SQLite file, one node, the
dashboard on loopback, and a live view of the runs. It is what ``tickwork demo`` runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.markup import escape

from tickwork import demo_dashboard
from tickwork.app import App
from tickwork.context import Context
from tickwork.demo_screen import TABLE_LINES, Example, PlainLog, closing_hint, screen, sqlite_url
from tickwork.errors import StoreError
from tickwork.model import ExecutionStatus
from tickwork.store import open_store

HEADER_LINES = 3
"""Lines printed above the live part: the node, the dashboard and its token."""
_REFRESH = 0.5
"""Seconds between redraws."""
_PAGE = 10_000
"""Task headers read per query while counting the tasks of an existing file."""
_SQLITE_MAGIC = b"SQLite format 3\x00"
_WAL_VERSIONS = b"\x02\x02"
"""Bytes 18 and 19 of the header (write and read format versions) of a file in WAL mode."""


def make_app(url: str) -> App:
    app = App(url, heartbeat=2.0, lease=10.0, poll_interval=1.0, shutdown_grace=5.0)

    @app.task(name="demo.send_welcome")
    def send_welcome(ctx: Context, user: str) -> str:
        ctx.logger.info("welcome mail to %s", user)
        return f"sent to {user}"

    @app.task(name="demo.heartbeat_check")
    async def heartbeat_check(ctx: Context) -> dict[str, float]:
        started = time.perf_counter()
        await asyncio.sleep(random.uniform(0.05, 0.3))
        return {"latency_ms": round((time.perf_counter() - started) * 1000, 1)}

    @app.task(name="demo.minute_report")
    def minute_report(ctx: Context) -> str:
        return f"report for {ctx.scheduled_for:%H:%M}"

    @app.task(name="demo.flaky_sync", max_retries=3, retry_backoff=1.0)
    def flaky_sync(ctx: Context) -> str:
        if ctx.attempt < 3:
            raise ConnectionError(f"upstream unavailable (attempt {ctx.attempt})")
        return f"synced on attempt {ctx.attempt}"

    return app


def _refuse_foreign_database(db_path: str) -> None:
    """The demo starts afresh by deleting its file: never one that holds other work."""
    path = Path(db_path)
    if path.is_dir():
        raise StoreError(f"db_path={db_path!r}: is a directory")
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        foreign = _foreign_tasks(path)
    except Exception as exc:  # whatever stops the file being read, it is not one to delete
        raise StoreError(f"db_path={db_path!r}: exists and is not a tickwork demo database ({exc})") from exc
    if foreign:
        raise StoreError(f"db_path={db_path!r}: holds {foreign} tasks that are not the demo's; choose another path")


def _foreign_tasks(path: Path) -> int:
    """How many tasks in the file are not the demo's (named ``demo.*``), read through the
    store's listing; the store is opened but not migrated, so a file of another program's
    is only read, never given tickwork's tables."""
    _require_wal_sqlite(path)
    store = open_store(f"sqlite:///{path}")
    try:
        foreign, offset = 0, 0
        while True:
            page = store.task_headers(limit=_PAGE, offset=offset)
            foreign += sum(1 for header in page if header.name is not None and not _is_demo(header.name))
            if len(page) < _PAGE:
                return foreign
            offset += _PAGE
    finally:
        store.close()


def _require_wal_sqlite(path: Path) -> None:
    """tickwork's SQLite store keeps its file in WAL mode, and opening one that is not
    would switch it over: a change to a file that is about to be refused. Its header
    tells, without opening it as a database."""
    with path.open("rb") as file:
        header = file.read(20)
    if not header.startswith(_SQLITE_MAGIC):
        raise StoreError("file is not a database")
    if header[18:20] != _WAL_VERSIONS:
        raise StoreError("not in WAL mode, as every tickwork database is")


def _is_demo(name: str) -> bool:
    """``demo.`` in any ASCII case, as SQL's LIKE 'demo.%' (the check this replaced) read it."""
    return name[:5].lower() == "demo."


def schedule_examples(app: App) -> list[Example]:
    """One task of each kind. Every one has a run within the first seconds: the cron task
    is also triggered once at the start, as its first slot may be up to a minute away."""
    cron = app.schedule("demo.minute_report", cron="* * * * *")
    examples = [
        Example(app.schedule("demo.send_welcome", kwargs={"user": "ada@example.com"}).id, "one-time", ""),
        Example(app.schedule("demo.send_welcome", kwargs={"user": "grace@example.com"}, delay=5).id, "delayed 5s", ""),
        Example(cron.id, "cron * * * * *", ""),
        Example(app.schedule("demo.heartbeat_check", every=timedelta(seconds=3)).id, "every 3s", ""),
        Example(app.schedule("demo.flaky_sync").id, "retried", ""),
    ]
    app.trigger(cron.id)
    return [Example(x.task_id, x.kind, app.get(x.task_id).name) for x in examples]


def run_demo(db_path: str, duration: float | None, console: Console) -> int:
    """Start afresh on ``db_path``, run the node, the dashboard and the live table;
    return the runs logged."""
    _refuse_foreign_database(db_path)
    for suffix in ("", "-wal", "-shm"):
        Path(db_path + suffix).unlink(missing_ok=True)
    app = make_app(f"sqlite:///{db_path}")
    examples = schedule_examples(app)
    with _node_warnings_shown_on_screen():
        _run(app, examples, db_path, duration, console)
    runs = app.executions(limit=10_000)
    done = sum(1 for e in runs if e.status is ExecutionStatus.COMPLETED)
    console.print()
    console.print(f"{len(runs)} runs logged, {done} completed.", markup=False, highlight=False)
    closing_hint(console, db_path, examples)
    app.close()
    return len(runs)


def _run(app: App, examples: list[Example], db_path: str, duration: float | None, console: Console) -> None:
    """The dashboard first (its address heads the screen), then the node, until the end."""
    dashboard = demo_dashboard.start(app)
    worker = app.worker(concurrency=4)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, name="tickwork-node")
    try:
        _header(console, worker.node_id, db_path, dashboard)
        thread.start()
        _show(app, examples, duration, console)
    except KeyboardInterrupt:
        console.print("stopping (finishing running tasks)...")
    finally:
        dashboard.stop()
        worker.stop()
        if thread.is_alive():
            thread.join()


def _header(console: Console, node_id: str, db_path: str, dashboard: demo_dashboard.Dashboard) -> None:
    """Printed once, above the live part (the token nowhere else)."""
    console.print(f"[bold]tickwork demo[/]: node {escape(node_id)} on {escape(sqlite_url(db_path))}")
    console.print(f"dashboard (this machine only): {dashboard.url}", highlight=False)
    console.print(f"sign-in token: {dashboard.token}", markup=False, highlight=False)


class _OnScreenOnly(logging.Filter):
    """Drops tickwork's warnings (the retried example's failures, say): the screen shows
    every run's outcome, and a log line would scroll the dashboard's address away."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not record.name.startswith("tickwork")


@contextlib.contextmanager
def _node_warnings_shown_on_screen() -> Iterator[None]:
    """Without -v, keep tickwork's warnings off the terminal while the demo draws on it."""
    handlers = logging.getLogger().handlers if logging.getLogger().level >= logging.WARNING else []
    quiet = _OnScreenOnly()
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)


def _show(app: App, examples: list[Example], duration: float | None, console: Console) -> None:
    """Redraw the examples and the latest runs until ``duration`` has passed (or Ctrl-C);
    outside a terminal, print each run once it has ended."""
    deadline = None if duration is None else time.monotonic() + duration
    if not console.is_terminal:
        plain = PlainLog(console, examples)
        while deadline is None or time.monotonic() < deadline:
            plain.poll(app)
            time.sleep(_REFRESH)  # the display's refresh rate, not a wait for an event
        plain.poll(app)
        return

    def height() -> int:
        return max(console.size.height - HEADER_LINES - 1, TABLE_LINES + 3)

    with Live(screen(app, examples, height()), console=console, auto_refresh=False) as live:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(_REFRESH)  # the display's refresh rate, not a wait for an event
            live.update(screen(app, examples, height()), refresh=True)
