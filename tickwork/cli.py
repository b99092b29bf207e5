"""The ``tickwork`` command line: a thin layer over the App's client API."""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import click
from rich.console import Console
from rich.table import Table

from tickwork.app import App
from tickwork.codec import MAX_DEPTH
from tickwork.cron import CronSchedule
from tickwork.errors import InvalidInput, TickworkError
from tickwork.metrics import serve_metrics, watch_queue
from tickwork.model import Execution, Status
from tickwork.redact import REDACTOR
from tickwork.schedules import fire_times
from tickwork.urls import masked, path_from_url

console = Console()
log = logging.getLogger("tickwork.cli")
R = TypeVar("R")


class BadApp(click.ClickException):
    """APP cannot be loaded: a usage error (exit 2), told in one line."""

    exit_code = 2


def _shown(value: str, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: str) -> str:
    """A message on one line (a driver's text may span several)."""
    return re.sub(r"\s*\n\s*", " ", text.strip())


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (like uvicorn and celery) from the working directory.

    The module is a dotted path of names (no relative import such as ``.`` or
    ``../x``: the working directory is on the path instead); the attribute may be dotted.
    Anything wrong is a one-line error naming APP."""
    shown = _shown(spec)
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise BadApp(f"APP={shown}: expected module:attribute, e.g. myproject.tasks:app")
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise BadApp(
            f"APP={shown}: {_shown(module_name, 60)} is not a module path: dotted names such as "
            "myproject.tasks, imported from the working directory (no '.', '..' or file paths)"
        )
    if not all(part.isidentifier() for part in attribute.split(".")):
        raise BadApp(f"APP={shown}: {_shown(attribute, 60)} is not an attribute name")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module_shown = _shown(module_name, 60)
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise BadApp(f"APP={shown}: cannot import {module_shown}: {_first_line(str(exc), 120)}") from exc
    except Exception as exc:  # the module itself failed: say how, in one line
        log.debug("importing %s failed", module_name, exc_info=True)
        raise BadApp(
            f"APP={shown}: importing {module_shown} failed: {type(exc).__name__}: {_first_line(str(exc), 120)} "
            "(-vv shows the traceback)"
        ) from exc
    for part in attribute.split("."):
        found = getattr(found, part, None)
    if not isinstance(found, App):
        raise BadApp(f"APP={shown}: {_shown(attribute, 60)} is not a tickwork App")
    protect(found)
    return found


def protect(app: App) -> None:
    """Mask ``app``'s database and Redis passwords in everything logged from now on."""
    REDACTOR.add_url(app.url)
    REDACTOR.add_url(app.redis_url)


def errors_as_messages(func: Callable[..., R]) -> Callable[..., R]:
    """Show errors as one-line messages (exit 1), not tracebacks, with every secret the
    process knows masked. An error that is not tickwork's own (a driver's, say, about a
    malformed URL) is named by its type; -vv logs its traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        try:
            return func(*args, **kwargs)
        except TickworkError as exc:
            raise click.ClickException(one_line(REDACTOR.scrub(str(exc)))) from exc
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            log.debug("unexpected error", exc_info=True)
            message = _first_line(REDACTOR.scrub(str(exc)))
            raise click.ClickException(f"{type(exc).__name__}: {message} (-vv shows the traceback)") from exc

    return wrapper


def client(ctx: click.Context, *, create: bool = False) -> App:
    """An App for client commands: the --app one if given, else one on --db / TICKWORK_DB.

    Only ``db upgrade`` creates a database: a mistyped path is an error, not a new file.
    """
    obj = ctx.find_root().obj
    app = load_app(obj["app_spec"]) if obj.get("app_spec") else App(obj.get("db"))
    protect(app)
    if not create and app.url.startswith("sqlite:"):
        path = Path(path_from_url(app.url))
        if not path.exists():
            raise click.ClickException(
                f"no database at {str(path)!r}: check --db / TICKWORK_DB, or create it with `tickwork db upgrade`"
            )
    return app


@click.group()
@click.option("--db", envvar="TICKWORK_DB", help="Database URL (default sqlite:///tickwork.db).")
@click.option("--app", "app_spec", metavar="MODULE:ATTR", help="Application whose App (and database) to use.")
@click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug).")
@click.pass_context
def main(ctx: click.Context, db: str | None, app_spec: str | None, verbose: int) -> None:
    """tickwork: a persistent, distributed task scheduler."""
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    REDACTOR.add_url(db or os.environ.get("TICKWORK_DB"))
    REDACTOR.add_secrets([os.environ.get("TICKWORK_API_TOKEN")])
    REDACTOR.install()
    if db:
        os.environ["TICKWORK_DB"] = db  # an App() without an explicit URL reads it
    ctx.obj = {"db": db, "app_spec": app_spec}


@main.command()
@click.argument("app_spec", metavar="APP")
@click.option(
    "--concurrency",
    "-c",
    default="8",
    show_default=True,
    metavar="N|MIN,MAX",
    help="Run slots; MIN,MAX autoscales between them on the age of the oldest due task.",
)
@click.option(
    "--scale-up-age",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Grow when the oldest due task is this old (s) and every slot is busy.",
)
@click.option(
    "--scale-down-after",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Shrink after this long (s) with idle slots.",
)
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve Prometheus metrics on this port (/metrics).")
@click.option("--metrics-host", default="0.0.0.0", show_default=True, help="Address the metrics server listens on.")
@errors_as_messages
def worker(
    app_spec: str,
    concurrency: str,
    scale_up_age: float,
    scale_down_after: float,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run a worker node for APP (module:attribute) until SIGINT/SIGTERM."""
    minimum, maximum = _concurrency(concurrency)
    if logging.getLogger().level > logging.INFO:
        logging.getLogger("tickwork").setLevel(logging.INFO)
    app = load_app(app_spec)
    if metrics_port is not None:
        # Opened (and migrated) first: the queue gauges read the store as soon as they are
        # registered, and a database that is away must be one line, not their warning.
        if isinstance(app, App):
            app.store  # noqa: B018
        watch_queue(lambda: app.store)
        serve_metrics(metrics_port, metrics_host)
    app.run_worker(
        concurrency=minimum,
        max_concurrency=maximum if maximum != minimum else None,
        scale_up_age=scale_up_age,
        scale_down_after=scale_down_after,
    )
    _exit_past_leaked_threads()


