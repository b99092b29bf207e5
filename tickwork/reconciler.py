"""Zombie recovery: runs whose node stopped renewing their lease.

Every node runs this; it is idempotent and fenced. A lost run's execution is marked
FAILED (note "lost", naming the node that held it) and the task moves on exactly as
after a failure: retried while attempts remain, else next slot or FAILED. The write is
made only while the lease is still expired, so a slow node that renews first wins.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from tickwork.events import Events, for_outcome
from tickwork.model import ErrorInfo, ExecutionStatus, OnLost
from tickwork.schedules import failed_outcome, outcome_of
from tickwork.store.base import Outcome, Store

log = logging.getLogger("tickwork.reconciler")

BATCH = 100


def reconcile(store: Store, node_ttl: float = 90.0, events: Events | None = None) -> int:
    """Recover one batch of expired runs and forget nodes silent for ``node_ttl``
    seconds; return how many runs this call recovered."""
    pruned = store.prune_nodes(node_ttl)
    if pruned:
        log.warning("removed %d node rows with no heartbeat for %.0f s", pruned, node_ttl)
    expired = store.expired(BATCH)
    if not expired:
        return 0
    now = store.now()
    by_owner: dict[str, list[Outcome]] = defaultdict(list)
    for claim in expired:
        owner = claim.task.lease_owner or "?"
        error = ErrorInfo(
            "LeaseExpired",
            f"lost: node {owner} stopped renewing its lease (expired {claim.task.lease_expires_at})",
        )
        try:
            if claim.task.on_lost is OnLost.FAIL:
                outcome = failed_outcome(claim, now, error, note=f"lost by {owner}; on_lost=fail")
            else:
                outcome = outcome_of(claim, ExecutionStatus.FAILED, now, error=error, note=f"lost by {owner}")
        except Exception as exc:
            log.exception("task %s: cannot compute its next state; ending it FAILED", claim.task.id)
            outcome = failed_outcome(claim, now, ErrorInfo.from_exception(exc))
        by_owner[owner].append(outcome)
    claims = {claim.task.id: claim for claim in expired}
    recovered = 0
    for owner, outcomes in by_owner.items():
        applied = store.reap(owner, outcomes)
        recovered += sum(applied)
        for outcome, ok in zip(outcomes, applied, strict=True):
            if ok:
                log.warning("task %s: run lost by node %s, marked FAILED", outcome.task_id, owner)
                if events is not None:
                    for event, payload in for_outcome(claims[outcome.task_id], outcome, owner, lost=True):
                        events.emit(event, payload)
    return recovered
