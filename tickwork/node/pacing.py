"""When the poll loop asks the store for work, and how long it sleeps in between.

Two rules keep sparse work cheap (one claim per due instant, across all the nodes):

* A node whose last claim left slots idle took everything then claimable, and knows
  when its next task is due (``Claimer.sleep_for``). A slot freed by a finished run
  does not make it ask again: it sleeps on to that due time. News (work scheduled here,
  a NOTIFY, a result that makes its task due again, a run whose end may free a limit)
  does make it ask.
* Of the nodes claiming the same tasks, one (the keeper, elected through the store:
  ``Store.listen``'s ``elect``) wakes for each due time; the others (followers) sleep
  the poll interval, woken by news and by the due times their own results set (a
  recurring task's next slot, a retry: nothing announces those to the keeper). The
  keeper calls on them (``Store.announce_due``) when a claim comes back full after one
  that was not (more is due than it can take), or when a due time passes while its
  slots are full. Where no keeper is elected (SQLite, or the listening connection is
  down), every node watches the due times itself. A keeper that freezes delays due work
  by at most the followers' poll interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from tickwork.model import Outcome, Status
from tickwork.node.claims import Claimer, Round
from tickwork.node.run import Run
from tickwork.store.base import Store
from tickwork.wakeup import Rang, Wakeup

log = logging.getLogger("tickwork.worker")

MAX_RESULT_HOLD_S = 0.05
"""The longest an idle node holds a result back for others to share its write: sparse
runs 10 ms apart then cost a write per five; a result is seen that much later at most."""

Pause = tuple[float, bool]
"""How long to sleep, and whether new work may end the sleep early."""


class Pacer:
    def __init__(
        self, claimer: Claimer, store: Store, wakeup: Wakeup, free_slots: Callable[[], int], poll_interval: float
    ) -> None:
        self.claimer, self.store, self.wakeup = claimer, store, wakeup
        self.free_slots, self.poll_interval = free_slots, poll_interval
        self.role: bool | None = None
        """True: this node is its group's keeper; False: another node is; None: no keeper
        is known (this node watches the due times itself)."""
        self._drained_at: datetime | None = None
        """When the last claim that left slots idle was asked (None: the last claim
        filled every slot, or news came since)."""
        self._passed_at: datetime | None = None
        """Due times at or before this were claimed, or announced by this keeper."""
        self._idle = False
        """The poll loop sleeps after a claim that drained what was due, with slots idle
        (set by that claim, cleared when the sleep ends)."""
        self._wakes_at = 0.0
        """When (monotonic) the idle sleep ``after_claim`` chose ends at the latest."""

    def on_role(self, role: bool | None) -> None:
        """The store's election says who keeps the due times (on the listening thread)."""
        if role == self.role:
            return
        if role is not None or self.role is not None:
            shown = {True: "is its group's keeper", False: "is a follower", None: "watches its due times itself"}
            log.info("this node %s", shown[role])
        self.role = role
        self.claimer.watch_due = role is not False
        if role is not False:
            self.wakeup.set()  # watch the due times from now on

    def after_claim(self, got: Round, free: int) -> Pause | None:
        """The pause after a claim round for ``free`` slots (None: claim again at once)."""
        self._passed_at = got.seen_at
        if got.claimed == free:
            if self.role is True and self._drained_at is not None:
                self._announce()  # more is due than the keeper can take: call on the others
            self._drained_at = None
            return None  # every slot filled: more may be due
        self._drained_at = got.seen_at
        self._idle = True
        seconds = self.claimer.sleep_for(free - got.claimed, got.seen_at)
        self._wakes_at = time.monotonic() + seconds
        return seconds, True

    def when_full(self) -> Pause:
        """The pause when no slot is free. A keeper still watches the due times (from the
        times it has, read again once a poll interval old): one that passes while it is
        full is announced, once, for the others to take, as soon as the store too sees
        it due (a follower that claimed before then would find nothing and sleep its
        poll interval)."""
        if self.role is not True:
            return self.claimer.sleep_for(0), True
        due = self.claimer.next_due(self._passed_at, read_when_out=False)
        if due is None:
            return self.poll_interval, True
        margin = timedelta(seconds=self.claimer.store_margin())
        wait = (due + margin - self.store.approximate_now()).total_seconds()
        if wait > 0:
            return min(self.poll_interval, wait), True
        self._announce()
        self._passed_at = self.store.approximate_now() - margin  # what it called the others for
        return 0.0, True

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds`` unless woken. A slot freed after a claim that took everything
        then claimable does not end the sleep: no task is due until the next due time
        after that claim, so the sleep runs on to it, and the run's end costs no claim."""
        try:
            self._sleep(seconds)
        finally:
            self._idle = False  # awake: what it decides next may need a freed slot's wake

    def _sleep(self, seconds: float) -> None:
        while True:
            rang = self.wakeup.wait(seconds)
            if rang is Rang.NEWS:
                self._drained_at = None
                self.claimer.forget_upcoming()
                return
            if rang is Rang.TIMEOUT or self._drained_at is None:
                return
            free = self.free_slots()
            seconds = self.claimer.sleep_for(free, self._drained_at)
            if seconds <= 0 or free <= 0:
                return

    def result_hold(self, batch: Sequence[tuple[Run, Outcome]]) -> float:
        """How long ended runs' results may wait to be written with those of runs that end
        soon after (one write for several: Recorder): up to ``claim_ahead``, and at most
        ``MAX_RESULT_HOLD_S``, while the poll loop sleeps, slots idle, to a due time, and
        not past that sleep's end (news may end it sooner: a claim then finds these
        slots still held, 50 ms at most); never for a run whose end may let a limit's
        held-back tasks go, and not past a due time a result sets (a recurring task's
        next slot, a retry)."""
        hold = min(self.claimer.settings.claim_ahead, MAX_RESULT_HOLD_S, self._wakes_at - time.monotonic())
        if hold <= 0 or not self._idle:
            return 0.0
        now: datetime | None = None
        for run, outcome in batch:
            if run.limited:
                return 0.0
            if outcome.task_status is Status.PENDING:
                now = now or self.store.approximate_now()
                hold = min(hold, (outcome.next_run_at - now).total_seconds())
        return max(0.0, hold)

    def ends_hold(self, run: Run, outcome: Outcome) -> bool:
        """Whether a result that comes while the recorder holds a batch may end the hold
        (``result_hold``'s answer for the batch with it may be sooner): a run a limit
        governs, a result that sets a due time, or the node no longer idle. Any other
        waits for the hold's end without waking the recorder."""
        return run.limited or outcome.task_status is Status.PENDING or not self._idle

    def due_again(self, times: list[datetime]) -> None:
        """Results written here left their tasks PENDING, due at ``times`` (a recurring
        task's next slot, a retry): news, and times this node watches even as a
        follower, since no NOTIFY tells the keeper of them."""
        self.claimer.expect(times)
        self.wakeup.set()

    def run_forgotten(self, limited: bool) -> None:
        """A run left its slot. One whose task a limit (``lock``, ``max_running``,
        ``rate_limit``) governs may release tasks that limit held back, which no due time
        announces: that is news, and the node claims again."""
        if limited:
            self.wakeup.set()
        elif not self._idle:
            self.wakeup.slot_freed()
        # else the poll loop sleeps, slots idle, to the next due time: a freed slot
        # changes nothing it would do on waking, and not waking it saves a thread switch

    def _announce(self) -> None:
        try:
            self.store.announce_due()
        except Exception as exc:  # the followers still poll: late, not lost
            log.warning("could not call on the other nodes (%s); they find the work by polling", type(exc).__name__)