def _exit_past_leaked_threads() -> None:
    """The node has stopped and written everything; a thread that task code started and
    never ended (not a daemon) would keep the process alive for ever. Say so and exit."""
    leaked = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    if not leaked:
        return
    logging.getLogger("tickwork.worker").warning(
        "node stopped; exiting without waiting for %d thread(s) that task code left running: %s",
        len(leaked),
        ", ".join(sorted(leaked)[:10]),
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _concurrency(text: str) -> tuple[int, int]:
    """``N`` or ``MIN,MAX`` (Celery's --autoscale takes MAX,MIN; tickwork reads it in order)."""
    parts = text.split(",")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 2) or not all(1 <= n <= 10_000 for n in numbers) or numbers != sorted(numbers):
        raise click.BadParameter(
            f"{text!r}: expected N or MIN,MAX with 1 <= MIN <= MAX <= 10000", param_hint="--concurrency"
        )
    return numbers[0], numbers[-1]


@main.command()
@click.argument("app_spec", metavar="APP")
@click.argument("name")
@click.option("--cron", help="Cron expression (5 fields or @daily, @hourly, ...).")
@click.option("--timezone", default="UTC", show_default=True, help="IANA zone the cron expression is read in.")
@click.option("--every", type=float, help="Run every N seconds.")
@click.option("--delay", type=float, help="Run once, N seconds from now.")
@click.option("--at", "at_text", help="Run once at an ISO 8601 time with offset, e.g. 2030-01-01T09:00:00+01:00.")
@click.option("--args", "args_json", default="[]", help="Positional arguments as a JSON list.")
@click.option("--kwargs", "kwargs_json", default="{}", help="Keyword arguments as a JSON object.")
@click.option("--key", help="Idempotency key: no second live task with the same key.")
@click.option("--max-retries", type=int)
@click.option("--retry-backoff", type=float)
@click.option("--timeout", type=float)
@click.option("--jitter", type=float)
@click.option("--priority", type=int)
@click.option("--misfire", type=click.Choice(["SKIP", "SINGLE_CATCHUP", "CATCHUP"], case_sensitive=False))
@errors_as_messages
def schedule(
    app_spec: str, name: str, cron: str | None, timezone: str, every: float | None, delay: float | None,
    at_text: str | None, args_json: str, kwargs_json: str, key: str | None, max_retries: int | None,
    retry_backoff: float | None, timeout: float | None, jitter: float | None, priority: int | None,
    misfire: str | None,
) -> None:  # fmt: skip
    """Schedule task NAME of APP once (now, --delay, --at) or recurring (--cron, --every)."""
    app = load_app(app_spec)
    task = app.schedule(
        name, args=_json("args", args_json), kwargs=_json("kwargs", kwargs_json), delay=delay,
        at=_datetime("at", at_text), cron=cron, timezone=timezone, every=every, key=key,
        max_retries=max_retries, retry_backoff=retry_backoff, timeout=timeout, jitter=jitter,
        priority=priority, misfire=misfire,
    )  # fmt: skip
    console.print(f"scheduled task {task.id} ({task.name}), next run at {task.next_run_at.isoformat()}")


