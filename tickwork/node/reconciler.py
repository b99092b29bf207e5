"""Zombie recovery: runs whose node stopped renewing their lease, and runs that keep
their lease alive but go on past their task's ``max_runtime``.

Every node runs this; it is idempotent and fenced. A lost run's execution is marked
FAILED (note "lost", naming the node that held it) and the task moves on exactly as
after a failure: retried while attempts remain, else next slot or FAILED. That write
is made only while the lease is still expired, so a slow node that renews first wins.
An overrun run is ended TIMED_OUT, then the retry rules apply; the fence alone decides
between that write and the run's own result, so exactly one of them lands, and the
node that ran it finds its lease gone at its next heartbeat and stops the run.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from tickwork.events import Events, for_outcome
from tickwork.lost import lost_outcome
from tickwork.model import ErrorInfo, ExecutionStatus
from tickwork.node.health import SLOW_CALL_LEASES, StoreHealth
from tickwork.node.pruner import Pruner
from tickwork.node.run_log import what_next
from tickwork.node.sampler import QueueSampler
from tickwork.node.settings import NodeSettings
from tickwork.node.stats import NO_STATS, NodeStats
from tickwork.schedules import failed_outcome, outcome_of
from tickwork.store.base import Claim, Outcome, Store

log = logging.getLogger("tickwork.reconciler")

BATCH = 100
# Pages of runs spared as alive that one pass looks past.
SPARED_PAGES = 10
# A node row whose heartbeat is older than this (and three leases) belongs to a dead node.
NODE_TTL_FLOOR_S = 60.0


class ReconcilerLoop:
    """A node's reconciler thread: a pass every heartbeat, on a thread of its own so that a
    slow pass never delays renewals, paused while the store's answers cannot be trusted
    (an outage kept owners from renewing just as long: their lapsed leases prove nothing).
    The node's retention (``pruner``) runs after a pass, and pauses with it."""

    def __init__(
        self,
        store: Store,
        settings: NodeSettings,
        health: StoreHealth,
        *,
        own: Callable[[], list[int]],
        live: Callable[[list[int]], set[int] | None] | None,
        events: Events | None,
        stats: NodeStats,
        on_recovered: Callable[[], None],
        pruner: Pruner | None = None,
        sampler: QueueSampler | None = None,
    ) -> None:
        self.store, self.settings, self.health = store, settings, health
        self.own, self.live, self.events, self.stats = own, live, events, stats
        self.on_recovered, self.pruner, self.sampler = on_recovered, pruner, sampler

    def main(self, stop: threading.Event) -> None:
        waiting = False
        while not stop.is_set():
            if (quiet := self.health.quiet_for()) > 0:
                if not waiting:
                    log.info("reconciler paused by a store outage: it reaps a heartbeat after the store answers again")
                    waiting = True
                stop.wait(min(quiet, self.settings.heartbeat))
                continue
            waiting = False
            self.one_pass()
            if self.pruner is not None and not stop.is_set():
                self.pruner.maybe_prune()  # retention: a few bounded batches when due
            if self.sampler is not None and not stop.is_set():
                self.sampler.maybe_sample()  # the queue's depth, for the dashboard's chart
            stop.wait(self.settings.heartbeat)

    def one_pass(self) -> int:
        try:
            own = self.own()
            began = time.monotonic()
            recovered = reconcile(
                self.store,
                node_ttl=max(NODE_TTL_FLOOR_S, 3 * self.settings.lease),
                events=self.events,
                live=self.live,
                lock_grace=self.settings.lease,
                overrun_grace=self.settings.lease,
                own=own,
                may_reap=functools.partial(self._may_reap, began),
                stats=self.stats,
            )
        except Exception:
            log.warning("reconciler pass failed", exc_info=True)
            self.health.failed()
            return 0
        if recovered:
            self.on_recovered()  # recovered runs are due again: claim them now, not at the next poll
        return recovered

    def _may_reap(self, began: float) -> bool:
        """Whether the pass begun at ``began`` may reap now: not when the store kept it
        waiting for half a lease or more (its owners waited just as long)."""
        if time.monotonic() - began > self.settings.lease * SLOW_CALL_LEASES:
            self.health.slow()
        return self.health.quiet_for() == 0


