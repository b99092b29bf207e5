"""An in-memory ``Store`` for unit tests of the node: no database, no threads, a clock
the test drives.

It is a second, independent implementation of the contract in tickwork/store/base.py,
written from the SQL store's queries (queries.sql, retention.sql, edits.sql, insights.sql
and their dialect overrides) rather than from its Python: the contract suite runs
against it too, so a disagreement between the two shows up as a failing contract test
instead of a node test that passes on a store no deployment has. Policy (what a run's
outcome means for its task) is not repeated here: outcomes arrive already decided by
tickwork.schedules, as they do for SQLStore.

Rows are frozen ``Task`` / ``Execution`` values replaced whole on every write, the way
an UPDATE replaces a row; readers get deep copies of the JSON parts, because the SQL
stores hand out fresh objects and a caller (a task mutating its arguments) must not be
able to change what is stored. One lock serialises every operation, which is what a
transaction per call gives the SQL stores.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import heapq
import itertools
import json
import re
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

from tickwork import limits
from tickwork.changes import Edit, Removal, SyncView, SyncWrites
from tickwork.clock import utcnow
from tickwork.codec import clean_text, dumps, json_problem
from tickwork.errors import EditConflict, KeyHeld, QueueFull
from tickwork.model import (
    TERMINAL_STATUSES,
    Claim,
    ErrorInfo,
    Execution,
    ExecutionStatus,
    Kind,
    NewTask,
    Node,
    Outcome,
    PruneCounts,
    Renewal,
    Skipping,
    Stats,
    Status,
    StuckRun,
    Task,
    TaskHeader,
)
from tickwork.schedules import edited_decision
from tickwork.store import insights, retention
from tickwork.store.base import DueTime
from tickwork.store.queues import LimitFacts, QueueInfo
from tickwork.store.sql import RECENT_RUNS_WINDOW

__all__ = ["FakeStore"]

# The statuses that are not terminal: a task in one holds its idempotency key (the SQL
# stores' partial unique index), and is one a cancel applies to.
LIVE = frozenset({Status.PENDING, Status.RUNNING, Status.PAUSED})

# How often a blocked ``listen`` looks at its ``stop`` event. A threading.Event cannot
# wake a condition it does not own, so this bounds how long a node's stop waits for its
# listener; notifications themselves are delivered without this delay.
LISTEN_STOP_CHECK_S = 0.01

_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")


def _latest_schema_version() -> int:
    """What ``migrate`` of a fresh SQL database returns, so the fake answers the same."""
    folder = resources.files("tickwork.store").joinpath("migrations/sqlite")
    numbers = [int(m.group(1)) for entry in folder.iterdir() if (m := _MIGRATION.match(entry.name))]
    return max(numbers, default=0)


def _utc(value: datetime) -> datetime:
    """Times as the SQL stores give them back: aware, in UTC. A naive time is refused,
    as the SQLite store refuses it (it cannot be placed on the store's clock)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise TypeError(f"naive datetime {value!r}: the store keeps aware times only")
    return value.astimezone(UTC)


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else _utc(value)


def _thaw(value: Any) -> Any:
    """A private copy of a stored JSON value (empty containers, the usual case, cheaply)."""
    if isinstance(value, list) and not value:
        return []
    if isinstance(value, dict) and not value:
        return {}
    return copy.deepcopy(value)


SCAN_LIMITED = 500
"""store/limits.SCAN: most due tasks of the lane one claim reads."""


def _started(logged: datetime | None, o: Outcome) -> datetime | None:
    """The run's start as written: the outcome's, else the logged one, never after its
    end (a run claimed ahead and cancelled before its due time never started)."""
    if o.started_at is not None:
        return _utc(o.started_at)
    return None if logged is None else min(logged, _utc(o.finished_at))


def _in_lane(task: Task) -> bool:
    """limits.sql's lane: a limit, or a priority other than 0."""
    return task.priority != 0 or task.lock is not None or task.max_running is not None or task.rate_limit is not None


def _lane_order(task: Task) -> tuple[int, datetime, int]:
    return (-task.priority, task.next_run_at, task.id)


def _claim_order(task: Task) -> tuple[datetime, int, int]:
    """Oldest due first, higher priority first among equals (the claim index's order)."""
    return (task.next_run_at, -task.priority, task.id)


class FakeStore:
    """Every ``Store`` operation in memory. ``clock`` is the store's clock: what is due,
    when leases end and every stamp written come from it, so a test that passes a driven
    clock's ``now`` moves time for the store as SQL ``now()`` does for a database."""

    def __init__(self, clock: Callable[[], datetime] = utcnow) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._notified = threading.Condition(self._lock)
        self._tasks: dict[int, Task] = {}
        self._executions: dict[int, Execution] = {}  # in id order: ids only grow
        self._runs_of: dict[int, list[int]] = {}  # task id -> its execution ids, oldest first
        self._by_key: dict[str, list[int]] = {}  # idempotency key -> every task that had it
        self._nodes: dict[str, Node] = {}
        self._samples: dict[datetime, insights.QueueSample] = {}
        self._paused_queues: dict[str, tuple[bool, datetime]] = {}
        self._limits: dict[str, limits.KeyState] = {}  # tickwork_limits
        self._revoked: dict[str, datetime] = {}  # SHA-256 of a session id -> until when
        self._schedule_sets: dict[str, datetime] = {}  # declaration set digest -> first seen
        self._inboxes: dict[int, deque[str]] = {}  # one per blocked listen() call
        self._last_task_id = 0
        self._last_execution_id = 0
        self._last_listener = 0

    # -- schema, clock, lifecycle ------------------------------------------------------

    def migrate(self) -> int:
        return _latest_schema_version()

    def now(self) -> datetime:
        return self._clock()

    def approximate_now(self) -> datetime:
        return self._clock()

    def _now(self) -> datetime:
        """The clock for what the fake writes and compares: in UTC, as every stamp the
        SQL stores read back is, whatever zone a test's clock answers in."""
        return _utc(self._clock())

    def is_transient(self, exc: BaseException) -> bool:
        """Nothing here fails by itself: an error the fake raises is a caller's bug."""
        return False

    def close(self) -> None:
        """Nothing to release; the fake stays usable, as a closed SQLite store does."""

    def announce_due(self) -> None:
        with self._lock:
            self._notify("due")

    def listen(self, on_notify: Callable[[str], None], stop: threading.Event, elect: Any = None) -> None:
        """Deliver what the PostgreSQL store NOTIFYs, on the caller's thread (a node's
        listener thread, as in production), until ``stop`` is set. Registered before the
        opening ``""``, so nothing announced after it is missed."""
        if stop.is_set():
            return
        with self._lock:
            self._last_listener += 1
            token = self._last_listener
            inbox: deque[str] = deque()
            self._inboxes[token] = inbox
        try:
            on_notify("")
            while not stop.is_set():
                with self._lock:
                    if not inbox:
                        self._notified.wait(LISTEN_STOP_CHECK_S)
                    payloads = list(inbox)
                    inbox.clear()
                for payload in payloads:  # outside the lock: a callback may call the store
                    on_notify(payload)
        finally:
            with self._lock:
                del self._inboxes[token]

    def _notify(self, payload: str) -> None:
        """pg_notify at commit: every listener hears it (lock held by the caller)."""
        for inbox in self._inboxes.values():
            inbox.append(payload)
        self._notified.notify_all()

    # -- scheduling -------------------------------------------------------------------

    def insert_tasks(self, tasks: Sequence[NewTask], *, max_pending: int | None = None) -> list[Task]:
        if not tasks:
            return []
        payloads = [(dumps(new.args), dumps(new.kwargs)) for new in tasks]  # unencodable: nothing written
        with self._lock:
            now = self._now()
            if max_pending is not None:
                fresh = self._fresh(tasks)
                new_due = sum(1 for new, f in zip(tasks, fresh, strict=True) if f and new.next_run_at <= now)
                # Counted as the SQL store counts: the rows due once inserted, up to a cap;
                # refused before anything is written, as its rollback leaves nothing.
                depth = min(self._due(now) + new_due, max_pending + new_due + 1)
                if new_due and depth > max_pending:
                    raise QueueFull(max_pending, depth - new_due, new_due)
            return self._insert(tasks, payloads, now)

    def _fresh(self, tasks: Sequence[NewTask]) -> list[bool]:
        """Which tasks an insert would write: not those repeating the key of a live task,
        stored or earlier in the same batch."""
        fresh: list[bool] = []
        keys: set[str] = set()
        for new in tasks:
            fresh.append(new.key is None or (new.key not in keys and self._live_holder(new.key) is None))
            if new.key is not None:
                keys.add(new.key)
        return fresh

    def _live_holder(self, key: str, *, other_than: int | None = None) -> int | None:
        for task_id in self._by_key.get(key, ()):
            if task_id != other_than and self._tasks[task_id].status in LIVE:
                return task_id
        return None

    def _insert(
        self, tasks: Sequence[NewTask], payloads: Sequence[tuple[str, str]], now: datetime, *, notify: bool = True
    ) -> list[Task]:
        """Write the tasks in order; one whose key a live task holds (one written just
        before it in this batch, too) is that task instead, handed out with ``existed``.
        ``notify=False``: the caller announces the change when its whole write is done."""
        written: list[tuple[int, bool]] = []
        for new, (args, kwargs) in zip(tasks, payloads, strict=True):
            holder = None if new.key is None else self._live_holder(new.key)
            existed = holder is not None
            if holder is None:
                self._last_task_id += 1
                holder = self._last_task_id
                self._tasks[holder] = self._new_task(holder, new, args, kwargs, now)
                if new.key is not None:
                    self._by_key.setdefault(new.key, []).append(holder)
            written.append((holder, existed))
        if notify:
            self._notify("due")
        return [self._out(self._tasks[task_id], existed=existed) for task_id, existed in written]

    @staticmethod
    def _new_task(task_id: int, new: NewTask, args: str, kwargs: str, now: datetime) -> Task:
        """The row as the tables' columns and defaults make it (numbers in their column types)."""
        return Task(
            id=task_id,
            name=new.name,
            args=json.loads(args),
            kwargs=json.loads(kwargs),
            key=new.key,
            kind=new.kind,
            cron=new.cron,
            timezone=new.timezone,
            interval=None if new.interval is None else float(new.interval),
            scheduled_at=_utc(new.scheduled_at),
            next_run_at=_utc(new.next_run_at),
            status=Status.PENDING,
            misfire=new.misfire,
            misfire_grace=float(new.misfire_grace),
            jitter=float(new.jitter),
            timeout=None if new.timeout is None else float(new.timeout),
            max_retries=int(new.max_retries),
            retry_backoff=float(new.retry_backoff),
            priority=int(new.priority),
            version=0,
            lease_owner=None,
            lease_expires_at=None,
            cancel_requested=False,
            triggered=False,
            attempt=0,
            run_count=0,
            last_status=None,
            created_at=now,
            updated_at=now,
            max_catchup=int(new.max_catchup),
            overlap=new.overlap,
            last_decision=None,
            parent_id=new.parent_id,
            on_lost=new.on_lost,
            cancel_run_only=False,
            max_runtime=None if new.max_runtime is None else float(new.max_runtime),
            until=_utc_or_none(new.until),
            max_runs=None if new.max_runs is None else int(new.max_runs),
            origin=new.origin,
            declared_at=_utc_or_none(new.declared_at),
            revision=0,
            replan_at=None,
            replan_run_at=None,
            max_lost=int(new.max_lost),
            lost_runs=0,
            queue=str(new.queue),
            lock=new.lock,
            max_running=new.max_running,
            rate_limit=new.rate_limit,
        )

    def upcoming_due(self, names: Sequence[str], queues: Sequence[str] | None = None, ahead: int = 64) -> list[DueTime]:
        wanted = set(names)
        with self._lock:
            due = [
                (self._may_start_at(t), _in_lane(t), t.kind is Kind.ONE_TIME)
                for t in self._tasks.values()
                if t.status is Status.PENDING
                and t.name in wanted
                and (queues is None or t.queue in queues)
                and not self._paused(t.queue)
            ]
        lane = min((at for at, in_lane, _ in due if in_lane), default=None)  # the times end at the lane's first
        times = [DueTime(at, one_time and not in_lane) for at, in_lane, one_time in due if lane is None or at <= lane]
        return sorted(times)[:ahead]

    def next_due_at(self, names: Sequence[str], queues: Sequence[str] | None = None) -> datetime | None:
        first = self.upcoming_due(names, queues, 1)
        return first[0].at if first else None

    def _may_start_at(self, task: Task) -> datetime:
        """Its dispatch time, or its rate's next allowed start if later (next_due_at)."""
        if task.rate_limit is None:
            return task.next_run_at
        tat = self._limits.get(limits.rate_key(task.name), limits.KeyState()).tat
        return task.next_run_at if tat is None or tat <= task.next_run_at else tat

    def backfill(self, task_id: int, start: datetime, end: datetime, runs: Sequence[NewTask]) -> list[Task]:
        payloads = [(dumps(new.args), dumps(new.kwargs)) for new in runs]
        with self._lock:
            taken = self._taken_slots(task_id, start, end)
            fresh = [
                (new, payload) for new, payload in zip(runs, payloads, strict=True) if new.scheduled_at not in taken
            ]
            if not fresh:
                return []
            return self._insert([new for new, _ in fresh], [payload for _, payload in fresh], self._now())

    def _taken_slots(self, task_id: int, start: datetime, end: datetime) -> set[datetime]:
        """Slots in [start, end] completed by the task or its backfill runs, or waiting in
        a live backfill run."""
        children = [t for t in self._tasks.values() if t.parent_id == task_id]
        taken = {
            e.scheduled_for
            for owner in [task_id, *(t.id for t in children)]
            for e in self._executions_of(owner)
            if e.status is ExecutionStatus.COMPLETED and start <= e.scheduled_for <= end
        }
        taken.update(t.scheduled_at for t in children if t.status in LIVE and start <= t.scheduled_at <= end)
        return taken

    # -- edits and syncs of code schedules (edits.sql) -----------------------------------

    def edit_task(self, edit: Edit) -> Task | None:
        payload = (dumps(edit.after.args), dumps(edit.after.kwargs))  # unencodable: nothing written
        with self._lock:
            task = self._edit(edit, payload, self._now())
            if task is None:
                return None
            self._notify("due")
            return self._out(task)

    def _edit(self, edit: Edit, payload: tuple[str, str], now: datetime) -> Task | None:
        """``edit_task``'s write (lock held): the key check of a revival, then the
        guarded write of the definition and state; None when the guard fails."""
        before, after = edit.before, edit.after
        if before.status not in LIVE and after.status in LIVE and after.key is not None:
            holder = self._live_holder(after.key, other_than=before.id)
            if holder is not None:
                raise KeyHeld(before.id, before.status.value, "retry", after.key, holder)
        task = self._tasks.get(before.id)
        if task is None or _guard(task) != _guard(before):
            return None
        # A decision is written only when the edit made one; the stored one stays otherwise.
        decision = after.last_decision if after.last_decision != before.last_decision else None
        task = self._tasks[task.id] = dataclasses.replace(
            task,
            name=after.name,
            args=json.loads(payload[0]),
            kwargs=json.loads(payload[1]),
            cron=after.cron,
            timezone=after.timezone,
            interval=None if after.interval is None else float(after.interval),
            misfire=after.misfire,
            misfire_grace=float(after.misfire_grace),
            jitter=float(after.jitter),
            timeout=None if after.timeout is None else float(after.timeout),
            max_retries=int(after.max_retries),
            retry_backoff=float(after.retry_backoff),
            priority=int(after.priority),
            max_catchup=int(after.max_catchup),
            overlap=after.overlap,
            on_lost=after.on_lost,
            max_runtime=None if after.max_runtime is None else float(after.max_runtime),
            until=_utc_or_none(after.until),
            max_runs=None if after.max_runs is None else int(after.max_runs),
            max_lost=int(after.max_lost),
            queue=str(after.queue),
            max_running=after.max_running,
            rate_limit=after.rate_limit,
            lost_runs=0 if edit.reset_cancel else task.lost_runs,
            declared_at=_utc_or_none(after.declared_at),
            status=after.status,
            scheduled_at=_utc(after.scheduled_at),
            next_run_at=_utc(after.next_run_at),
            attempt=int(after.attempt),
            triggered=after.triggered,
            replan_at=_utc_or_none(after.replan_at),
            replan_run_at=_utc_or_none(after.replan_run_at),
            # A cancel request that landed after ``before`` was read is never lost.
            cancel_requested=False if edit.reset_cancel else task.cancel_requested,
            cancel_run_only=False if edit.reset_cancel else task.cancel_run_only,
            last_decision=task.last_decision if decision is None else decision,
            # A running task's version is its run's fence: the run finishes as claimed.
            version=task.version + (0 if task.status is Status.RUNNING else 1),
            revision=task.revision + 1,
            updated_at=now,
        )
        return task

    def sync_schedules(
        self,
        digest: str,
        keys: Sequence[str],
        names: Sequence[str],
        plan: Callable[[SyncView], SyncWrites],
        *,
        dry_run: bool = False,
        force: bool = False,
    ) -> SyncWrites:
        """One transaction under the one lock (``plan`` must not call the store): what
        it writes is undone whole when any part of it fails (``EditConflict``, ``KeyHeld``,
        an unencodable create, a plan that raises)."""
        with self._lock:
            saved = self._save()
            try:
                now = self._now()
                if not dry_run:
                    self._schedule_sets.setdefault(digest, now)
                    if force:
                        self._schedule_sets[digest] = now
                # A forced sync's set counts as seen now, in a dry run too.
                seen = now if force else self._schedule_sets.get(digest, now)
                writes = plan(self._sync_view(now, seen, keys, names))
                if dry_run:
                    return writes
                self._apply(writes, now)
            except BaseException:
                self._restore(saved)
                raise
            self._notify("due")
            if writes.remove:
                self._notify("cancel")
            return writes

    def _sync_view(self, now: datetime, seen: datetime, keys: Sequence[str], names: Sequence[str]) -> SyncView:
        """``code_schedules`` and ``runtime_key_holders``: the newest code schedule of each
        key (by id), if its key is declared or it is live and of a registered name; and
        the live runtime tasks holding a declared key."""
        declared, registered = set(keys), set(names)
        newest: dict[str, Task] = {}
        for task in self._tasks.values():  # in id order: the last one of a key is its newest
            if task.origin == "code" and task.key is not None:
                newest[task.key] = task
        code = {
            key: self._out(task)
            for key, task in newest.items()
            if key in declared or (task.name in registered and task.status in LIVE)
        }
        holders = {
            task.key: self._out(task)
            for task in self._tasks.values()
            if task.key is not None and task.key in declared and task.origin is None and task.status in LIVE
        }
        return SyncView(now=now, seen=seen, code=code, holders=holders)

    def _apply(self, writes: SyncWrites, now: datetime) -> None:
        """A sync's plan, in the SQL store's order: creates, edits, removals."""
        payloads = [(dumps(new.args), dumps(new.kwargs)) for new in writes.create]
        if writes.create:
            self._insert(writes.create, payloads, now, notify=False)
        for edit in writes.edit:
            if self._edit(edit, (dumps(edit.after.args), dumps(edit.after.kwargs)), now) is None:
                raise EditConflict(edit.before.id)
        for removal in writes.remove:
            self._remove(removal, now)

    def _remove(self, removal: Removal, now: datetime) -> None:
        """``remove_code_schedule`` and ``note_removal``: a waiting schedule ends CANCELLED
        now, a running one is asked to stop (and ends CANCELLED with its run); guarded by
        the revision the plan read (a claim in between does not matter, an edit does)."""
        task = self._tasks.get(removal.task.id)
        if task is None or task.revision != removal.task.revision or task.status not in LIVE:
            raise EditConflict(removal.task.id)
        running = task.status is Status.RUNNING
        self._tasks[task.id] = dataclasses.replace(
            task,
            status=Status.RUNNING if running else Status.CANCELLED,
            cancel_requested=running,
            cancel_run_only=False,
            declared_at=_utc(removal.declared_at),
            removed_at=now,
            last_decision=removal.note,
            replan_at=None,
            replan_run_at=None,
            version=task.version + (0 if running else 1),
            revision=task.revision + 1,
            updated_at=now,
        )
        self._log(
            task.id, 0, _utc(removal.task.scheduled_at), now, ExecutionStatus.CANCELLED, finished_at=now,
            note=removal.note,
        )  # fmt: skip

    def _save(self) -> tuple[Any, ...]:
        """Everything a sync may write, copied: rows are frozen values, so copies of the
        containers are enough to roll back to."""
        return (
            dict(self._tasks), dict(self._executions), {k: list(v) for k, v in self._runs_of.items()},
            {k: list(v) for k, v in self._by_key.items()}, dict(self._schedule_sets), self._last_task_id,
            self._last_execution_id,
        )  # fmt: skip

    def _restore(self, saved: tuple[Any, ...]) -> None:
        (
            self._tasks, self._executions, self._runs_of, self._by_key, self._schedule_sets, self._last_task_id,
            self._last_execution_id,
        ) = saved  # fmt: skip

    # -- claims and leases ------------------------------------------------------------

    def claim(
        self,
        node: str,
        names: Sequence[str],
        limit: int,
        lease: float,
        exclude: Sequence[int] = (),
        queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> list[Claim]:
        if limit <= 0 or not names or (queues is not None and not queues):
            return []
        wanted, excluded = set(names), set(exclude)
        served = None if queues is None else set(queues)
        with self._lock:
            now = self._now()
            until = now + timedelta(seconds=lease)
            due_by = now + timedelta(seconds=ahead)  # plain one-time tasks only (store/base.py)
            claimable = [
                t
                for t in self._tasks.values()
                if t.status is Status.PENDING
                and (t.next_run_at <= now or (t.next_run_at <= due_by and not _in_lane(t) and t.kind is Kind.ONE_TIME))
                and t.name in wanted
                and t.id not in excluded
                and (served is None or t.queue in served)
                and not self._paused(t.queue)
            ]
            lane = sorted((t for t in claimable if _in_lane(t)), key=_lane_order)[:SCAN_LIMITED]
            claims = self._claim_limited([t for t in lane if t.priority >= 0], limit, node, now, until)
            due = heapq.nsmallest(limit - len(claims), (t for t in claimable if not _in_lane(t)), key=_claim_order)
            claims += [self._claim_task(t, node, now, until) for t in due]
            if len(claims) < limit:
                low = [self._tasks[t.id] for t in lane if t.priority < 0]
                claims += self._claim_limited(low, limit - len(claims), node, now, until)
            return sorted(claims, key=lambda c: _lane_order(c.task))

    def _claim_limited(self, found: list[Task], free: int, node: str, now: datetime, until: datetime) -> list[Claim]:
        """limits.sql's transaction: count what runs under each key, let limits.choose
        decide, claim the chosen, keep the keys' new state."""
        candidates = [
            limits.Candidate(t.id, t.version, t.name, t.next_run_at, t.priority, t.lock, t.max_running, t.rate_limit)
            for t in found
        ]
        running: Counter[str] = Counter()
        for t in self._tasks.values():
            if t.status is Status.RUNNING:
                running[limits.name_key(t.name)] += 1
            if t.status is Status.RUNNING and t.lock is not None:
                running[limits.lock_key(t.lock)] += 1
        choice = limits.choose(candidates, free, running=running, states=self._limits, now=now)
        self._limits.update(choice.states)
        claims = []
        for c in sorted(choice.chosen, key=lambda c: c.id):
            claim = self._claim_task(self._tasks[c.id], node, now, until)
            when = choice.judged_at.get(c.id)
            claims.append(claim if when is None else dataclasses.replace(claim, judged_at=when))
        return claims

    def _claim_task(self, task: Task, node: str, now: datetime, until: datetime) -> Claim:
        """The claim's write: version bumped (the new fence), attempt counted, and the
        RUNNING execution row logged for the slot the run stands for."""
        task = dataclasses.replace(
            task,
            status=Status.RUNNING,
            version=task.version + 1,
            lease_owner=node,
            lease_expires_at=until,
            attempt=task.attempt + 1,
            updated_at=now,
        )
        self._tasks[task.id] = task
        # A triggered recurring run is an extra one at its trigger time, not the nominal slot.
        slot = task.next_run_at if task.triggered else task.scheduled_at
        started = max(now, task.next_run_at)  # claimed ahead, it starts when due
        run = self._log(task.id, task.attempt, slot, started, ExecutionStatus.RUNNING, node=node, fence=task.version)
        return Claim(self._out(task), run.id, run.scheduled_for)

    def _log(
        self,
        task_id: int,
        attempt: int,
        scheduled_for: datetime,
        started_at: datetime,
        status: ExecutionStatus,
        *,
        finished_at: datetime | None = None,
        node: str | None = None,
        fence: int | None = None,
        note: str | None = None,
        skipped: int | None = None,
        skipped_last: datetime | None = None,
    ) -> Execution:
        """Append an execution row (a claim's RUNNING one, or a resume's SKIPPED record)."""
        self._last_execution_id += 1
        row = Execution(
            self._last_execution_id, task_id, attempt, scheduled_for, started_at, finished_at, status, node, fence,
            error=None, result=None, note=note, skipped=skipped, skipped_last=skipped_last,
        )  # fmt: skip
        self._executions[row.id] = row
        self._runs_of.setdefault(task_id, []).append(row.id)
        return row

    def _held(self, task_id: int, fence: int, node: str) -> Task | None:
        """The task, if ``node`` still runs it under ``fence``: the guard of every write
        about a claimed run."""
        task = self._tasks.get(task_id)
        if task is None or task.status is not Status.RUNNING or task.version != fence or task.lease_owner != node:
            return None
        return task

    def renew(self, node: str, runs: Sequence[tuple[int, int]], lease: float) -> list[Renewal]:
        if not runs:
            return []
        renewed: list[Renewal] = []
        with self._lock:
            until = self._now() + timedelta(seconds=lease)
            for task_id, fence in sorted(set(runs)):  # one row is updated once, however often named
                task = self._held(task_id, fence, node)
                if task is not None:
                    self._tasks[task_id] = dataclasses.replace(task, lease_expires_at=until)
                    renewed.append(Renewal(task_id, fence, task.cancel_requested, task.cancel_run_only))
        return renewed

    def finish(self, node: str, outcomes: Sequence[Outcome]) -> list[bool]:
        return self._settle(node, outcomes, reaping=False, expired_only=False)

    def reap(self, lease_owner: str, outcomes: Sequence[Outcome], *, expired_only: bool = True) -> list[bool]:
        return self._settle(lease_owner, outcomes, reaping=True, expired_only=expired_only)

    def _settle(self, node: str, outcomes: Sequence[Outcome], *, reaping: bool, expired_only: bool) -> list[bool]:
        if not outcomes:
            return []
        applied = [False] * len(outcomes)
        with self._lock:
            now = self._now()
            for i in sorted(range(len(outcomes)), key=lambda i: outcomes[i].task_id):
                applied[i] = self._settle_one(node, outcomes[i], now, expired_only)
            if reaping and any(applied):
                self._notify("due")  # recovered runs are due again
        return applied

    def _settle_one(self, node: str, o: Outcome, now: datetime, expired_only: bool) -> bool:
        task = self._held(o.task_id, o.fence, node)
        if task is None:
            return False
        if expired_only and not (task.lease_expires_at is not None and task.lease_expires_at < now):
            return False  # the owner renewed first: its run is not lost
        # An edit made while the run went on (replan_at) turns a recurring completion by
        # the claimed ends into going on (schedules.edited_decision); then cancel wins
        # over that decision, except over a completion; a run-only cancel is spent.
        decided = edited_decision(o.task_status, task)
        cancels = task.cancel_requested and not task.cancel_run_only and decided is not Status.COMPLETED
        decision = clean_text(o.decision) if o.decision else None
        # The replan is taken when the task moves on to a next slot; a retry of this slot
        # keeps it for later; any end of the task (cancel winning included) spends it.
        # A run of this slot again (lost, interrupted: it does not count) keeps it too.
        moves_on = decided is Status.PENDING and o.attempt == 0 and o.counts
        replan = _replan(task) if moves_on else None
        retrying = o.task_status is Status.PENDING and (o.attempt != 0 or not o.counts) and not cancels
        self._tasks[task.id] = dataclasses.replace(
            task,
            status=Status.CANCELLED if cancels else decided,
            cancel_requested=cancels,
            cancel_run_only=False,
            scheduled_at=_utc(o.scheduled_at) if replan is None else replan[0],
            next_run_at=_utc(o.next_run_at) if replan is None else replan[1],
            attempt=o.attempt,
            triggered=o.triggered if replan is None else False,
            replan_at=task.replan_at if retrying else None,
            replan_run_at=task.replan_run_at if retrying else None,
            run_count=task.run_count + (0 if o.status is ExecutionStatus.SKIPPED or not o.counts else 1),
            lost_runs=o.lost_runs,
            last_status=o.status,
            last_decision=decision if decision is not None else task.last_decision,
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
        )
        run = self._executions.get(o.execution_id)
        if run is not None and run.status is ExecutionStatus.RUNNING:
            self._executions[run.id] = self._ended(run, o)
        return True

    @staticmethod
    def _ended(run: Execution, o: Outcome) -> Execution:
        """The execution row as ended by ``o``: texts any store can keep, and a result that
        cannot be stored dropped with a note rather than failing the write."""
        result, note = o.result, o.note
        if result is not None and (problem := json_problem(result)) is not None:
            result, note = None, f"{note}; result not stored: {problem}" if note else f"result not stored: {problem}"
        error = None
        if o.error is not None:
            error = ErrorInfo(clean_text(o.error.type), clean_text(o.error.message), clean_text(o.error.traceback))
        return dataclasses.replace(
            run,
            status=o.status,
            started_at=_started(run.started_at, o),
            finished_at=_utc(o.finished_at),
            error=error,
            result=None if result is None else json.loads(dumps(result)),
            note=clean_text(note) if note else None,
            skipped=o.skipped,
            skipped_last=_utc_or_none(o.skipped_last),
        )

    def release(self, node: str, claims: Sequence[Claim], *, notify: bool = True) -> int:
        if not claims:
            return 0
        released = 0
        with self._lock:
            now = self._now()
            for c in sorted(claims, key=lambda c: c.task.id):
                task = self._held(c.task.id, c.fence, node)
                if task is None:
                    continue
                cancels = task.cancel_requested and not task.cancel_run_only
                # A pending replan waits for the end of the run the slot will still get;
                # a cancel that wins spends it.
                self._tasks[task.id] = dataclasses.replace(
                    task,
                    status=Status.CANCELLED if cancels else Status.PENDING,
                    cancel_requested=cancels,
                    cancel_run_only=False,
                    replan_at=None if cancels else task.replan_at,
                    replan_run_at=None if cancels else task.replan_run_at,
                    attempt=task.attempt - 1,
                    lease_owner=None,
                    lease_expires_at=None,
                    updated_at=now,
                )
                self._forget_run(c.execution_id)
                released += 1
            if released and notify:
                self._notify("due")
        return released

    def _forget_run(self, execution_id: int) -> None:
        run = self._executions.get(execution_id)
        if run is not None and run.status is ExecutionStatus.RUNNING:
            del self._executions[execution_id]
            self._runs_of[run.task_id].remove(execution_id)

    def claimed_since(self, node: str, since: datetime) -> list[Claim]:
        with self._lock:
            found = [
                (task, run)
                for task, run in self._running()
                if task.lease_owner == node and run.started_at is not None and run.started_at >= since
            ]
            return [self._claim_of(task, run) for task, run in sorted(found, key=lambda pair: pair[0].id)]

    def expired(self, limit: int, exclude: Sequence[int] = ()) -> list[Claim]:
        excluded = set(exclude)
        with self._lock:
            now = self._now()
            found = [
                (task, run)
                for task, run in self._running()
                if task.lease_expires_at is not None and task.lease_expires_at < now and task.id not in excluded
            ]
            found.sort(key=lambda pair: (pair[0].lease_expires_at, pair[0].id))
            return [self._claim_of(task, run) for task, run in found[: max(limit, 0)]]

    def overrun(self, limit: int, grace: float) -> list[Claim]:
        with self._lock:
            now = self._now()
            found = [
                (task, run)
                for task, run in self._running()
                if task.max_runtime is not None
                and run.started_at is not None
                and run.started_at + timedelta(seconds=task.max_runtime + grace) < now
            ]
            found.sort(key=lambda pair: (pair[1].started_at, pair[0].id))
            return [self._claim_of(task, run) for task, run in found[: max(limit, 0)]]

    def _running(self) -> Iterator[tuple[Task, Execution]]:
        """RUNNING tasks with the RUNNING execution of their current fence (the join the
        SQL store's run queries make: a task without one is not reported)."""
        for task in self._tasks.values():
            if task.status is not Status.RUNNING:
                continue
            for run in self._executions_of(task.id, newest_first=True):
                if run.status is ExecutionStatus.RUNNING and run.fence == task.version:
                    yield task, run
                    break

    def _claim_of(self, task: Task, run: Execution) -> Claim:
        return Claim(self._out(task), run.id, run.scheduled_for)

    # -- reading ----------------------------------------------------------------------

    def get_task(self, task_id: int) -> Task | None:
        with self._lock:
            task = self._tasks.get(task_id)
            return None if task is None else self._out(task)

    def list_tasks(
        self,
        *,
        status: Status | None = None,
        name: str | None = None,
        limit: int = 100,
        offset: int = 0,
        kind: Kind | None = None,
        newest_first: bool = False,
        queue: str | None = None,
    ) -> list[Task]:
        with self._lock:
            found = [
                t
                for t in self._tasks.values()
                if (status is None or t.status is status)
                and (name is None or t.name == name)
                and (kind is None or t.kind is kind)
                and (queue is None or t.queue == queue)
            ]
            if newest_first:
                found.reverse()  # ids only grow: the dict's order is id order
            return [self._out(t) for t in found[max(offset, 0) : max(offset, 0) + max(limit, 0)]]

    def task_headers(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        limit: int = 100,
        offset: int = 0,
        queue: str | None = None,
    ) -> list[TaskHeader]:
        with self._lock:
            return [TaskHeader(t.id, t.name, t.status.value) for t in self._page(status, name, limit, offset, queue)]

    def task_header(self, task_id: int) -> TaskHeader | None:
        with self._lock:
            task = self._tasks.get(task_id)
            return None if task is None else TaskHeader(task.id, task.name, task.status.value)

    def _page(
        self, status: str | None, name: str | None, limit: int, offset: int, queue: str | None = None
    ) -> list[Task]:
        """Tasks in id order (the dict's order: ids only grow), filtered, one page."""
        matching = [
            t
            for t in self._tasks.values()
            if (status is None or t.status == status)
            and (name is None or t.name == name)
            and (queue is None or t.queue == queue)
        ]
        start = max(offset, 0)
        return matching[start : start + max(limit, 0)]

    def list_executions(
        self, *, task_id: int | None = None, status: ExecutionStatus | None = None, limit: int = 100
    ) -> list[Execution]:
        with self._lock:
            rows = self._executions_of(task_id, newest_first=True) if task_id is not None else self._newest_first()
            chosen = [e for e in rows if status is None or e.status is status]
            return [self._out_execution(e) for e in chosen[: max(limit, 0)]]

    def _executions_of(self, task_id: int, *, newest_first: bool = False) -> list[Execution]:
        ids = self._runs_of.get(task_id, [])
        return [self._executions[i] for i in (reversed(ids) if newest_first else ids)]

    def _newest_first(self) -> Iterator[Execution]:
        return (self._executions[i] for i in reversed(self._executions))

    def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        with self._lock:
            self._revoked.setdefault(_session_key(session_id), _utc(expires_at))  # a repeat keeps the first
            now = self._now()
            for key in [k for k, until in self._revoked.items() if until < now]:
                del self._revoked[key]

    def session_revoked(self, session_id: str) -> bool:
        with self._lock:
            return _session_key(session_id) in self._revoked

    # -- managing tasks ---------------------------------------------------------------

    def cancel(self, task_id: int, *, run_only: bool = False) -> Task | None:
        if run_only:
            return self._change(task_id, _cancels_the_run, _cancel_run, notify="cancel")
        return self._change(task_id, lambda t: t.status in LIVE, _cancel_task, notify="cancel")

    def pause(self, task_id: int) -> Task | None:
        return self._change(task_id, lambda t: t.status is Status.PENDING, _pause)

    def resume(self, task_id: int, skipping: Skipping | None = None) -> Task | None:
        if skipping is None:
            return self._change(task_id, lambda t: t.status is Status.PAUSED, _resume, notify="due")
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return None
            if task.status is not Status.PAUSED or task.version != skipping.version:
                return self._out(task)  # changed since the skipped slots were computed
            now = self._now()
            task = dataclasses.replace(
                task,
                status=Status.PENDING,
                version=task.version + 1,
                scheduled_at=_utc(skipping.next_slot),
                next_run_at=_utc(skipping.next_run_at),
                last_decision=skipping.decision,
                updated_at=now,
            )
            self._tasks[task_id] = task
            self._log(
                task_id, 0, _utc(skipping.first), now, ExecutionStatus.SKIPPED,
                finished_at=now, note=skipping.decision, skipped=skipping.count, skipped_last=_utc(skipping.last),
            )  # fmt: skip
            self._notify("due")
            return self._out(task)

    def trigger(self, task_id: int) -> Task | None:
        return self._change(task_id, lambda t: t.status is Status.PENDING, _trigger, notify="due")

    def _change(
        self,
        task_id: int,
        applies: Callable[[Task], bool],
        change: Callable[[Task, datetime], Task],
        notify: str | None = None,
    ) -> Task | None:
        """A guarded state change: the task as changed, or as it is when the guard fails."""
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return None
            if applies(task):
                task = self._tasks[task_id] = change(task, self._now())
                if notify is not None:
                    self._notify(notify)
            return self._out(task)

    # -- nodes ------------------------------------------------------------------------

    def register_node(self, node: Node) -> None:
        with self._lock:
            # The heartbeat is the store's clock, whatever the row says.
            self._nodes[node.id] = dataclasses.replace(node, started_at=_utc(node.started_at), heartbeat_at=self._now())

    def node_heartbeat(self, node_id: str, running: int, stuck: Sequence[StuckRun] = ()) -> None:
        with self._lock:
            node = self._nodes.get(node_id)
            if node is not None:
                kept = tuple(dataclasses.replace(r, since=_utc(r.since)) for r in stuck[:100])
                self._nodes[node_id] = dataclasses.replace(node, heartbeat_at=self._now(), running=running, stuck=kept)

    def end_execution(
        self, node: str, claim: Claim, status: ExecutionStatus, at: datetime, error: ErrorInfo | None, note: str | None
    ) -> bool:
        with self._lock:
            task, run = self._tasks.get(claim.task.id), self._executions.get(claim.execution_id)
            if task is None or run is None or run.status is not ExecutionStatus.RUNNING:
                return False
            if (task.version, task.lease_owner, task.status) != (claim.fence, node, Status.RUNNING):
                return False
            cleaned = None if error is None else ErrorInfo(clean_text(error.type), clean_text(error.message),
                                                           clean_text(error.traceback))  # fmt: skip
            self._executions[run.id] = dataclasses.replace(
                run, status=status, finished_at=_utc(at), error=cleaned, note=clean_text(note) if note else None
            )
            return True

    def note_execution(self, task_id: int, execution_id: int, text: str) -> None:
        with self._lock:
            run = self._executions.get(execution_id)
            if run is not None:
                text = clean_text(text)[:4000]
                note = text if not run.note else f"{run.note}; {text}"
                self._executions[execution_id] = dataclasses.replace(run, note=note)

    def remove_node(self, node_id: str) -> None:
        with self._lock:
            self._nodes.pop(node_id, None)

    def prune_nodes(self, silent_for: float) -> int:
        with self._lock:
            cutoff = self._now() - timedelta(seconds=silent_for)
            silent = [n.id for n in self._nodes.values() if n.heartbeat_at < cutoff]
            for node_id in silent:
                del self._nodes[node_id]
            return len(silent)

    # -- retention (retention.sql: prune_tasks, prune_executions, prune_count) ---------------

    def prune(self, older_than: datetime, keep_last: int, limit: int, *, dry_run: bool = False) -> PruneCounts:
        retention.check(keep_last, limit)
        cutoff = _utc(older_than)
        with self._lock:
            ended = sorted(
                (t for t in self._tasks.values() if t.kind is Kind.ONE_TIME and t.status in TERMINAL_STATUSES),
                key=lambda t: (t.updated_at, t.id),
            )
            doomed = [t.id for t in ended if t.updated_at < cutoff][:limit]
            doomed_runs = [i for task_id in doomed for i in self._runs_of.get(task_id, [])]
            aged = self._aged_executions(cutoff, keep_last, set(doomed))[:limit]
            if not dry_run:
                for task_id in doomed:
                    task = self._tasks.pop(task_id)
                    if task.key is not None:
                        self._by_key[task.key] = [i for i in self._by_key.get(task.key, []) if i != task_id]
                    for execution_id in self._runs_of.pop(task_id, []):
                        del self._executions[execution_id]
                for execution_id in aged:
                    run = self._executions.pop(execution_id)
                    if execution_id in self._runs_of.get(run.task_id, []):
                        self._runs_of[run.task_id].remove(execution_id)
            return PruneCounts(len(doomed_runs) + len(aged), len(doomed))

    def _aged_executions(self, cutoff: datetime, keep_last: int, doomed: set[int]) -> list[int]:
        chosen: list[int] = []
        for e in self._executions.values():  # oldest first
            if e.status is ExecutionStatus.RUNNING or e.finished_at is None or e.finished_at >= cutoff:
                continue
            if e.task_id in doomed:
                continue
            task = self._tasks.get(e.task_id)
            if task is not None:
                if task.status is Status.RUNNING:
                    continue
                newest = self._runs_of.get(e.task_id, [])[-keep_last:] if keep_last else []
                if task.kind is Kind.RECURRING and e.id in newest:
                    continue
            chosen.append(e.id)
        return chosen

    def list_nodes(self) -> list[Node]:
        with self._lock:
            return sorted(self._nodes.values(), key=lambda n: n.started_at)

    # -- the queue's numbers -------------------------------------------------------------

    def _due(self, by: datetime) -> int:
        return sum(1 for t in self._tasks.values() if t.status is Status.PENDING and t.next_run_at <= by)

    def due_count(self, limit: int) -> int:
        with self._lock:
            return min(self._due(self._now()), max(limit, 0))

    def queue_depth(self) -> tuple[int, datetime | None]:
        with self._lock:
            now = self._now()
            due = [t.next_run_at for t in self._tasks.values() if t.status is Status.PENDING and t.next_run_at <= now]
        return len(due), min(due, default=None)

    def stats(self) -> Stats:
        now = self._now()
        depth, oldest = self.queue_depth()
        minute_ago, hour_ago = now - timedelta(minutes=1), now - timedelta(hours=1)
        with self._lock:
            by_status = dict(Counter(t.status.value for t in self._tasks.values()))
            window = itertools.islice(self._newest_first(), RECENT_RUNS_WINDOW)
            ended = [(e.status.value, e.finished_at) for e in window if e.finished_at is not None]
            nodes = len(self._nodes)
        return Stats(
            depth=depth,
            oldest_age=None if oldest is None else max(0.0, (now - oldest).total_seconds()),
            running=by_status.get(Status.RUNNING.value, 0),
            nodes=nodes,
            by_status=by_status,
            runs_last_minute=dict(Counter(status for status, at in ended if at >= minute_ago)),
            runs_last_hour=dict(Counter(status for status, at in ended if at >= hour_ago)),
            # As the SQL store counts it: full when the window held that many ended runs.
            window_full=len(ended) >= RECENT_RUNS_WINDOW,
        )

    # -- insights (insights.sql) ------------------------------------------------------------

    def _recent(self, scan: int) -> list[Execution]:
        """The newest ``scan`` executions: the bounded walk every insight starts with."""
        return list(itertools.islice(self._newest_first(), scan))

    def task_name_stats(self, window_s: float, limit: int, *, name: str | None = None) -> insights.NameStatsReport:
        insights.check(limit, window_s)
        since = self._now() - timedelta(seconds=window_s)
        with self._lock:
            recent = self._recent(limit)
            by_name: dict[str, list[Execution]] = {}
            for e in recent:
                task_name = self._tasks[e.task_id].name
                ended = e.finished_at is not None and e.finished_at >= since
                if ended and e.status is not ExecutionStatus.SKIPPED and name in (None, task_name):
                    by_name.setdefault(task_name, []).append(e)
        names = sorted((_name_stats(n, runs) for n, runs in by_name.items()), key=lambda x: (-x.runs, x.name))
        return insights.NameStatsReport(window_s, names[: insights.MAX_NAMES], bool(by_name) and len(recent) >= limit)

    def set_queue_paused(self, name: str, paused: bool) -> None:
        with self._lock:
            self._paused_queues[name] = (paused, self._now())
            if not paused:
                self._notify("due")

    def queues(self, name: str | None = None) -> list[QueueInfo]:
        now = self._now()
        with self._lock:
            live = [t for t in self._tasks.values() if t.status in LIVE]
            names = sorted(n for n in {t.queue for t in live} | set(self._paused_queues) if name in (None, n))
            out = []
            for name in names[:1000]:
                mine = [t for t in live if t.queue == name]
                due = [t.next_run_at for t in mine if t.status is Status.PENDING and t.next_run_at <= now]
                paused, changed = self._paused_queues.get(name, (False, None))
                out.append(QueueInfo(
                    name, paused, changed, sum(t.status is Status.PENDING for t in mine), len(due),
                    sum(t.status is Status.RUNNING for t in mine), min(due, default=None),
                ))  # fmt: skip
            return out

    def limit_facts(self, task: Task) -> LimitFacts:
        with self._lock:
            running = [t for t in self._tasks.values() if t.status is Status.RUNNING]
            count = sum(t.name == task.name for t in running)
            holder = next((t.id for t in running if task.lock is not None and t.lock == task.lock), None)
            state = self._limits.get(limits.rate_key(task.name))
        return LimitFacts(None if task.max_running is None else count, holder, None if state is None else state.tat)

    def paused_queues(self) -> set[str]:
        with self._lock:
            return {name for name, (paused, _) in self._paused_queues.items() if paused}

    def due_by_queue(self) -> dict[str, tuple[int, datetime | None]]:
        return {q.name: (q.due, q.oldest_due) for q in self.queues() if q.due and not q.paused}

    def _paused(self, queue: str) -> bool:
        return self._paused_queues.get(queue, (False, None))[0]

    def sample_queue(self) -> None:
        depth, oldest = self.queue_depth()
        now = self._now()
        minute = now.replace(second=0, microsecond=0)
        age = None if oldest is None else max(0.0, (now - oldest).total_seconds())
        with self._lock:
            self._samples.setdefault(minute, insights.QueueSample(minute, depth, age))
            for old in [m for m in self._samples if m < now - insights.SAMPLES_KEPT]:
                del self._samples[old]

    def queue_samples(self, since: datetime) -> list[insights.QueueSample]:
        with self._lock:
            return [self._samples[m] for m in sorted(self._samples) if m >= since][:1500]

    def throughput(self, window_s: float, bucket_s: float, limit: int) -> insights.Throughput:
        insights.check(limit, window_s, bucket_s)
        buckets = int(-(-window_s // bucket_s))
        since = self._now() - timedelta(seconds=buckets * bucket_s)
        counts: dict[str, list[int]] = {}
        with self._lock:
            recent = self._recent(limit)
        for e in recent:
            if e.finished_at is not None and e.finished_at >= since and e.status is not ExecutionStatus.SKIPPED:
                bucket = min(int((e.finished_at - since).total_seconds() // bucket_s), buckets - 1)
                counts.setdefault(e.status.value, [0] * buckets)[bucket] += 1
        return insights.Throughput(since, float(bucket_s), buckets, counts, bool(counts) and len(recent) >= limit)

    def find_executions(
        self,
        *,
        name: str | None = None,
        status: ExecutionStatus | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        scan: int = 50_000,
    ) -> insights.RunPage:
        insights.check(scan, 1, field="scan")
        insights.check_limit(limit)
        with self._lock:
            found = [
                e
                for e in self._recent(scan)
                if name in (None, self._tasks[e.task_id].name)
                and status in (None, e.status)
                and (since is None or e.scheduled_for >= since)
                and (until is None or e.scheduled_for < until)
            ][: max(limit, 0)]
            names = {e.task_id: self._tasks[e.task_id].name for e in found}
        return insights.RunPage([self._out_execution(e) for e in found], names, scan)

    def running_tasks(self, limit: int) -> list[insights.RunningTask]:
        insights.check_limit(limit)
        with self._lock:
            running = sorted(
                (t for t in self._tasks.values() if t.status is Status.RUNNING),
                key=lambda t: (t.lease_owner or "", t.id),
            )[: max(limit, 0)]
            out = []
            for t in running:
                run = next(
                    (
                        e
                        for e in self._executions_of(t.id, newest_first=True)
                        if e.status is ExecutionStatus.RUNNING and e.fence == t.version
                    ),
                    None,
                )
                out.append(
                    insights.RunningTask(t.id, t.name, t.lease_owner or "", t.attempt, run.started_at if run else None)
                )
            return out

    # -- handing rows out ----------------------------------------------------------------

    @staticmethod
    def _out(task: Task, *, existed: bool = False) -> Task:
        return dataclasses.replace(task, args=_thaw(task.args), kwargs=_thaw(task.kwargs), existed=existed)

    @staticmethod
    def _out_execution(run: Execution) -> Execution:
        return run if run.result is None else dataclasses.replace(run, result=_thaw(run.result))


# -- the guarded changes of cancel / pause / resume / trigger, one row each ------------


def _guard(task: Task) -> tuple[int, int, Status]:
    """What an edit's ``before`` must still match: a claim, an ended run or another edit
    in between changes one of them."""
    return task.version, task.revision, task.status


def _replan(task: Task) -> tuple[datetime, datetime] | None:
    """The slot and dispatch time an edit of the running ``task`` moved it to, if any."""
    if task.replan_at is None:
        return None
    assert task.replan_run_at is not None, f"task {task.id}: replan_at without replan_run_at"
    return task.replan_at, task.replan_run_at


def _cancels_the_run(task: Task) -> bool:
    """A run-only cancel applies to a running recurring task not already being cancelled whole."""
    return (
        task.status is Status.RUNNING
        and task.kind is Kind.RECURRING
        and not (task.cancel_requested and not task.cancel_run_only)
    )


def _cancel_run(task: Task, now: datetime) -> Task:
    return dataclasses.replace(task, cancel_requested=True, cancel_run_only=True, updated_at=now)


def _cancel_task(task: Task, now: datetime) -> Task:
    """A waiting task ends now (a new version: no old snapshot may write it); a running
    one keeps its fence valid and is only flagged, to end when its run does."""
    running = task.status is Status.RUNNING
    return dataclasses.replace(
        task,
        cancel_requested=True,
        cancel_run_only=False,
        status=Status.RUNNING if running else Status.CANCELLED,
        version=task.version if running else task.version + 1,
        replan_at=task.replan_at if running else None,
        replan_run_at=task.replan_run_at if running else None,
        updated_at=now,
    )


def _pause(task: Task, now: datetime) -> Task:
    return dataclasses.replace(task, status=Status.PAUSED, version=task.version + 1, updated_at=now)


def _resume(task: Task, now: datetime) -> Task:
    return dataclasses.replace(task, status=Status.PENDING, version=task.version + 1, updated_at=now)


def _trigger(task: Task, now: datetime) -> Task:
    """Due now; a one-time task's slot moves with it, a recurring task's extra run leaves
    its nominal slot to come."""
    one_time = task.kind is Kind.ONE_TIME
    return dataclasses.replace(
        task,
        next_run_at=now,
        scheduled_at=now if one_time else task.scheduled_at,
        triggered=not one_time,
        version=task.version + 1,
        updated_at=now,
    )


def _percentile(values: list[float], p: float) -> float | None:
    """percentile_cont: rank (n - 1) * p of the sorted values, interpolated."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _name_stats(name: str, runs: list[Execution]) -> insights.NameStats:
    started = [e for e in runs if e.started_at is not None and e.finished_at is not None]
    durations = [(e.finished_at - e.started_at).total_seconds() for e in started]  # type: ignore[operator]
    lateness = [(e.started_at - e.scheduled_for).total_seconds() for e in started]  # type: ignore[operator]
    successes = [e.finished_at for e in runs if e.status is ExecutionStatus.COMPLETED and e.finished_at]
    return insights.NameStats(
        name=name,
        runs=len(runs),
        succeeded=len(successes),
        failed=sum(1 for e in runs if e.status.value in insights.FAILED_STATUSES),
        last_success=max(successes, default=None),
        p50_duration=_percentile(durations, 0.5),
        p95_duration=_percentile(durations, 0.95),
        p50_lateness=_percentile(lateness, 0.5),
        p95_lateness=_percentile(lateness, 0.95),
    )


def _session_key(session_id: str) -> str:
    """Only a digest is kept, as in the SQL stores: nothing a cookie could be made from."""
    return hashlib.sha256(session_id.encode()).hexdigest()