@main.group()
def tasks() -> None:
    """List, inspect and manage tasks."""


@tasks.command("list")
@click.option("--status", type=click.Choice([s.value for s in Status], case_sensitive=False))
@click.option("--name")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.pass_context
@errors_as_messages
def tasks_list(ctx: click.Context, status: str | None, name: str | None, limit: int) -> None:
    """List tasks."""
    table = Table()
    for column in ("id", "name", "kind", "schedule", "status", "next run (UTC)", "runs", "last"):
        table.add_column(column)
    for t in client(ctx).tasks(status=status, name=name, limit=limit):
        table.add_row(
            str(t.id), t.name, t.kind.value, t.schedule_text(), t.status.value,
            f"{t.next_run_at:%Y-%m-%d %H:%M:%S}" if not t.status.is_terminal else "",
            str(t.run_count), t.last_status.value if t.last_status else "",
        )  # fmt: skip
    console.print(table)


@tasks.command("show")
@click.argument("task_id", type=int)
@click.pass_context
@errors_as_messages
def tasks_show(ctx: click.Context, task_id: int) -> None:
    """Show one task, its next fire times and its latest runs."""
    app = client(ctx)
    task = app.get(task_id)
    table = Table(show_header=False)
    for field, value in task.to_dict().items():
        table.add_row(field, json.dumps(value) if isinstance(value, (dict, list)) else str(value))
    console.print(table)
    if not task.status.is_terminal and (upcoming := task.next_fire_times(5)):
        zone = task.timezone if task.cron else "UTC"
        console.print(f"next fire times ({zone}):", markup=False)
        for when in upcoming:
            console.print("  " + both_zones(when, zone), markup=False)
    if task.last_decision:
        console.print(f"last decision: {task.last_decision}")
    _print_executions(app.executions(task_id, limit=10))


@tasks.command("cancel")
@click.argument("task_id", type=int)
@click.option("--run-only", is_flag=True, help="Stop only the current run of a recurring task.")
@click.pass_context
@errors_as_messages
def tasks_cancel(ctx: click.Context, task_id: int, run_only: bool) -> None:
    """Cancel a task (a running one is asked to stop)."""
    task = client(ctx).cancel(task_id, run_only=run_only)
    running = task.status is Status.RUNNING
    console.print(f"task {task.id}: {'cancel requested (running)' if running else task.status.value}")


@tasks.command("pause")
@click.argument("task_id", type=int)
@click.pass_context
@errors_as_messages
def tasks_pause(ctx: click.Context, task_id: int) -> None:
    """Pause a pending task."""
    console.print(f"task {client(ctx).pause(task_id).id}: PAUSED")


@tasks.command("resume")
@click.argument("task_id", type=int)
@click.option("--no-catch-up", is_flag=True, help="Skip (and record) the slots missed while paused.")
@click.pass_context
@errors_as_messages
def tasks_resume(ctx: click.Context, task_id: int, no_catch_up: bool) -> None:
    """Resume a paused task; its misfire policy decides about slots missed meanwhile."""
    console.print(f"task {client(ctx).resume(task_id, catch_up=not no_catch_up).id}: PENDING")


@tasks.command("backfill")
@click.argument("task_id", type=int)
@click.option("--start", "start_text", required=True, help="ISO 8601 time with offset; the range includes it.")
@click.option("--end", "end_text", required=True, help="ISO 8601 time with offset; the range includes it.")
@click.pass_context
@errors_as_messages
def tasks_backfill(ctx: click.Context, task_id: int, start_text: str, end_text: str) -> None:
    """Run every slot of a recurring task in [--start, --end] once, oldest first."""
    start, end = _datetime("start", start_text), _datetime("end", end_text)
    assert start is not None and end is not None
    runs = client(ctx).backfill(task_id, start, end)
    console.print(f"task {task_id}: {len(runs)} slots scheduled for backfill")
    for run in runs:
        console.print(f"  run {run.id} for {run.scheduled_at.isoformat()}")


@tasks.command("trigger")
@click.argument("task_id", type=int)
@click.pass_context
@errors_as_messages
def tasks_trigger(ctx: click.Context, task_id: int) -> None:
    """Run a pending task now (a recurring one keeps its schedule)."""
    console.print(f"task {client(ctx).trigger(task_id).id}: due now")


