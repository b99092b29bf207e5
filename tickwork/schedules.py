"""Schedule arithmetic as pure functions: next nominal time, retry delay, jitter, and
how a finished run moves its task on.

Everything here is a function of (schedule, times); nothing reads the clock or the
store, so the loops stay thin and every rule is unit-tested on its own. All times are
timezone-aware UTC datetimes; cron is evaluated in the task's zone and converted back.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from tickwork import frozen
from tickwork.cron import CronSchedule
from tickwork.model import Claim, ErrorInfo, ExecutionStatus, Kind, Misfire, Outcome, Status, Task
from tickwork.timing import MAX_FIRE_TIMES, IntervalSchedule, Schedule, fire_times, next_fires, require_aware

__all__ = [
    "MAX_FIRE_TIMES",
    "CronSchedule",
    "Decision",
    "IntervalSchedule",
    "Schedule",
    "Settlement",
    "cancel_wins",
    "decide",
    "failed_outcome",
    "fire_times",
    "first_slot_from",
    "jitter_offset",
    "next_fires",
    "next_slot",
    "outcome_of",
    "outcome_with",
    "require_aware",
    "retry_delay",
    "run_slot",
    "schedule_of",
    "settle",
    "skipped_outcome",
]

MAX_RETRY_DELAY = 300.0
"""Cap of the exponential retry backoff, in seconds (DESIGN.md §2)."""


def first_slot_from(schedule: Schedule, anchor: datetime, start: datetime) -> datetime:
    """The first slot at or after ``start`` of a schedule whose slots include ``anchor``
    (an interval's grid is anchored on the task's own slots, earlier or later)."""
    if isinstance(schedule, IntervalSchedule):
        step = timedelta(seconds=schedule.seconds)
        return anchor - ((anchor - start) // step) * step
    return schedule.next_after(start - timedelta(microseconds=1))


def schedule_of(task: Task) -> Schedule | None:
    if task.cron is not None:
        return _cron_schedule(task.cron, task.timezone)
    if task.interval is not None:
        return IntervalSchedule(task.interval)
    return None


@functools.lru_cache(maxsize=1024)
def _cron_schedule(expression: str, timezone: str) -> CronSchedule:
    """Stored expressions were validated when scheduled: every settle of a recurring run
    asks for its schedule, so parse and check each (expression, zone) once per process."""
    return CronSchedule(expression, timezone)


def retry_delay(attempt: int, backoff: float) -> float:
    """Seconds before retrying after attempt ``attempt`` (from 1) failed."""
    if attempt < 1:
        raise ValueError(f"attempt={attempt}: attempts count from 1")
    exponent = min(attempt - 1, 64)  # 2**64 * any backoff is far past the cap
    return min(backoff * 2.0**exponent, MAX_RETRY_DELAY)


def jitter_offset(task_id: int, slot: datetime, jitter: float) -> timedelta:
    """A delay in [0, jitter) that is the same every time for the same (task, slot).

    Deterministic so that a retried or re-claimed slot is not re-rolled, and so that
    the nominal ``scheduled_at`` stays the basis for the next slot (no accumulation).
    """
    if jitter <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(f"{task_id}:{slot.astimezone(UTC).isoformat()}".encode(), digest_size=8).digest()
    span = timedelta(seconds=jitter) // timedelta(microseconds=1)
    # Whole microseconds, floored: rounding could otherwise reach ``jitter`` itself.
    return timedelta(microseconds=int.from_bytes(digest, "big") * span >> 64)


@dataclasses.dataclass(frozen=True, slots=True)
class Settlement:
    """The task's new state after one of its runs ended (written fenced by the store)."""

    status: Status
    scheduled_at: datetime
    next_run_at: datetime
    attempt: int
    triggered: bool


_settlement = frozen.constructor(Settlement)  # ``Settlement(...)`` at a fraction of its cost: one per run


_T = TypeVar("_T")


def run_slot(triggered: bool, scheduled_at: _T, next_run_at: _T) -> _T:
    """The slot a claimed run is for (its execution's ``scheduled_for``): a triggered
    run's is the moment it was made due (``next_run_at``); any other run's is its
    task's nominal slot (``scheduled_at``, which jitter and retry delays never move).

    Generic in the time's type: the store applies it to values as they are stored.
    The set-based claims repeat it in SQL (``claim_skip_locked`` and ``claim_cas_batch``
    in postgres.sql, ``log_claimed_runs`` in sqlite.sql); tests/test_store_rules.py
    holds every copy to one table."""
    return next_run_at if triggered else scheduled_at


