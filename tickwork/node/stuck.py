"""Runs asked to stop whose code goes on: Python cannot stop a thread from outside.

A thread task (or an ``async def`` task stuck in blocking code) stops on a cancel or a
timeout only when its code checks ``ctx.cancelled``. The node does not wait on it:

* a timeout (or ``max_runtime``) is recorded TIMED_OUT at its deadline, whatever the
  thread does; the task moves on by its retry and recurrence rules;
* a run still going ``STUCK_HEARTBEATS`` heartbeats after it was asked to stop is
  reported: a WARNING line, the run's note, and the node's row (the dashboard's nodes
  page), with the advice to use ``isolation="process"`` or ``max_runtime``. A cancelled
  or replaced run is recorded then, with that note.

A run recorded while its thread still runs is *abandoned*: its thread keeps one of the
node's slots (the node claims that much less) until it returns, and what it returns is
dropped — its fence is stale by then, so its own fenced writes are refused too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from tickwork.model import StuckRun
from tickwork.node.run import CancelReason, Run, RunState
from tickwork.node.slots import RunTable

log = logging.getLogger("tickwork.worker")

STUCK_HEARTBEATS = 2
"""Heartbeats after a stop request from which a run still going is reported."""

AT_DEADLINE = (CancelReason.TIMEOUT, CancelReason.MAX_RUNTIME)
"""Stop reasons recorded at once, when they are decided (the deadline)."""

RECORDED_WHEN_STUCK = (CancelReason.CANCEL, CancelReason.CANCEL_RUN, CancelReason.REPLACED)
"""Stop reasons recorded when the run is reported stuck. A lost lease or lock is
another node's run to record by then; a shutdown has its own grace."""

ADVICE = (
    'a thread cannot be stopped from outside: have the task check ctx.cancelled, or use isolation="process" '
    "or max_runtime"
)


class StuckWatch:
    """The monitor's judgement of runs asked to stop, and the abandoned runs' slots.

    ``abandon(run, why)`` records a run now (the runner's); ``now_wall`` is the store's
    approximate clock, for the times an operator reads."""

    def __init__(
        self,
        node_id: str,
        heartbeat: float,
        runs: RunTable,
        abandon: Callable[[Run, str | None], None],
        now_wall: Callable[[], datetime],
    ) -> None:
        self.node_id, self.heartbeat, self.runs = node_id, heartbeat, runs
        self.abandon, self.now_wall = abandon, now_wall
        self._held: dict[int, Run] = {}  # abandoned runs whose thread still runs, by execution id
        self._notes: list[tuple[int, str]] = []  # (execution id, text) for the renewer to write
        self._since: dict[int, datetime] = {}
        self._lock = threading.Lock()

    # -- the abandoned runs' slots (runner) ----------------------------------------------

    def hold(self, run: Run) -> None:
        """``run`` is about to be recorded while its thread runs: its slot stays busy."""
        with self._lock:
            self._held[run.execution_id] = run

    def release(self, run: Run) -> bool:
        """Its thread returned (or the hand-over lost the race to it): True if it was held."""
        with self._lock:
            self._since.pop(run.execution_id, None)
            return self._held.pop(run.execution_id, None) is not None

    def busy(self) -> int:
        """Slots held by abandoned runs' threads."""
        with self._lock:
            return len(self._held)

    def since(self, run: Run) -> datetime | None:
        with self._lock:
            return self._since.get(run.execution_id)

    # -- judgement (monitor) -------------------------------------------------------------

    def judge(self, now: float) -> float | None:
        """Record runs past a deadline, report runs stuck for STUCK_HEARTBEATS; return
        when the next report falls due (monotonic), if any."""
        with self._lock:
            held = list(self._held.values())
        earliest: float | None = None
        for run in [*self.runs.runs(_asked_to_stop), *held]:
            if run.cancel_seen_at is None:
                run.cancel_seen_at = now
                with self._lock:
                    self._since.setdefault(run.execution_id, self.now_wall())
            if run.cancel_reason in AT_DEADLINE and not run.abandoned and run.state is RunState.RUNNING:
                self.abandon(run, None)  # TIMED_OUT at the deadline, whatever the thread does
            if run.stuck_reported:
                continue
            due = run.cancel_seen_at + STUCK_HEARTBEATS * self.heartbeat
            if now < due:
                earliest = due if earliest is None else min(earliest, due)
                continue
            self._report(run)
        return earliest

    def _report(self, run: Run) -> None:
        run.stuck_reported = True
        reason = run.cancel_reason
        text = (
            f"the thread did not stop within {STUCK_HEARTBEATS} heartbeats "
            f"({STUCK_HEARTBEATS * self.heartbeat:g} s) of its {reason}; it keeps a slot of node {self.node_id} "
            f"busy until it returns ({ADVICE})"
        )
        task = run.claim.task
        log.warning("task %s (%s) execution %s: %s", task.id, task.name, run.execution_id, text)
        if run.abandoned:
            with self._lock:
                self._notes.append((run.execution_id, text))
        elif reason in RECORDED_WHEN_STUCK and run.state is RunState.RUNNING:
            self.abandon(run, text)

    # -- what the renewer writes ---------------------------------------------------------

    def take_notes(self) -> list[tuple[int, str]]:
        with self._lock:
            notes, self._notes = self._notes, []
        return notes

    def report(self) -> list[StuckRun]:
        """The node row's stuck runs: those reported, recorded or not (a thread that heeds
        its timeout a moment late is held briefly, counted busy, but not shown as stuck)."""
        with self._lock:
            held = [r for r in self._held.values() if r.stuck_reported]
        reported = self.runs.runs(lambda r: r.stuck_reported and r.state is RunState.RUNNING)
        return [self._row(run) for run in {id(r): r for r in [*held, *reported]}.values()]

    def _row(self, run: Run) -> StuckRun:
        task = run.claim.task
        since = self.since(run) or run.started_at or self.now_wall()
        return StuckRun(task.id, run.execution_id, task.name, str(run.cancel_reason or "stop"), since)


def _asked_to_stop(run: Run) -> bool:
    """A started run of code the node cannot kill, asked to stop, its thread still in it."""
    return (
        run.cancel_reason is not None
        and run.cancel_reason is not CancelReason.SHUTDOWN
        and not run.killable
        and run.state is RunState.RUNNING
        and run.started_at is not None
    )