def reconcile(
    store: Store,
    node_ttl: float = 90.0,
    events: Events | None = None,
    live: Callable[[list[int]], set[int] | None] | None = None,
    lock_grace: float = 30.0,
    overrun_grace: float = 30.0,
    own: Sequence[int] = (),
    may_reap: Callable[[], bool] | None = None,
    stats: NodeStats = NO_STATS,
) -> int:
    """Recover one batch of expired and one of overrun runs and forget nodes silent for
    ``node_ttl`` seconds; return how many runs this call recovered.

    ``live`` (with Redis locks) names the tasks whose lock is still being extended: their
    node is alive though its lease lapsed, so their runs are not lost yet — for at most
    ``lock_grace`` seconds past the lease, which is when such a node stops them itself.
    When Redis cannot say (None), runs within that window are left alone too: reaping a
    run whose node may be alive could start it twice.
    ``overrun_grace``: how long past its max_runtime a run is left to its own node (which
    stops it at max_runtime) before any node takes it over — a lease is right: a node
    that cannot stop a run within a lease of trying is stuck.
    ``own``: the tasks the calling node still holds. Their leases are its own business
    (it stops an unrenewed run itself and writes its result, fenced, when it can): its
    reconciler never declares them lost, whatever another node's may do.
    ``may_reap``: asked once the expired runs are known, right before any is reaped (a
    store that kept this pass waiting kept their owners waiting too: not now)."""
    pruned = store.prune_nodes(node_ttl)
    if pruned:
        log.warning("removed %d node rows with no heartbeat for %.0f s", pruned, node_ttl)
    own = sorted(own)
    expired = store.expired(BATCH, exclude=own)
    if expired and live is not None:
        spared: set[int] = set()
        for page in range(SPARED_PAGES):
            spared |= _spared(store, expired, live, lock_grace)
            expired = [c for c in expired if c.task.id not in spared]
            if expired or page == SPARED_PAGES - 1:
                break
            expired = store.expired(BATCH, exclude=sorted({*spared, *own}))  # the runs behind a page of spared ones
            if not expired:
                break
    if may_reap is not None and not may_reap():
        return 0
    return _recover(store, expired, events, stats, overrun=False) + _recover(
        store, store.overrun(BATCH, overrun_grace), events, stats, overrun=True
    )


def _spared(
    store: Store, expired: list[Claim], live: Callable[[list[int]], set[int] | None], lock_grace: float
) -> set[int]:
    """The expired runs not to reap yet: within ``lock_grace`` past their lease, with a
    lock still being extended, or Redis unable to say."""
    cutoff = store.now() - timedelta(seconds=lock_grace)
    recent = [c.task.id for c in expired if c.task.lease_expires_at is not None and c.task.lease_expires_at > cutoff]
    if not recent:
        return set()
    alive = live(recent)
    spared = set(recent) if alive is None else alive & set(recent)
    for task_id in sorted(spared):
        log.info("task %s: lease expired but its node may be alive (Redis lock); not lost yet", task_id)
    return spared


def _recover(store: Store, claims: list[Claim], events: Events | None, stats: NodeStats, *, overrun: bool) -> int:
    if not claims:
        return 0
    now = store.now()
    by_owner: dict[str, list[Outcome]] = defaultdict(list)
    for claim in claims:
        owner = claim.task.lease_owner or "?"
        try:
            outcome = _overrun_outcome(claim, owner, now) if overrun else _lost_outcome(claim, owner, now)
        except Exception as exc:
            log.exception("task %s: cannot compute its next state; ending it FAILED", claim.task.id)
            outcome = failed_outcome(claim, now, ErrorInfo.from_exception(exc))
        by_owner[owner].append(outcome)
    by_task = {claim.task.id: claim for claim in claims}
    reason = "max_runtime" if overrun else "lost"
    recovered = 0
    for owner, outcomes in by_owner.items():
        applied = store.reap(owner, outcomes, expired_only=not overrun)
        for outcome, ok in zip(outcomes, applied, strict=True):
            if not ok:
                continue
            recovered += 1
            stats.recovered(reason, 1)
            log.warning(
                "task %s (%s): run %s by node %s, execution %s; %s",
                outcome.task_id, by_task[outcome.task_id].task.name, reason, owner, outcome.status,
                what_next(by_task[outcome.task_id], outcome),
            )  # fmt: skip
            if events is not None:
                for event, payload in for_outcome(by_task[outcome.task_id], outcome, owner, lost=not overrun):
                    events.emit(event, payload)
    return recovered


def _lost_outcome(claim: Claim, owner: str, now: datetime) -> Outcome:
    error = ErrorInfo(
        "LeaseExpired", f"lost: node {owner} stopped renewing its lease (expired {claim.task.lease_expires_at})"
    )
    return lost_outcome(claim, now, error, note=f"lost by {owner}")


def _overrun_outcome(claim: Claim, owner: str, now: datetime) -> Outcome:
    limit = claim.task.max_runtime
    error = ErrorInfo("MaxRuntimeExceeded", f"run exceeded its max_runtime of {limit} s on node {owner}")
    return outcome_of(claim, ExecutionStatus.TIMED_OUT, now, error=error, note=f"max_runtime exceeded on {owner}")