def cancel_wins(decided: Status, cancel_requested: bool, cancel_run_only: bool) -> tuple[Status, bool]:
    """Cancel wins: the status a task is written with when one of its runs ends (or is
    given back unstarted: ``decided`` is then PENDING), given its cancel flags at the
    moment of the write; and whether the request stays on record (``cancel_requested``
    after the write; ``cancel_run_only`` is always spent by the run).

    A cancel of the task requested while the run was going on wins over the decision,
    even one made from a snapshot taken before the request. Except when the decision
    completed a one-time task: the run did its work and the task says so (the cancel
    came too late), so that a task's status always matches its last run. A cancel of
    the current run only never ends the task. (``settle`` decides from the snapshot:
    a cancel the node already knew of wins over any outcome.)

    The store applies this at the write, in the statement that checks the fence, so
    that a request landing between the snapshot and the write is not lost: in SQL
    (``settled_task``, the SET list of both stores' ``write_outcomes_batch``, and
    ``release_task`` in queries.sql), which tests/test_store_rules.py holds to this
    function's table."""
    if _cancels_task(cancel_requested, cancel_run_only) and decided is not Status.COMPLETED:
        return Status.CANCELLED, True
    return decided, False


def _cancels_task(cancel_requested: bool, cancel_run_only: bool) -> bool:
    """A cancel of the whole task is requested, not of its current run only."""
    return cancel_requested and not cancel_run_only


def settle(
    task: Task, outcome: ExecutionStatus, now: datetime, *, interrupted: bool = False, replaced: bool = False
) -> Settlement:
    """How a run that ended with ``outcome`` moves ``task`` on.

    ``task`` is the task as claimed: ``task.attempt`` is the attempt that just ran.
    A requested cancellation wins over any outcome (and one requested after the
    snapshot wins when the store writes the decision: ``cancel_wins``). A run
    interrupted by its node's shutdown is due again at once and does not use up an
    attempt. A failure is retried on the same slot with exponential backoff while
    attempts remain; a RECURRING task then moves to its next slot whatever happened,
    a ONE_TIME task ends.
    """
    cancels_task = _cancels_task(task.cancel_requested, task.cancel_run_only)
    # overlap="replace" or cancel(run_only=True): this run ends, the schedule goes on.
    replaced = replaced or (task.cancel_requested and task.cancel_run_only and task.kind is Kind.RECURRING)
    if replaced and not cancels_task:
        slot = next_slot(task, now)
        if past_until(task, slot) or runs_used_up(task, task.run_count + 1):
            return _ended(task, slot)
        return _settlement(Status.PENDING, slot, slot + jitter_offset(task.id, slot, task.jitter), 0, False)
    if cancels_task or outcome is ExecutionStatus.CANCELLED:
        return _settlement(Status.CANCELLED, task.scheduled_at, task.next_run_at, task.attempt, task.triggered)
    if interrupted:
        return _settlement(Status.PENDING, task.scheduled_at, now, task.attempt - 1, task.triggered)
    failed = outcome in (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT)
    if task.kind is Kind.RECURRING and runs_used_up(task, task.run_count + 1):
        return _ended(task, task.scheduled_at if task.triggered else next_slot(task, now))
    if failed and task.attempt <= task.max_retries:
        delay = timedelta(seconds=retry_delay(task.attempt, task.retry_backoff))
        return _settlement(Status.PENDING, task.scheduled_at, now + delay, task.attempt, task.triggered)
    if task.kind is Kind.ONE_TIME:
        final = Status.FAILED if failed else Status.COMPLETED
        return _settlement(final, task.scheduled_at, task.next_run_at, task.attempt, False)
    # A manual (triggered) run does not consume the nominal slot it was run ahead of.
    slot = task.scheduled_at if task.triggered else next_slot(task, now)
    if past_until(task, slot):
        return _ended(task, slot)
    next_run = slot + jitter_offset(task.id, slot, task.jitter)
    return _settlement(Status.PENDING, slot, next_run, 0, False)


def _ended(task: Task, slot: datetime) -> Settlement:
    """A recurring task's schedule reached its end: COMPLETED, at the slot it would have
    taken next. An edit of its ends made while this run went on (``replan_at``) makes
    the store write it PENDING at that slot instead (``edited_decision``): the new ends
    are then judged when it is next claimed."""
    return _settlement(Status.COMPLETED, slot, slot + jitter_offset(task.id, slot, task.jitter), 0, False)


