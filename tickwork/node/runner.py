"""One run on its slot thread: the misfire decision, the Context, deadlines, overlap,
the task itself, and the hand-off of its outcome to the recorder.

A run keeps its slot and its lease (renewed by leases.py) until the recorder has
written its outcome; only then does the node forget it (``Runner.written``) and claim
more.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from tickwork.clock import utcnow
from tickwork.context import Context
from tickwork.events import Events, for_outcome
from tickwork.model import ErrorInfo, ExecutionStatus, Outcome, Overlap, Status
from tickwork.node.executor import Executor
from tickwork.node.outcomes import RunResult, cancelled_result, outcome_for
from tickwork.node.recorder import Recorder
from tickwork.node.redis_locks import NodeLocks
from tickwork.node.run import CancelReason, Run, RunState
from tickwork.node.run_log import log_ended
from tickwork.node.settings import MAX_CLAIM_AHEAD
from tickwork.node.slots import Prefetch, RunTable
from tickwork.node.stats import NodeStats
from tickwork.schedules import decide, schedule_of, skipped_outcome
from tickwork.store.base import Store

log = logging.getLogger("tickwork.worker")


class Runner:
    def __init__(
        self,
        store: Store,
        node_id: str,
        runs: RunTable,
        executor: Executor,
        recorder: Recorder[Run],
        *,
        prefetch: Prefetch,
        stats: NodeStats,
        events: Events,
        renew: Callable[[Run], bool],
        locks: NodeLocks | None = None,
        monitor_wake: threading.Event | None = None,
        on_forget: Callable[[bool], None] = lambda limited: None,
        on_due_again: Callable[[list[datetime]], None] = lambda times: None,
        clock: Callable[[], float] = time.monotonic,
        unowned_after: float | None = None,
    ) -> None:
        self.store, self.node_id, self.runs = store, node_id, runs
        self.executor, self.recorder, self.prefetch = executor, recorder, prefetch
        self.stats, self.events, self.renew, self.locks = stats, events, renew, locks
        self.monitor_wake = monitor_wake if monitor_wake is not None else threading.Event()
        self.on_forget = on_forget
        self.on_due_again = on_due_again
        """Rung when a recorded result leaves its task PENDING again (a recurring task's
        next slot, a retry): a due time the poll loop's read of due times cannot hold,
        since the task was RUNNING when it was read."""
        self.clock = clock
        self.unowned_after = unowned_after
        """Seconds after its last confirmed renewal from which a run is not started: the
        monitor stops running runs at that age (leases.LEASE_SAFETY), and a run that
        waited for a slot while the node was frozen must not start either."""

    def execute(self, run: Run) -> None:
        """The slot thread's whole job for one run; never raises, and never leaves the
        run behind: whatever goes wrong, it ends recorded (FAILED) or dropped."""
        now = self._wait_until_due(run)
        if not run.advance_from(RunState.QUEUED, RunState.RUNNING):
            return  # given back at shutdown while it waited for this slot
        try:
            result = self._run(run, now)
        except BaseException as exc:
            # Executor.execute turns task errors into results: this is a bug of ours.
            log.exception("task %s: unexpected error while running", run.task_id)
            result = RunResult(ExecutionStatus.FAILED, ErrorInfo.from_exception(exc))
        if result is not None and run.state is RunState.RUNNING:
            self.record(run, result)
        if run.stuck_note is not None:
            self._returned(run)

    def _wait_until_due(self, run: Run) -> datetime:
        """A task claimed ahead of its due time (``NodeSettings.claim_ahead``) starts at
        that time, not before: its slot waits, a fraction of a second at most. A cancel
        request or a claim given back at shutdown is seen when the wait ends (the run,
        still QUEUED meanwhile, is then skipped as any queued run would be). Returns the
        time read last: the run's start, as the misfire policy and its log see it."""
        due = run.claim.task.next_run_at
        while True:
            now = self._now()  # never raises: the slot must go on
            left = (due - now).total_seconds()
            if left <= 0 or run.state is not RunState.QUEUED or run.cancel_reason is not None:
                return now
            time.sleep(min(left, MAX_CLAIM_AHEAD))

    def _returned(self, run: Run) -> None:
        """A thread reported stuck let go at last: its slot is free (the task moves on
        now, by the outcome just handed to the recorder)."""
        waited = 0.0 if run.cancel_seen_at is None else self.clock() - run.cancel_seen_at
        log.warning(
            "task %s (%s) execution %s: its thread returned %.1f s after it was asked to stop (%s)",
            run.task_id, run.claim.task.name, run.execution_id, waited, run.cancel_reason,
        )  # fmt: skip

    def _run(self, run: Run, now: datetime) -> RunResult | None:
        """Decide and run; the result to record, or None when the run was already
        handed on (skipped by the misfire policy, or stopped before it started)."""
        if run.cancel_reason is None and self.unowned_after is not None:
            waited = self.clock() - run.renewed_at
            if waited > self.unowned_after:
                # Frozen (SIGSTOP, a VM pause) with the run queued: its lease may have
                # passed to another node before the monitor could judge it.
                log.warning("task %s: lease not renewed for %.1f s while it waited for a slot", run.task_id, waited)
                run.request_cancel(CancelReason.LOST)
        if run.cancel_reason is not None:  # it waited as prefetch and was cancelled or lost
            self.skip(run)
            return None
        # A task a full limit held back is judged as of when the limit filled (limits.py).
        decision = decide(run.claim.task, run.claim.judged_at or now)
        if not decision.run:  # missed slots the policy does not run now
            log.info("task %s: %s", run.task_id, decision.text)
            outcome = skipped_outcome(run.claim, decision, now)  # before the state moves
            run.advance(RunState.RECORDING)
            self.recorder.submit(run, outcome)
            return None
        ctx = self._context(run)
        run.started_at = now
        task = run.claim.task
        self.stats.run_started(task.name, max(0.0, (run.started_at - task.next_run_at).total_seconds()))
        self._set_deadlines(run)
        began = self.clock()
        result = self.executor.execute(run, ctx)
        self.prefetch.observe_run(self.clock() - began)
        return result

    def _context(self, run: Run) -> Context:
        task = run.claim.task
        return Context(
            task_id=task.id,
            task_name=task.name,
            execution_id=run.claim.execution_id,
            attempt=task.attempt,
            scheduled_for=run.claim.scheduled_for,
            fence=run.claim.fence,
            cancel_flag=run.cancel_flag,
            renew=lambda: self.renew(run),
        )

    def _set_deadlines(self, run: Run) -> None:
        """The monitor's deadlines for this run: the nearer of timeout and max_runtime,
        and with overlap="replace" the moment its next slot comes due."""
        task = run.claim.task
        limits = [
            (s, r)
            for s, r in ((task.timeout, CancelReason.TIMEOUT), (task.max_runtime, CancelReason.MAX_RUNTIME))
            if s is not None
        ]
        if limits:
            seconds, run.deadline_reason = min(limits)
            run.deadline = self.clock() + seconds
            self.monitor_wake.set()
        if task.overlap is Overlap.REPLACE and (schedule := schedule_of(task)) is not None:
            due_in = schedule.next_after(run.claim.scheduled_for) - self.store.approximate_now()
            # A catch-up run whose next slot is missed too is left to the misfire policy.
            if due_in.total_seconds() > -task.misfire_grace:
                run.replace_at = self.clock() + max(0.0, due_in.total_seconds())
                self.monitor_wake.set()

    def skip(self, run: Run) -> None:
        """A run stopped before it started. One whose lease was lost belongs to someone
        else now: forget it, write nothing. One cancelled on request is recorded so."""
        if run.cancel_reason is CancelReason.LOST:
            log.warning("task %s: lease lost before the run started; not running it", run.task_id)
            self.drop(run)
            return
        if run.cancel_reason is CancelReason.LOCK_LOST:
            log.warning("task %s: Redis lock lost before the run started; giving the claim back", run.task_id)
            try:
                self.store.release(self.node_id, [run.claim])
            except Exception:
                log.warning("could not give back task %s; its lease will expire", run.task_id, exc_info=True)
            self.drop(run)
            return
        log.info("task %s: %s before the run started", run.task_id, run.cancel_reason)
        self.record(run, cancelled_result(run))

    def record(self, run: Run, result: RunResult) -> None:
        """Hand the outcome to the recorder; the run keeps its slot and lease until written.
        A run reported stuck keeps the report in its note (stuck.py)."""
        if run.stuck_note is not None:
            note = f"{result.note}; {run.stuck_note}" if result.note else run.stuck_note
            result = dataclasses.replace(result, note=note)
        outcome = outcome_for(run, result, self._now())
        run.advance(RunState.RECORDING)
        self.recorder.submit(run, outcome)

    def _now(self) -> datetime:
        try:
            return self.store.approximate_now()
        except Exception:
            log.warning("store clock unavailable; recording with the local clock", exc_info=True)
            return utcnow()

    def drop(self, run: Run) -> None:
        """Forget a run with nothing to write (it belongs to another node now)."""
        run.advance(RunState.DONE)
        self.forget([run])

    def written(self, results: list[tuple[Run, Outcome, bool | None]]) -> None:
        """On the recorder's thread: the results are in the store. Free the runs' slots,
        let the poll loop claim, and tell the hooks and the webhook what was recorded."""
        runs = []
        for run, _, _ in results:
            run.advance(RunState.DONE)
            runs.append(run)
        self.forget(runs)
        again = [o.next_run_at for _, o, applied in results if applied and o.task_status is Status.PENDING]
        if again:
            self.on_due_again(again)
        events, stats = self.events, self.stats
        for run, outcome, applied in results:
            if applied:  # a stale write (False) and one never written (None): the recorder told
                claim = run.claim
                log_ended(claim, outcome)
                started = run.started_at
                took = None if started is None else max(0.0, (outcome.finished_at - started).total_seconds())
                stats.run_ended(claim.task.name, outcome.status.value, took, claim.task.queue)
                if events.wanted:  # no payloads built for nobody
                    for event, payload in for_outcome(claim, outcome, self.node_id):
                        events.emit(event, payload)

    def forget(self, runs: list[Run]) -> None:
        try:
            if self.locks is not None:
                self.locks.release(runs)  # after the write, before another claim can want them
        except Exception:  # a lock left behind expires; a run left in the table never would
            log.exception("could not release the Redis locks of %d runs; they expire with their TTL", len(runs))
        finally:
            self.runs.forget(runs)
            self.on_forget(any(run.limited for run in runs))
