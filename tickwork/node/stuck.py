"""Runs asked to stop whose code goes on: Python cannot stop a thread from outside.

A thread task (or an ``async def`` task stuck in blocking code) stops on a cancel or a
timeout only when its code checks ``ctx.cancelled``. The node does not pretend
otherwise, and never lets a second copy start while the first still runs:

* a timeout (or ``max_runtime``) ends the run's *execution* TIMED_OUT at its deadline,
  whatever the thread does (the run's log says when it timed out, not when the thread
  let go). The *task* stays RUNNING under this node's lease, its slot busy, until the
  thread returns; only then does it move on by its retry and recurrence rules. (Past
  ``max_runtime`` and a lease, any node's reconciler moves it on regardless: that is
  the hard limit ``max_runtime`` is for.)
* a run still going ``STUCK_HEARTBEATS`` heartbeats after it was asked to stop, for any
  reason but shutdown, is reported: a WARNING line, the run's note, and the node's row
  (the dashboard's nodes page and ``/api/v1/nodes``), with the advice to use
  ``isolation="process"`` or ``max_runtime``.

The monitor only judges (never waits on the store); the writes these judgements make
are queued here and done by the renewer's thread with its next heartbeat, which the
monitor asks for at once.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from tickwork.model import StuckRun
from tickwork.node.outcomes import cancelled_result
from tickwork.node.run import CancelReason, Run, RunState
from tickwork.node.slots import RunTable
from tickwork.store.base import Store

log = logging.getLogger("tickwork.worker")

STUCK_HEARTBEATS = 2
"""Heartbeats after a stop request from which a run still going is reported."""

AT_DEADLINE = (CancelReason.TIMEOUT, CancelReason.MAX_RUNTIME)
"""Stop reasons whose execution ends when they are decided (the deadline)."""

ADVICE = (
    'a thread cannot be stopped from outside: have the task check ctx.cancelled, or use isolation="process" '
    "or max_runtime"
)


@dataclasses.dataclass(frozen=True, slots=True)
class _EarlyEnd:
    run: Run
    at: float
    """Monotonic: the deadline, when the monitor decided it."""


class StuckWatch:
    """The monitor's judgement of runs asked to stop, and the writes it leaves for the
    renewer (``write``)."""

    def __init__(self, node_id: str, heartbeat: float, runs: RunTable, clock: Callable[[], float]) -> None:
        self.node_id, self.heartbeat, self.runs, self.clock = node_id, heartbeat, runs, clock
        self._ends: list[_EarlyEnd] = []
        self._notes: list[tuple[Run, str]] = []
        self._fresh = False
        self._lock = threading.Lock()

    # -- judgement (monitor) -------------------------------------------------------------

    def judge(self, now: float) -> float | None:
        """End the executions of runs past a deadline, report runs stuck for
        STUCK_HEARTBEATS; return when the next report falls due (monotonic), if any."""
        earliest: float | None = None
        for run in self.runs.runs(_asked_to_stop):
            if run.cancel_seen_at is None:
                run.cancel_seen_at = now
                if run.cancel_reason in AT_DEADLINE:
                    with self._lock:
                        self._ends.append(_EarlyEnd(run, now))
                        self._fresh = True
            if run.stuck_note is not None:
                continue
            due = run.cancel_seen_at + STUCK_HEARTBEATS * self.heartbeat
            if now < due:
                earliest = due if earliest is None else min(earliest, due)
                continue
            self._report(run)
        return earliest

    def _report(self, run: Run) -> None:
        text = (
            f"the thread did not stop within {STUCK_HEARTBEATS} heartbeats "
            f"({STUCK_HEARTBEATS * self.heartbeat:g} s) of its {run.cancel_reason}; it keeps a slot of node "
            f"{self.node_id} busy until it returns ({ADVICE})"
        )
        run.stuck_note = text
        task = run.claim.task
        log.warning("task %s (%s) execution %s: %s", task.id, task.name, run.execution_id, text)
        with self._lock:
            self._notes.append((run, text))
            self._fresh = True

    def take_fresh(self) -> bool:
        """New writes wait for the renewer since the last call: the monitor asks for a
        heartbeat now (writes that failed wait for the next one, not in a loop)."""
        with self._lock:
            fresh, self._fresh = self._fresh, False
        return fresh

    # -- the writes (renewer) ------------------------------------------------------------

    def write(self, store: Store) -> None:
        """End the executions past their deadline and add the stuck runs' notes. Each
        write on its own: one that fails is tried again with the next heartbeat."""
        with self._lock:
            ends, self._ends = self._ends, []
            notes, self._notes = self._notes, []
        failed_ends = [end for end in ends if not self._end(store, end)]
        # A note waits for its run's end to be written: the end sets the note it adds to.
        waiting = {id(end.run) for end in failed_ends}
        failed_notes = [(run, text) for run, text in notes if id(run) in waiting or not self._note(store, run, text)]
        if failed_ends or failed_notes:
            with self._lock:
                self._ends[:0], self._notes[:0] = failed_ends, failed_notes

    def _end(self, store: Store, end: _EarlyEnd) -> bool:
        run = end.run
        if run.state is not RunState.RUNNING:
            return True  # its thread returned meanwhile: its own outcome records it
        result = cancelled_result(run)
        try:
            at = store.approximate_now() - _seconds(self.clock() - end.at)
            store.end_execution(self.node_id, run.claim, result.status, at, result.error, result.note)
        except Exception:
            log.warning("task %s: could not record its timeout yet; trying again", run.task_id, exc_info=True)
            return False
        return True

    def _note(self, store: Store, run: Run, text: str) -> bool:
        try:
            store.note_execution(run.task_id, run.execution_id, text)
        except Exception:
            log.warning("task %s: could not note its stuck thread yet; trying again", run.task_id, exc_info=True)
            return False
        return True

    def report(self, now: datetime) -> list[StuckRun]:
        """The node row's stuck runs (reported and still running); ``now``: the store's
        clock, read on the renewer's thread."""
        mono = self.clock()
        return [
            StuckRun(r.task_id, r.execution_id, r.claim.task.name, str(r.cancel_reason),
                     now - _seconds(mono - (r.cancel_seen_at or mono)))
            for r in self.runs.runs(lambda r: r.stuck_note is not None and r.state is RunState.RUNNING)
        ]  # fmt: skip


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=max(0.0, value))


def _asked_to_stop(run: Run) -> bool:
    """A started run of code the node cannot kill, asked to stop, its thread still in it."""
    return (
        run.cancel_reason is not None
        and run.cancel_reason is not CancelReason.SHUTDOWN
        and not run.killable
        and run.state is RunState.RUNNING
        and run.started_at is not None
    )