def edited_decision(decided: Status, row: Task) -> Status:
    """The status an outcome's decision becomes at the write, before ``cancel_wins``,
    given the task's row as it is then (``row``): when an edit made while the run went
    on is pending (``replan_at``), a recurring task that the ends it was claimed with
    completed goes on to the edited slot if its ends as they are now allow it (an edit
    may have moved ``until`` or ``max_runs``). The store applies this in
    ``settled_task`` (queries.sql; tests/test_store_rules.py)."""
    if decided is not Status.COMPLETED or row.kind is not Kind.RECURRING or row.replan_at is None:
        return decided
    if past_until(row, row.replan_at) or runs_used_up(row, row.run_count + 1):
        return decided
    return Status.PENDING


def runs_used_up(task: Task, runs: int) -> bool:
    """``runs`` ended runs leave none that ``max_runs`` allows (``run_count`` counts
    every run that ended, retries included, skipped slots not)."""
    return task.max_runs is not None and runs >= task.max_runs


def past_until(task: Task, slot: datetime) -> bool:
    """``slot`` lies after the schedule's end: the task completes instead of taking it."""
    return task.until is not None and slot > task.until


def outcome_of(
    claim: Claim,
    status: ExecutionStatus,
    now: datetime,
    *,
    error: ErrorInfo | None = None,
    result: Any = None,
    note: str | None = None,
    interrupted: bool = False,
    replaced: bool = False,
    started_at: datetime | None = None,
) -> Outcome:
    """The fenced write that records a run that ended at ``now`` and applies ``settle``'s decision."""
    s = settle(claim.task, status, now, interrupted=interrupted, replaced=replaced)
    counts = not interrupted
    return outcome_with(
        claim, status, s, now, error=error, result=result, note=note, started_at=started_at, counts=counts
    )


_new_outcome = frozen.constructor(Outcome)
"""``Outcome(...)`` at a fraction of its cost (tickwork/frozen.py): one per run."""


def outcome_with(
    claim: Claim, status: ExecutionStatus, then: Settlement, now: datetime, *, error: ErrorInfo | None = None,
    started_at: datetime | None = None, skipped: int | None = None, skipped_last: datetime | None = None,
    decision: str | None = None, result: Any = None, note: str | None = None, counts: bool = True, lost_runs: int = 0,
) -> Outcome:  # fmt: skip
    """The one shape of every fenced write about an ended (or skipped) run. Made by
    position, in Outcome's field order (by name costs twice as much; tests/test_schedules.py)."""
    c, t = claim, then
    return _new_outcome(
        c.task.id, c.fence, c.execution_id, status, t.status, t.scheduled_at, t.next_run_at, t.attempt, t.triggered,
        now, error, started_at, skipped, skipped_last, decision, result, note, counts, lost_runs,
    )  # fmt: skip


def next_slot(task: Task, now: datetime) -> datetime:
    """The slot after ``task.scheduled_at``; drift-free: never computed from ``now``.

    A slot that is already missed is left to the misfire decision when it is claimed.
    """
    schedule = schedule_of(task)
    if schedule is None:
        raise ValueError(f"task {task.id} is not recurring")
    return schedule.next_after(task.scheduled_at)


COUNT_LIMIT = 1_000_000
"""Missed cron slots are counted one by one up to this many (a year of a per-minute cron)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a claimed slot that may have been missed."""

    run: bool
    """Run the claimed slot now; otherwise record the skipped slots and move on."""
    next_slot: datetime
    """The task's nominal slot after this decision (the claimed one when it runs)."""
    skipped: int = 0
    skipped_first: datetime | None = None
    skipped_last: datetime | None = None
    text: str | None = None


_decision = frozen.constructor(Decision)  # one per run, as _settlement (tickwork/frozen.py)