@main.command()
@click.argument("task_id", type=int)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.pass_context
@errors_as_messages
def executions(ctx: click.Context, task_id: int, limit: int) -> None:
    """Show the execution log of a task, newest first."""
    _print_executions(client(ctx).executions(task_id, limit=limit))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as one JSON object.")
@click.pass_context
@errors_as_messages
def stats(ctx: click.Context, as_json: bool) -> None:
    """Queue depth and oldest due age, running tasks, nodes, runs per minute by status."""
    numbers = client(ctx).stats()
    if as_json:
        click.echo(json.dumps(numbers.to_dict(), sort_keys=True))
        return
    age = "-" if numbers.oldest_age is None else f"{numbers.oldest_age:.1f} s"
    console.print(f"queue depth {numbers.depth} (due, unclaimed); oldest due {age} ago")
    console.print(f"running {numbers.running}; nodes {numbers.nodes}")
    console.print("tasks: " + (", ".join(f"{k} {v}" for k, v in sorted(numbers.by_status.items())) or "none"))
    note = " (of the newest runs only)" if numbers.window_full else ""
    for label, runs in (("last minute", numbers.runs_last_minute), ("last hour", numbers.runs_last_hour)):
        console.print(f"runs {label}{note}: " + (", ".join(f"{k} {v}" for k, v in sorted(runs.items())) or "none"))


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("expression")
@click.option("--timezone", default="UTC", show_default=True, help="IANA zone the expression is read in.")
@click.option("--after", "after_text", help="ISO 8601 time with an offset (default: now); times strictly after it.")
@click.option("-n", "count", default=5, show_default=True, type=click.IntRange(1, 1000))
@errors_as_messages
def cron(expression: str, timezone: str, after_text: str | None, count: int) -> None:
    """Explain a cron EXPRESSION and print its next N fire times, in its zone and in UTC.

    An expression that starts with "-" is taken as the expression, not as an option.
    """
    after = _datetime("after", after_text)
    times = fire_times(cron=expression, timezone=timezone, after=after, n=count)
    words = CronSchedule(expression, timezone).explain()
    console.print(f"{expression!r} in {timezone}" + (f": {words}" if words else ""), markup=False)
    for when in times:
        console.print("  " + both_zones(when, timezone), markup=False)
    if not times:
        console.print("  no fire time before the year 9999")


def both_zones(when: datetime, timezone: str) -> str:
    """``2025-10-26 02:30:00 CEST +0200  (2025-10-26 00:30:00 UTC)``: a fire time in its
    own zone beside UTC, since a wall time alone is ambiguous on fall-back nights."""
    local = when.astimezone(ZoneInfo(timezone))
    return f"{local:%Y-%m-%d %H:%M:%S %Z %z}  ({when:%Y-%m-%d %H:%M:%S} UTC)"


@main.group()
def db() -> None:
    """Database schema."""


@db.command()
@click.pass_context
@errors_as_messages
def upgrade(ctx: click.Context) -> None:
    """Create or upgrade the schema to the latest version."""
    app = client(ctx, create=True)
    version = app.store.migrate()
    console.print(f"{masked(app.url)}: schema at version {version}", markup=False)


@main.command()
@click.option("--db-path", default="tickwork-demo.db", show_default=True, help="SQLite file (recreated).")
@click.option("--duration", type=float, help="Stop after this many seconds (default: until Ctrl-C).")
@errors_as_messages
def demo(db_path: str, duration: float | None) -> None:
    """Run example tasks (one-time, delayed, cron, interval, retried) on a local node."""
    from tickwork.demo import run_demo

    run_demo(db_path, duration, console)


def _print_executions(rows: list[Execution]) -> None:
    table = Table()
    for column in ("id", "task", "attempt", "scheduled for", "started", "finished", "status", "node", "error / note"):
        table.add_column(column)
    for e in rows:
        detail = f"{e.error.type}: {e.error.message}" if e.error else (e.note or "")
        table.add_row(
            str(e.id), str(e.task_id), str(e.attempt), _ts(e.scheduled_for), _ts(e.started_at),
            _ts(e.finished_at), e.status.value, e.node or "", detail[:80],
        )  # fmt: skip
    console.print(table)


def _ts(value: datetime | None) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S.%f}"[:-3] if value else ""


def _json(field: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(field, text, f"not valid JSON: {exc.msg}") from exc
    except RecursionError as exc:
        raise InvalidInput(field, text, f"nested too deeply (at most {MAX_DEPTH} levels)") from exc


def _datetime(field: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput(field, text, "not an ISO 8601 datetime") from exc


# Last: the serve command's module imports this one (load_app).
from tickwork.web.cli import serve  # noqa: E402

main.add_command(serve)

if __name__ == "__main__":
    main()
