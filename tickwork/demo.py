"""The demo: example tasks of every kind on an embedded SQLite file, one node, and a
live table of the execution log. It is what ``tickwork demo`` runs."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from tickwork.app import App
from tickwork.context import Context
from tickwork.errors import StoreError
from tickwork.model import Execution, ExecutionStatus, Task
from tickwork.store import open_store

STATUS_STYLE = {
    ExecutionStatus.RUNNING: "yellow",
    ExecutionStatus.COMPLETED: "green",
    ExecutionStatus.FAILED: "red",
    ExecutionStatus.CANCELLED: "magenta",
    ExecutionStatus.TIMED_OUT: "red",
    ExecutionStatus.SKIPPED: "dim",
}

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


def schedule_examples(app: App) -> list[Task]:
    return [
        app.schedule("demo.send_welcome", kwargs={"user": "ada@example.com"}),
        app.schedule("demo.send_welcome", kwargs={"user": "grace@example.com"}, delay=5),
        app.schedule("demo.minute_report", cron="* * * * *"),
        app.schedule("demo.heartbeat_check", every=timedelta(seconds=3)),
        app.schedule("demo.flaky_sync"),
    ]


def executions_table(app: App, names: dict[int, str], limit: int = 15) -> Table:
    table = Table(title="tickwork demo — latest executions (Ctrl-C to stop)", expand=False)
    # Fixed columns keep their width; the result takes what is left of the terminal.
    for column, width in (("task (try)", 24), ("scheduled", 8), ("took", 7), ("status", 9)):
        table.add_column(column, no_wrap=True, overflow="ellipsis", min_width=width, max_width=width)
    table.add_column("result / error", no_wrap=True, overflow="ellipsis", ratio=1)
    for e in app.executions(limit=limit):
        table.add_row(*_row(e, names.get(e.task_id, str(e.task_id))))
    return table


def _row(e: Execution, name: str) -> list[str]:
    took = ""
    if e.started_at and e.finished_at:
        took = f"{(e.finished_at - e.started_at).total_seconds() * 1000:.0f} ms"
    detail = f"{e.error.type}: {e.error.message}" if e.error else ("" if e.result is None else str(e.result))
    style = STATUS_STYLE.get(e.status, "")
    return [
        f"{name.removeprefix('demo.')} ({e.attempt})",
        f"{e.scheduled_for:%H:%M:%S}",
        took,
        f"[{style}]{e.status.value}[/]",
        detail[:60],
    ]


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


def run_demo(db_path: str, duration: float | None, console: Console) -> int:
    """Start afresh on ``db_path``, run the node and the live table; return runs logged."""
    _refuse_foreign_database(db_path)
    for suffix in ("", "-wal", "-shm"):
        Path(db_path + suffix).unlink(missing_ok=True)
    app = make_app(f"sqlite:///{db_path}")
    tasks = schedule_examples(app)
    names = {t.id: t.name for t in tasks}
    worker = app.worker(concurrency=4)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, name="tickwork-node")
    thread.start()
    console.print(f"[bold]tickwork demo[/]: node {worker.node_id} on sqlite:///{db_path}")
    deadline = None if duration is None else time.monotonic() + duration
    try:
        with Live(executions_table(app, names), console=console, refresh_per_second=4) as live:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.25)  # the display's refresh rate, not a wait for an event
                live.update(executions_table(app, names))
    except KeyboardInterrupt:
        console.print("stopping (finishing running tasks)...")
    finally:
        worker.stop()
        thread.join()
    runs = app.executions(limit=10_000)
    done = sum(1 for e in runs if e.status is ExecutionStatus.COMPLETED)
    console.print()
    console.print(
        f"{len(runs)} runs logged, {done} completed. Inspect them with: tickwork --db sqlite:///{db_path} tasks list"
    )
    app.close()
    return len(runs)
