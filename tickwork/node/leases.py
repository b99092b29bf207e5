"""Keeping a node's runs owned, and stopping those it may no longer own or must end.

The monitor thread (``Leases.monitor_main``) does, every heartbeat and whenever woken:
* asks the renewer thread for a heartbeat (``heartbeat``: renew every run's lease,
  extend their Redis locks, mark the node alive) and never waits for it;
* cancels a run whose lease could not be renewed for LEASE_SAFETY of a lease (two with a
  Redis lock still extended), judged from its last renewal alone — before another node
  may take it over;
* cancels a run past its timeout or max_runtime, or whose replacement slot came due.

Cancelling only sets the run's reason and flag (see run.py); its slot thread records
the outcome. Each judgement takes ``now`` (monotonic) so a test can drive it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tickwork.model import Renewal
from tickwork.node.health import SLOW_CALL_LEASES, StoreHealth
from tickwork.node.redis_locks import NodeLocks
from tickwork.node.renewer import Renewer
from tickwork.node.run import CancelReason, Run
from tickwork.node.settings import NodeSettings
from tickwork.node.slots import RunTable
from tickwork.node.stats import NodeStats
from tickwork.node.stuck import StuckWatch
from tickwork.store.base import Store

log = logging.getLogger("tickwork.worker")

# A run whose lease could not be renewed for this fraction of the lease cancels itself
# rather than keep running unowned.
LEASE_SAFETY = 0.8


class Leases:
    def __init__(
        self,
        store: Store,
        node_id: str,
        settings: NodeSettings,
        runs: RunTable,
        health: StoreHealth,
        stats: NodeStats,
        locks: NodeLocks | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.node_id, self.settings = store, node_id, settings
        self.runs, self.health, self.stats, self.locks = runs, health, stats, locks
        self.clock = clock
        self.wake = threading.Event()
        """Set to make the monitor look now (a run started with a deadline, a renewal failed)."""
        self.beat_now = threading.Event()
        """Set to renew at once (a cancel was announced: the renewal's reply carries it)."""
        self.renewer = Renewer(self.heartbeat)
        self._kept_locks: set[int] = set()  # unconfirmed runs whose Redis lock was extended
        self._stuck_since: float | None = None
        self.stuck = StuckWatch(node_id, settings.heartbeat, runs, clock)
        """Runs asked to stop whose thread goes on (stuck.py)."""

    # -- the monitor thread -------------------------------------------------------------

    def monitor_main(self, stop: threading.Event) -> None:
        next_beat = 0.0
        while not stop.is_set():
            if self.clock() >= next_beat or self.beat_now.is_set():
                self.beat_now.clear()
                self.ask_for_heartbeat()
                next_beat = self.clock() + self.settings.heartbeat
            now = self.clock()
            wait = next_beat - now
            for deadline in (self.enforce_timeouts(now), self.cancel_unrenewed(now), self.stuck.judge(now)):
                if deadline is not None:
                    wait = min(wait, deadline - now)
            if self.stuck.take_fresh():  # a timeout's execution to end: the renewer writes it now
                self.beat_now.set()
                continue
            self.wake.wait(max(0.0, wait))
            self.wake.clear()

    def ask_for_heartbeat(self) -> None:
        """Start a heartbeat on the renewer's thread; say so, once, when the last one has
        not come back for a while (the database stopped answering: a partition?)."""
        stuck_for = self.renewer.request()
        if stuck_for is None:
            if self._stuck_since is not None:
                log.warning(
                    "node %s: the store answers again: leases renewed after %.1f s",
                    self.node_id,
                    self.clock() - self._stuck_since,
                )
                self._stuck_since = None
            return
        if self._stuck_since is None and stuck_for >= self.settings.heartbeat:
            self._stuck_since = self.clock() - stuck_for
            log.warning(
                "node %s: cannot renew leases: the store has not answered for %.1f s; runs not renewed "
                "within %.0f s of their last renewal are stopped before their leases can pass to another node",
                self.node_id,
                stuck_for,
                self.settings.lease * LEASE_SAFETY,
            )

    # -- renewals (on the renewer's thread) ----------------------------------------------

    def heartbeat(self) -> None:
        """Renew every run's lease, extend their Redis locks, and mark this node alive.
        A failure leaves the runs' last renewal as it was."""
        runs = self.runs.runs(lambda r: not r.released)
        asked = self.clock()  # the lease runs from (at the latest) now, not from the reply
        try:
            renewals = self.store.renew(self.node_id, [(r.task_id, r.claim.fence) for r in runs], self.settings.lease)
            if self.clock() - asked > self.settings.lease * SLOW_CALL_LEASES:
                self.health.slow()
        except Exception:
            log.warning("renewing leases failed", exc_info=True)
            self.health.failed()
            self._kept_locks = self.extend_locks([], runs)
            self.wake.set()  # the monitor judges the unrenewed runs now
        else:
            self._kept_locks = set()
            self.apply_renewals(runs, renewals, asked)
            renewed = {(r.task_id, r.fence) for r in renewals}
            self.extend_locks([r for r in runs if (r.task_id, r.claim.fence) in renewed], [])
        try:
            self._node_heartbeat(len(runs))
        except Exception:
            log.warning("node heartbeat failed", exc_info=True)
            self.health.failed()
        else:
            self.health.answered()
        self.stuck.write(self.store)  # timeouts' executions and stuck runs' notes; never raises

    def _node_heartbeat(self, running: int) -> None:
        """The node row, with the runs reported stuck."""
        self.store.node_heartbeat(self.node_id, running, self.stuck.report(self.store.approximate_now()))

    def apply_renewals(self, runs: list[Run], renewals: list[Renewal], asked: float) -> None:
        """Confirmed runs hold their lease from ``asked``; a run the store did not renew
        lost it (cancelled, unless already finished: its result may just have landed);
        a renewal that reports a cancel request cancels its run."""
        kept = {(r.task_id, r.fence): r for r in renewals}
        for run in runs:
            renewal = kept.get((run.task_id, run.claim.fence))
            if renewal is None:
                if not run.finished:
                    self.stats.stale_write("heartbeat")
                    log.warning(
                        "task %s: stale heartbeat: fence %s no longer holds the lease (0 rows changed); "
                        "cancelling the run",
                        run.task_id,
                        run.claim.fence,
                    )
                    run.request_cancel(CancelReason.LOST)
                continue
            run.renewed_at = asked
            if renewal.cancel_requested:
                run.request_cancel(CancelReason.CANCEL_RUN if renewal.run_only else CancelReason.CANCEL)

    def extend_locks(self, confirmed: list[Run], unconfirmed: list[Run]) -> set[int]:
        """Extend the Redis locks with the leases; a lock another node took stops its run.
        Returns the unconfirmed runs whose lock was kept (this node is alive and on them)."""
        if self.locks is None:
            return set()
        lost, kept = self.locks.extend(confirmed, unconfirmed)
        for run in [*confirmed, *unconfirmed]:
            if run.execution_id in lost and not run.finished:
                log.warning("task %s: its Redis lock was taken by another node; cancelling the run", run.task_id)
                run.request_cancel(CancelReason.LOCK_LOST)
        return kept

    def renew_one(self, run: Run) -> bool:
        """``ctx.heartbeat()`` from a task: renew its run's lease now, on the task's thread."""
        asked = self.clock()
        renewals = self.store.renew(self.node_id, [(run.task_id, run.claim.fence)], self.settings.lease)
        if not renewals:
            self.stats.stale_write("heartbeat")
            log.warning("task %s: stale heartbeat from the task: fence %s lost its lease", run.task_id, run.claim.fence)
            run.request_cancel(CancelReason.LOST)
            return False
        run.renewed_at = asked
        if renewals[0].cancel_requested:
            run.request_cancel(CancelReason.CANCEL_RUN if renewals[0].run_only else CancelReason.CANCEL)
        return True

    # -- judgements (on the monitor's thread) --------------------------------------------

    def cancel_unrenewed(self, now: float) -> float | None:
        """Runs whose lease this node could not renew stop before another node may take
        them: at LEASE_SAFETY of the lease after their last renewal, or, while their
        Redis lock is still extended (which the reconcilers count as a sign of life for
        one more lease), of two. Judged from the time of the last renewal alone, never
        waiting on the store; returns the next such deadline."""
        earliest: float | None = None
        kept = self._kept_locks
        for run in self.runs.runs(lambda r: not (r.released or r.finished or r.cancel_reason)):
            leases = 2 if run.execution_id in kept else 1
            deadline = run.renewed_at + self.settings.lease * leases * LEASE_SAFETY
            if now > deadline:
                log.warning(
                    "task %s: lease not renewed for %.1f s (lease %.0f s); cancelling the run",
                    run.task_id,
                    now - run.renewed_at,
                    self.settings.lease,
                )
                run.request_cancel(CancelReason.LOST)
            elif earliest is None or deadline < earliest:
                earliest = deadline
        return earliest

    def enforce_timeouts(self, now: float) -> float | None:
        """Cancel started runs past their timeout or max_runtime, or whose replacement
        slot came due (overlap="replace"); return the earliest such deadline still ahead."""
        earliest: float | None = None
        for run in self.runs.runs(lambda r: r.cancel_reason is None and r.started):
            for deadline, reason in ((run.deadline, run.deadline_reason), (run.replace_at, CancelReason.REPLACED)):
                if deadline is None:
                    continue
                if deadline <= now:
                    run.request_cancel(reason)
                    break
                if earliest is None or deadline < earliest:
                    earliest = deadline
        return earliest
