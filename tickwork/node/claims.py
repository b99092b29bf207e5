"""One claim round of the poll loop, and how long to sleep after it.

A round asks the store for at most the free slots' worth of due tasks, takes their Redis
locks when locks are on (giving back what a live node holds), and says from when their
leases run. It never blocks on anything but the store, and a failed round leaves no
claim unaccounted for: a claim whose reply was lost is found and given back.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from tickwork.model import Claim
from tickwork.node.health import SLOW_CALL_LEASES, StoreHealth
from tickwork.node.redis_locks import NodeLocks
from tickwork.node.settings import NodeSettings
from tickwork.store.base import DueTime, Store

log = logging.getLogger("tickwork.worker")

# Runs claimed this long before a failed claim are looked at too: the store's clock and
# this node's estimate of it may differ by a round trip.
CLOCK_MARGIN = timedelta(seconds=1)
MAX_ERROR_PAUSE_S = 1.0
"""Longest pause between failing claims: a node resumes within about this much of the
store answering again (each failing try is one connection attempt, cheap for a server)."""
UPCOMING = 64
"""Due times one read of ``upcoming_due`` returns: how many due instants a node sleeps
through, one after another, before it asks again."""
AHEAD_MIN_FREE = 2
"""A claim looks ahead only with this many slots free: a run claimed ahead holds its slot
from the claim, and a node's last slot is kept for what falls due first (a recurring
or limited task due before it, which a claim takes only once due)."""
WAKE_LEAD_S = 0.005
"""How long before the due time of a task a claim can take ahead a node wakes for it (a
claim's round trip): its run, waiting in its slot, then starts on its due time."""
FAILURE_LOG_EVERY = 30
"""While claims keep failing, one log line per this many failures after the first."""
# How far this node's estimate of the store's clock may be off (half a round trip).
CLOCK_ESTIMATE_MARGIN_S = 0.1
CLOCK_SLACK_S = 0.001
"""Added to the store clock's lag behind this node's estimate of it (``Round.seen_at``)."""
ANNOUNCE_SLACK_S = 0.01
"""Added to that lag before a full keeper calls on the others for a due time: a follower
that claimed before the store saw the task due would sleep its poll interval."""
MAX_CLOCK_LAG_S = 1.0
"""The most of that lag a claim counts (a claim that waited long on a lock says little)."""
CLOCK_LAG_DECAY = 0.9
"""Per claim with rows, what is left of the largest lag seen: it follows the estimate's
error as the estimate is refreshed."""


@dataclasses.dataclass(frozen=True)
class Round:
    """What one claim round got: the claims to run (each with its Redis lock token, if
    any), how many the store gave (given-back ones included), and from when (monotonic)
    their leases run."""

    claims: list[tuple[Claim, str | None]]
    claimed: int
    leased_at: float
    took: float
    seen_at: datetime
    """The store-clock time at or before which every due task was visible to the claim:
    one it did not take was held elsewhere (``sleep_for`` passes its due time over)."""


class Claimer:
    def __init__(
        self,
        store: Store,
        node_id: str,
        names: Sequence[str],
        settings: NodeSettings,
        health: StoreHealth,
        *,
        locks: NodeLocks | None = None,
        known: Callable[[], set[int]] = set,
        clock: Callable[[], float] = time.monotonic,
        queues: Sequence[str] | None = None,
    ) -> None:
        self.store, self.node_id, self.names, self.settings = store, node_id, list(names), settings
        self.queues = None if queues is None else list(queues)
        self.health, self.locks, self.known, self.clock = health, locks, known, clock
        self.locked_elsewhere: dict[int, float] = {}  # task id -> monotonic time to try it again
        self.failures = 0
        self._failing_since = 0.0
        self._upcoming: list[DueTime] = []  # due times still ahead, earliest first (sleep_for)
        self._upcoming_read = float("-inf")
        self._expected: list[datetime] = []  # due times this node's own results set (expect)
        self._expected_lock = threading.Lock()
        self._clock_lag = 0.0  # how far behind this node's estimate the store's clock was seen (s)
        self._asked_at: datetime | None = None  # when the last claim was asked (store clock, estimated)
        self.watch_due = True
        """False while another node keeps the due times (tickwork/node/pacing.py): this
        one then sleeps the poll interval between claims, woken by news."""

    def claim(self, free: int) -> Round | None:
        """Claim up to ``free`` due tasks; None when the store failed (the caller pauses
        for ``error_pause()``)."""
        asked_at = self._asked_at = self.store.approximate_now()
        started = self.clock()
        try:
            claims = self.store.claim(
                self.node_id, self.names, free, self.settings.lease, exclude=self._locked_elsewhere_ids(),
                queues=self.queues, ahead=self.settings.claim_ahead if free >= AHEAD_MIN_FREE else 0.0,
            )  # fmt: skip
        except Exception:
            self._give_back_lost_claims(asked_at - CLOCK_MARGIN)
            self._failed(started)
            return None
        took = self.clock() - started
        if took > self.settings.lease * SLOW_CALL_LEASES:
            self.health.slow()  # the claim waited on the store (a lock held elsewhere)
        else:
            self.health.answered()
        if self.failures:
            log.warning("claims work again after %.1f s (%d failed)", started - self._failing_since, self.failures)
        self.failures = 0
        tokens, refused = self._lock(claims)
        kept = [(c, tokens.get(c.execution_id)) for c in claims if c.execution_id not in refused]
        seen_at = self._seen_at(claims, asked_at)
        self._claimed_ahead([c.task.next_run_at for c in claims if c.task.next_run_at > seen_at])
        return Round(kept, len(claims), self._lease_start(claims, started), took, seen_at)

    def _seen_at(self, claims: list[Claim], asked_at: datetime) -> datetime:
        """What the claim saw as due, on the store's clock: ``asked_at`` (this node's
        estimate of that clock) less how far behind the estimate the store's clock was
        lately seen (claimed rows say it: their leases began on the store's clock), and
        at least the latest due time among the due tasks it took (an earlier one it did
        not take was due then too: held elsewhere). A time the estimate says has come may
        not have come for the store yet: passing it over would leave its task to the next
        poll. Tasks claimed ahead (``claim_ahead``) do not move it: a task of the lane or a
        recurring one due before them was not claimable yet (``_claimed_ahead``)."""
        expiries = [c.task.lease_expires_at for c in claims if c.task.lease_expires_at is not None]
        if expiries:
            began = min(expiries) - timedelta(seconds=self.settings.lease)
            behind = min((asked_at - began).total_seconds(), MAX_CLOCK_LAG_S)
            self._clock_lag = max(behind, self._clock_lag * CLOCK_LAG_DECAY)
        seen = asked_at - timedelta(seconds=max(0.0, self._clock_lag) + CLOCK_SLACK_S)
        return max(seen, *(t for c in claims if (t := c.task.next_run_at) <= asked_at), seen)

    def store_margin(self) -> float:
        """Seconds after a due time by this node's estimate of the store's clock by which
        the store, too, sees it due: the lag lately seen, plus ``ANNOUNCE_SLACK_S``."""
        return max(0.0, self._clock_lag) + ANNOUNCE_SLACK_S

    def error_pause(self) -> float:
        """How long to wait after the ``failures``-th failed round in a row."""
        return min(self.settings.poll_interval * self.failures, MAX_ERROR_PAUSE_S)

    def _failed(self, started: float) -> None:
        self.failures += 1
        if self.failures == 1:
            self._failing_since = started
            self.health.failed()
            log.exception("claim failed; retrying until the store answers (every %.0f s at most)", MAX_ERROR_PAUSE_S)
        elif self.failures % FAILURE_LOG_EVERY == 0:
            log.warning("claims still failing (%d in a row, %.0f s)", self.failures, started - self._failing_since)

    def _locked_elsewhere_ids(self) -> list[int]:
        now = self.clock()
        for task_id in [t for t, until in self.locked_elsewhere.items() if until <= now]:
            del self.locked_elsewhere[task_id]
        return list(self.locked_elsewhere)

    def _lock(self, claims: list[Claim]) -> tuple[dict[int, str], set[int]]:
        """Take the Redis locks of fresh claims; give back those another node holds and
        leave those out of this node's claims for a heartbeat (their holder extends
        them every heartbeat, and the next claims must not be the same ones again).
        Returns the tokens and the execution ids given back, both by execution id."""
        if self.locks is None or not claims:
            return {}, set()
        taken = self.locks.take(claims)
        if taken.refused:
            until = self.clock() + self.settings.heartbeat
            for claim in taken.refused:
                self.locked_elsewhere[claim.task.id] = until
            try:
                self.store.release(self.node_id, taken.refused, notify=False)
            except Exception:
                log.warning(
                    "could not give back %d claims; their leases will expire", len(taken.refused), exc_info=True
                )
        return taken.tokens, {c.execution_id for c in taken.refused}

    def _give_back_lost_claims(self, since: datetime) -> None:
        """A claim can commit while its reply is lost: the rows are ours, but nothing here
        knows of them. Release them (fenced) so they run now, not after a lease expiry
        that would count them as failed attempts."""
        try:
            known = self.known()
            lost = [c for c in self.store.claimed_since(self.node_id, since) if c.execution_id not in known]
            if lost:
                released = self.store.release(self.node_id, lost)
                log.warning("gave back %d claims whose confirmation was lost", released)
        except Exception as exc:
            log.warning("could not look for lost claims (%s); their leases will expire", type(exc).__name__)

    def _lease_start(self, claims: list[Claim], sent: float) -> float:
        """When the claims' leases began, on this node's monotonic clock: from the expiry
        the store wrote (a claim can wait long for a lock before it runs), never before
        the claim was sent, less a margin for the error of the store-clock estimate."""
        expiries = [c.task.lease_expires_at for c in claims if c.task.lease_expires_at is not None]
        if not expiries:
            return sent
        began = min(expiries) - timedelta(seconds=self.settings.lease)
        ago = (self.store.approximate_now() - began).total_seconds()
        return max(sent, self.clock() - ago - CLOCK_ESTIMATE_MARGIN_S)

    def sleep_for(self, idle_slots: int, claimed_at: datetime | None = None) -> float:
        """Until the next due task (capped by poll_interval); idle slots make it worth asking.

        A task that was already due when a claim that left slots idle was made was passed
        over by that claim: another node is claiming it, or a session outside tickwork
        holds its row locked. Waking for it again at once would only spin on it: the
        sleep runs to the next due time after that claim, or the poll interval (new
        work, a NOTIFY or a finished run still wakes us).

        The due times come from ``upcoming``: read once, slept through one after another,
        read again once they run out, once a poll interval has passed (what other
        processes add to SQLite, which cannot notify, is found that late at worst, as
        before) or once ``forget_upcoming`` says they may be stale."""
        cap = self.settings.poll_interval
        if idle_slots <= 0:
            return cap  # a finishing run wakes us
        due = self._next(claimed_at)
        if due is None:
            return cap  # a follower is called on when needed
        wait = min(cap, max(0.0, (due.at - self.store.approximate_now()).total_seconds() - self._lead(due)))
        if wait == 0.0 and self.locked_elsewhere:
            # The due task may be one left out as locked elsewhere: retry when it may
            # be free (new work still wakes us), rather than spin on it.
            wait = min(cap, max(0.0, min(self.locked_elsewhere.values()) - self.clock()))
        return wait

    def _lead(self, due: DueTime) -> float:
        """How long before ``due`` to wake: a claim's round trip for a task a claim can
        take ahead, once (a claim asked that early that did not take it, held
        elsewhere, leaves the node to sleep to the time itself)."""
        lead = min(self.settings.claim_ahead, WAKE_LEAD_S) if due.early else 0.0
        if lead and self._asked_at is not None and self._asked_at >= due.at - timedelta(seconds=lead):
            return 0.0
        return lead

    def next_due(self, claimed_at: datetime | None, *, read_when_out: bool = True) -> datetime | None:
        """The first due time after ``claimed_at`` this node watches (a follower: only
        those its own results set); None when there is none, or the store failed.
        ``read_when_out=False``: the times read last are not read again merely because
        they ran out (a full keeper's watch)."""
        due = self._next(claimed_at, read_when_out)
        return None if due is None else due.at

    def _next(self, claimed_at: datetime | None, read_when_out: bool = True) -> DueTime | None:
        try:
            due = self._next_due(claimed_at, read_when_out) if self.watch_due else None
        except Exception:
            log.exception("next_due_at failed")
            return None
        own = self._expected_after(claimed_at)  # a retry or a next slot: not taken ahead
        return DueTime(own, False) if own is not None and (due is None or own < due.at) else due

    def expect(self, times: list[datetime]) -> None:
        """Due times this node's own results set (on the recorder's thread): watched even
        by a follower."""
        with self._expected_lock:
            self._expected = sorted({*self._expected, *times})[:UPCOMING]

    def _expected_after(self, claimed_at: datetime | None) -> datetime | None:
        with self._expected_lock:
            if claimed_at is not None:
                self._expected = [t for t in self._expected if t > claimed_at]
            return self._expected[0] if self._expected else None

    def _claimed_ahead(self, times: list[datetime]) -> None:
        """Due times of tasks a claim took ahead of time (their runs wait in their slots):
        struck from the times this node sleeps to, one early time (a plain one-time
        task's) each, so that it does not wake for them; the others in between (the
        lane's, recurring tasks', which are claimed only once due) stay, and so do the
        times this node's own results set (a follower's only ones: at worst one claim
        more)."""
        for at in times:
            for i, due in enumerate(self._upcoming):
                if due.at == at and due.early:
                    del self._upcoming[i]
                    break

    def forget_upcoming(self) -> None:
        """What is due may have changed (a NOTIFY, work scheduled here, runs given back or
        recovered): the next sleep asks the store again."""
        self._upcoming = []
        self._upcoming_read = float("-inf")

    def _next_due(self, claimed_at: datetime | None, read_when_out: bool = True) -> DueTime | None:
        """The first due time later than ``claimed_at`` (any, when None): from the due
        times read last, unless none is left or they are a poll interval old."""
        if self.clock() - self._upcoming_read <= self.settings.poll_interval:
            due = self._first_after(claimed_at)
            if due is not None or not read_when_out:
                return due
        self._upcoming = self.store.upcoming_due(self.names, self.queues, UPCOMING)
        self._upcoming_read = self.clock()
        return self._first_after(claimed_at)

    def _first_after(self, claimed_at: datetime | None) -> DueTime | None:
        self._upcoming = [t for t in self._upcoming if claimed_at is None or t.at > claimed_at]
        return self._upcoming[0] if self._upcoming else None
