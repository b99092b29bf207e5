"""A node's use of the Redis per-task locks: taken after the database claim, extended
with the leases, released once the result is written, and consulted by the reconciler.

The database claim and its fence stay the authority on who runs a task; the lock adds
a cheap "someone is on it" that other pods see without a query, and a second liveness
signal: a run whose lease expired while its node keeps extending the lock (its database
connection is failing, say) is not declared lost.

Redis being down is an outage to live through, never a reason to restart: in
``best_effort`` mode (the default) a node runs on its database claims alone and warns
once per outage; in ``required`` mode it starts no run until Redis answers again
(runs already going go on under their leases). Either way it notices Redis coming back
by itself.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tickwork.locks import LockStoreUnavailable, RedisLocks
from tickwork.model import Task
from tickwork.node.run import Run
from tickwork.store.base import Claim

log = logging.getLogger("tickwork.locks")

# During an outage Redis is asked again at most this often: an unreachable server costs
# a timeout per call, which must not be paid on every claim.
RETRY_DOWN_S = 2.0
# Held-back releases kept for when Redis returns, at most.
MAX_UNRELEASED = 10_000


class RedisMode(enum.StrEnum):
    BEST_EFFORT = "best_effort"  # Redis down: run on the database claim alone
    REQUIRED = "required"  # Redis down: start no run (fail closed)


@dataclass(frozen=True)
class Taken:
    """The outcome of locking a batch of claims."""

    tokens: dict[int, str]  # by execution id; a claim without one runs unlocked (best effort)
    refused: list[Claim]  # to give back: locked by a live node, or Redis down in required mode


class NodeLocks:
    def __init__(
        self, locks: RedisLocks, *, mode: RedisMode, lease: float, heartbeat: float, lock_ttl: float | None
    ) -> None:
        self.locks = locks
        self.mode = mode
        self.lease = lease
        self.heartbeat = heartbeat
        self.lock_ttl = lock_ttl
        self._down_since: float | None = None
        self._next_try = 0.0
        self._state_lock = threading.Lock()
        # Extension (which may re-take a vanished key) and release never interleave: a
        # lock released after its result was written must not be re-taken by a heartbeat
        # that confirmed the run a moment before the write.
        self._tokens_lock = threading.Lock()
        # Releases Redis did not take (an outage): sent again before the next acquire,
        # or a finished run's lock would refuse its task's next claims for a lease.
        self._unreleased: list[tuple[int, str]] = []

    def ttl_for(self, task: Task) -> float:
        """Above the run's expected length: ``lock_ttl`` if set, else the task's timeout
        plus a lease, else a lease. Heartbeats extend it by the same amount."""
        if self.lock_ttl is not None:
            return self.lock_ttl
        return task.timeout + self.lease if task.timeout is not None else self.lease

    @property
    def stale_after(self) -> float:
        """A lock not extended for this long has no live holder (one extends it every
        heartbeat); it is as dead as an expired lease."""
        return self.lease

    def may_start(self) -> bool:
        """False while Redis is known to be down in required mode (asks Redis again)."""
        if self.mode is RedisMode.BEST_EFFORT or self._down_since is None:
            return True
        if not self._worth_asking():
            return False
        if self.locks.ping():
            self._recovered()
            return True
        with self._state_lock:
            self._next_try = time.monotonic() + RETRY_DOWN_S
        return False

    def take(self, claims: Sequence[Claim]) -> Taken:
        if not claims:
            return Taken({}, [])
        if not self._worth_asking():
            return Taken({}, list(claims) if self.mode is RedisMode.REQUIRED else [])
        try:
            self._flush_unreleased()
            tokens = self.locks.acquire_many(
                [(c.task.id, self.ttl_for(c.task)) for c in claims], stale_after=self.stale_after
            )
        except LockStoreUnavailable as exc:
            self._outage(exc)
            if self.mode is RedisMode.REQUIRED:
                return Taken({}, list(claims))
            return Taken({}, [])
        self._recovered()
        refused = [c for c in claims if tokens[c.task.id] is None]
        for claim in refused:
            log.info("task %s: its Redis lock is held by a live node; giving the claim back", claim.task.id)
        return Taken({c.execution_id: token for c in claims if (token := tokens[c.task.id]) is not None}, refused)

    def extend(self, confirmed: Sequence[Run], unconfirmed: Sequence[Run]) -> tuple[set[int], set[int]]:
        """Extend the locks of this node's runs; return (lost, kept) execution ids.

        ``confirmed`` runs had their lease renewed just now, so a lock Redis forgot (a
        restart without persistence) is taken again; ``unconfirmed`` ones could not be
        renewed (database unreachable), so their lock is only extended, never re-taken,
        and one that was kept is proof this node is alive and still running it.
        """
        batches = [(runs, retake) for runs, retake in ((confirmed, True), (unconfirmed, False)) if runs]
        lost: set[int] = set()
        kept: set[int] = set()
        if not batches or not self._worth_asking():
            return lost, kept
        try:
            with self._tokens_lock:
                self._extend(batches, lost, kept)
        except LockStoreUnavailable as exc:
            self._outage(exc)
            return lost, set()
        self._recovered()
        return lost, kept

    def _extend(self, batches: list[tuple[Sequence[Run], bool]], lost: set[int], kept: set[int]) -> None:
        for runs, retake in batches:
            locked = [r for r in runs if r.lock_token is not None]
            if not locked:
                continue
            results = self.locks.extend_many(
                [(r.task_id, r.lock_token, r.lock_ttl) for r in locked if r.lock_token is not None], retake=retake
            )
            for run in locked:
                extended = results[run.task_id]
                if extended:
                    kept.add(run.execution_id)
                elif extended is False:  # another token holds it: someone else has the lock
                    lost.add(run.execution_id)

    def release(self, runs: Sequence[Run]) -> None:
        with self._tokens_lock:
            items = [(r.task_id, r.lock_token) for r in runs if r.lock_token is not None]
            for run in runs:
                run.lock_token = None
            pending = [(task_id, token) for task_id, token in items if token is not None]
            if not pending:
                return
            if not self._worth_asking():
                self._keep_unreleased(pending)
                return
            try:
                self.locks.release_many(pending)
            except LockStoreUnavailable as exc:
                self._outage(exc)
                self._keep_unreleased(pending)

    def _keep_unreleased(self, items: list[tuple[int, str]]) -> None:
        self._unreleased.extend(items)
        del self._unreleased[:-MAX_UNRELEASED]  # beyond that, the oldest are left to go stale

    def _flush_unreleased(self) -> None:
        """Send the releases an outage held back (token-checked: harmless if stale)."""
        with self._tokens_lock:
            if self._unreleased:
                self.locks.release_many(self._unreleased)
                self._unreleased.clear()

    def live(self, task_ids: Sequence[int]) -> set[int] | None:
        """Of these tasks, those whose lock is still being extended (for the reconciler);
        None when Redis cannot say (down, or in the retry pause after a failure)."""
        if not self._worth_asking():
            return None
        try:
            return self.locks.extended_within(task_ids, self.stale_after)
        except LockStoreUnavailable as exc:
            self._outage(exc)
            return None

    def close(self) -> None:
        self.locks.close()

    def _worth_asking(self) -> bool:
        """Up, or down but due for another try."""
        with self._state_lock:
            return self._down_since is None or time.monotonic() >= self._next_try

    def _outage(self, exc: LockStoreUnavailable) -> None:
        with self._state_lock:
            self._next_try = time.monotonic() + RETRY_DOWN_S
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
        if self.mode is RedisMode.REQUIRED:
            log.warning("Redis unavailable (%s): starting no runs until it is back (redis_mode=required)", exc)
        else:
            log.warning("Redis unavailable (%s): running on database claims alone until it is back", exc)

    def _recovered(self) -> None:
        with self._state_lock:
            since, self._down_since = self._down_since, None
        if since is not None:
            log.warning("Redis is back after %.1f s; per-task locks are in use again", time.monotonic() - since)