def decide(task: Task, now: datetime) -> Decision:
    """The misfire policy for the claimed slot ``task.scheduled_at`` at ``now`` (pure).

    A slot is missed when it is more than ``misfire_grace`` before ``now`` (counted from
    the end of its jitter window, so jitter never makes an on-time slot late); the
    missed slots are that slot and every later one up to the same horizon. SKIP runs
    none of them; SINGLE_CATCHUP runs the latest; CATCHUP runs them all, oldest first,
    each when it is claimed, but at most ``max_catchup`` (the oldest beyond that are
    skipped). A decision that does not run the claimed slot moves the task to the next
    slot to consider and records the skipped ones; a later claim then decides again.
    Only a slot's first attempt is decided: retries, recovered runs and manual
    (triggered) runs always run.
    """
    slot = task.scheduled_at
    horizon = now - timedelta(seconds=task.misfire_grace + task.jitter)
    if not task.triggered and task.attempt <= 1:
        if task.until is not None and slot > task.until:
            return _decision(False, slot, 0, text=f"the schedule ended at {task.until.isoformat()}")
        if runs_used_up(task, task.run_count):
            return _decision(False, slot, 0, text=f"the schedule ended after max_runs={task.max_runs} runs")
    if task.triggered or task.attempt > 1 or slot >= horizon:
        return _decision(True, slot)
    if task.until is not None:
        horizon = min(horizon, task.until + timedelta(microseconds=1))  # no missed slot after the end
    if task.kind is Kind.ONE_TIME:
        if task.misfire is Misfire.SKIP:
            return _decision(False, slot, 1, slot, slot, f"missed by more than {task.misfire_grace:g} s: skipped")
        return _decision(True, slot)
    schedule = schedule_of(task)
    assert schedule is not None
    last = schedule.latest_until(slot, horizon - timedelta(microseconds=1))  # the newest missed slot
    if task.misfire is Misfire.SKIP:
        count = _count(schedule, slot, last)
        return _skipping(count, slot, last, schedule.next_after(last), "SKIP")
    if task.misfire is Misfire.SINGLE_CATCHUP:
        if last == slot:
            return _decision(True, slot)
        before = schedule.latest_until(slot, last - timedelta(microseconds=1))
        return _skipping(_count(schedule, slot, before), slot, before, last, "SINGLE_CATCHUP runs the latest")
    # CATCHUP: keep the newest max_catchup missed slots, found by stepping back from the last.
    kept = last
    for _ in range(task.max_catchup - 1):
        if kept == slot:
            return _decision(True, slot)  # no more missed slots than the cap
        kept = schedule.latest_until(slot, kept - timedelta(microseconds=1))
    if kept == slot:
        return _decision(True, slot)
    before = schedule.latest_until(slot, kept - timedelta(microseconds=1))
    policy = f"CATCHUP capped at {task.max_catchup}"
    return _skipping(_count(schedule, slot, before), slot, before, kept, policy)


def _skipping(count: int, first: datetime, last: datetime, then: datetime, policy: str) -> Decision:
    shown = f"{count}+" if count >= COUNT_LIMIT else str(count)
    text = (
        f"{shown} missed slots skipped ({first.isoformat()} .. {last.isoformat()}), {policy}; next {then.isoformat()}"
    )
    return Decision(False, then, count, first, last, text)


def _count(schedule: Schedule, first: datetime, last: datetime) -> int:
    """How many slots lie in [first, last] (both slots): arithmetic for intervals; for
    cron one walk, stopped at COUNT_LIMIT (a record then says "at least")."""
    if isinstance(schedule, IntervalSchedule):
        return (last - first) // timedelta(seconds=schedule.seconds) + 1
    count = 1
    current = first
    while count < COUNT_LIMIT and (current := schedule.next_after(current)) <= last:
        count += 1
    return count


def skipped_outcome(claim: Claim, decision: Decision, now: datetime) -> Outcome:
    """The fenced write for a claimed slot the misfire policy does not run: the claim's
    execution row becomes the SKIPPED record, the task moves to ``decision.next_slot``
    (or ends FAILED, for a one-time task), and no attempt is used up."""
    task = claim.task
    slot = decision.next_slot
    if task.kind is Kind.ONE_TIME:
        then = Settlement(Status.FAILED, slot, slot, task.attempt - 1, False)
    elif past_until(task, slot) or runs_used_up(task, task.run_count):
        then = _ended(task, slot)
    else:
        then = Settlement(
            Status.PENDING, slot, slot + jitter_offset(task.id, slot, task.jitter), task.attempt - 1, False
        )
    return outcome_with(
        claim, ExecutionStatus.SKIPPED, then, now, note=decision.text, skipped=decision.skipped,
        skipped_last=decision.skipped_last, decision=decision.text,
    )  # fmt: skip


def failed_outcome(
    claim: Claim, now: datetime, error: ErrorInfo, note: str = "next state could not be computed"
) -> Outcome:
    """Ends the task FAILED whatever its retry and recurrence rules: for ``on_lost="fail"``,
    and when its next state cannot be computed (a stored value the policy cannot use), so
    that the run is recorded and its slot freed instead of stuck RUNNING."""
    task = claim.task
    then = Settlement(Status.FAILED, task.scheduled_at, task.next_run_at, task.attempt, False)
    return outcome_with(claim, ExecutionStatus.FAILED, then, now, error=error, note=note)
