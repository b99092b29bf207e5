"""``tickwork worker APP``: one node in this process, until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import os
import sys
import threading

import click

from tickwork import logs, validate
from tickwork.app import App
from tickwork.cli.common import (
    SECONDS_OR_ZERO,
    errors_as_messages,
    load_app,
    log_options,
    refuse_without_tasks,
)
from tickwork.errors import InvalidInput
from tickwork.gc_young import MAX_THRESHOLD, NODE_THRESHOLD
from tickwork.metrics import serve_metrics, watch_queue

log = logging.getLogger("tickwork.worker")


@click.command()
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
    default="5s",
    show_default=True,
    type=SECONDS_OR_ZERO,
    help="Grow when the oldest due task is this old (seconds, or 5s, 1m, ...) and every slot is busy.",
)
@click.option(
    "--scale-down-after",
    default="30s",
    show_default=True,
    type=SECONDS_OR_ZERO,
    help="Shrink after this long (seconds, or 30s, 5m, ...) with idle slots.",
)
@click.option(
    "--prefetch",
    type=click.IntRange(min=0),
    metavar="N",
    help="Claims held beyond the busy slots (default: sized to how long runs take, up to 64 per slot; 0: none).",
)
@click.option(
    "--queues",
    metavar="NAME[,NAME...]",
    help="Claim only from these queues (default: every queue APP's registered tasks use).",
)
@click.option("--metrics-port", type=click.IntRange(0, 65535), help="Serve Prometheus metrics on this port (/metrics).")
@click.option("--metrics-host", default="0.0.0.0", show_default=True, help="Address the metrics server listens on.")
@click.option(
    "--sync/--no-sync",
    default=True,
    show_default=True,
    help="Bring APP's @app.periodic schedules in line with its code at start-up (see `tickwork schedules sync`).",
)
@click.option(
    "--gc-threshold",
    type=click.IntRange(min=0, max=MAX_THRESHOLD),
    default=NODE_THRESHOLD,
    show_default=True,
    metavar="N",
    help="From the node's start until it ends, Python's cyclic garbage collector waits for at least N new objects "
    "(gc.set_threshold; never lowered); 0 leaves it as it is.",
)
@log_options("the node's")
@errors_as_messages
def worker(
    app_spec: str,
    concurrency: str,
    scale_up_age: float,
    scale_down_after: float,
    prefetch: int | None,
    queues: str | None,
    metrics_port: int | None,
    metrics_host: str,
    sync: bool,
    gc_threshold: int,
    log_level: str | None,
    log_format: str,
) -> None:
    """Run a worker node for APP (module:attribute) until SIGINT/SIGTERM."""
    minimum, maximum = _concurrency(concurrency)
    served = _queues(queues)
    logs.configure(log_level, log_format)
    app = load_app(app_spec)
    if isinstance(app, App):  # (a stand-in, in tests, has no store)
        refuse_without_tasks(app, app_spec)
        # Opened (and migrated) first: the start-up sync and the queue gauges read the
        # store at once, and a database that is away must be one line, not their warnings.
        app.open_store()
    if metrics_port is not None:
        watch_queue(lambda: app.store, served if served is not None else app.registry.queues())
        serve_metrics(metrics_port, metrics_host)
    app.run_worker(
        concurrency=minimum,
        max_concurrency=maximum if maximum != minimum else None,
        scale_up_age=scale_up_age,
        scale_down_after=scale_down_after,
        prefetch=prefetch,
        sync=sync,
        queues=served,
        gc_threshold=gc_threshold or None,
    )
    _exit_past_leaked_threads()


def _queues(text: str | None) -> list[str] | None:
    """``--queues emails,reports``: each name checked as ``@app.task(queue=...)`` checks it."""
    if text is None:
        return None
    names = [q.strip() for q in text.split(",") if q.strip()]
    if not names:
        raise click.BadParameter("give at least one queue name", param_hint="--queues")
    try:
        return [validate.queue(q) for q in names]
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="--queues") from exc


def _exit_past_leaked_threads() -> None:
    """The node has stopped and written everything; a thread that task code started and
    never ended (not a daemon) would keep the process alive for ever. Say so and exit."""
    leaked = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    if not leaked:
        return
    log.warning(
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
