"""A real application module for the cluster-wide limits tests (``tests.apps.limited:app``,
issue 17: ``max_running=``, ``lock=``, ``rate_limit=``).

Like tests/apps/basic.py, tasks append one line per event to
``$TICKWORK_TEST_RECORDS/<pid>.log`` (one O_APPEND write per line, so lines from concurrent
runs never interleave): a run records ``phase="start"`` when it begins and, for tasks that
take time, ``phase="end"`` when it is done; ``at`` is ``time.time()`` at that moment. The
tests rebuild each run's interval from its two lines and count overlaps themselves."""

from __future__ import annotations

import time

from tests.apps.recording import node_settings, record
from tickwork import App, Context

app = App(
    **node_settings(),
)


def work(ctx: Context, seconds: float) -> None:
    """The task's own work: ``seconds`` of it, cut short only when the run is cancelled."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))


@app.task(name="test.limited_two", max_running=2)
def limited_two(ctx: Context) -> None:
    """At most two runs at once across the cluster; each takes 0.2 s."""
    record(ctx, phase="start")
    work(ctx, 0.2)
    record(ctx, phase="end")


@app.task(name="test.locked_hold")
def locked_hold(ctx: Context, hold: float = 0.05) -> None:
    """Holds whatever lock it was scheduled with (``schedule(..., lock=...)``) for ``hold`` s."""
    record(ctx, phase="start", hold=hold)
    work(ctx, hold)
    record(ctx, phase="end")


@app.task(name="test.rate_twenty", rate_limit="20/s")
def rate_twenty(ctx: Context) -> None:
    """At most 20 starts a second across the cluster; returns at once."""
    record(ctx, phase="start")


@app.task(name="test.exclusive", max_running=1)
def exclusive(ctx: Context) -> None:
    """One run at a time across the cluster; each takes 0.01 s."""
    record(ctx, phase="start")
    work(ctx, 0.01)
    record(ctx, phase="end")
