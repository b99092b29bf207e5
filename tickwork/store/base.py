"""The store protocol: every operation a node or a client needs from the database.

Each method documents its contract; the contract tests (tests/test_store_contract.py)
check it against every store. Two rules run through all of it:

* A running task is *claimed*: status RUNNING, its ``version`` bumped by the claim,
  ``lease_owner`` the node, ``lease_expires_at`` the lease end. The bumped version is
  the fence: every later write about that run (renew, finish, release, reap) matches
  ``id``, ``version`` and ``lease_owner`` and changes nothing when they do not match.
* "now" is the store's clock (SQL ``now()`` on a server database, the host clock on an
  embedded file), so nodes whose clocks disagree still agree on what is due.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol

from tickwork.changes import Edit, SyncView, SyncWrites
from tickwork.model import (
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
from tickwork.store.dialect import Election
from tickwork.store.insights import NameStats, NameStatsReport, QueueSample, RunningTask, RunPage, Throughput
from tickwork.store.queues import LimitFacts, QueueInfo

__all__ = [
    "Claim",
    "NameStats",
    "NameStatsReport",
    "NewTask",
    "Outcome",
    "PruneCounts",
    "QueueInfo",
    "QueueSample",
    "Renewal",
    "RunPage",
    "RunningTask",
    "Skipping",
    "Store",
    "Throughput",
]


class DueTime(NamedTuple):
    """One of ``upcoming_due``'s times, and whether a claim looking ahead
    (``claim(ahead=)``) can take its task before it: a plain one-time task's."""

    at: datetime
    early: bool


class Store(Protocol):
    def migrate(self) -> int:
        """Create or upgrade the schema to the latest version; return that version.

        Safe to call from many processes at once: one applies, the others see it done.
        """
        ...

    def now(self) -> datetime:
        """The store's clock, the one that judges due times and lease expiry."""
        ...

    def approximate_now(self) -> datetime:
        """``now()`` without a round trip, off by about half of one: for values a node
        computes on its hot path (retry times, how long to sleep)."""
        ...

    def insert_tasks(self, tasks: Sequence[NewTask], *, max_pending: int | None = None) -> list[Task]:
        """Insert all tasks in one transaction and return them in order.

        A task whose ``key`` equals the key of a task that is not yet terminal is not
        inserted: that existing task is returned instead (idempotent scheduling). With
        ``max_pending``, raise ``QueueFull`` and insert nothing if the tasks inserted and
        due now would take the due-and-unclaimed count past it.
        """
        ...

    def edit_task(self, edit: Edit) -> Task | None:
        """Write ``edit.after``'s definition and state in place (same id, history kept)
        if the task is still as ``edit.before`` was read: same version, revision and
        status. Returns the task as written, or None when it changed meanwhile (read it
        again and recompute). Bumps ``revision``, and ``version`` unless the task is
        RUNNING (its version is the run's fence: the run finishes as it was claimed,
        and ``after.replan_at`` becomes its slot when it ends). Never clears a cancel
        request unless ``edit.reset_cancel``. Raises ``KeyHeld`` when it would give an
        ended task back a key that another live task holds."""
        ...

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
        """One sync of code schedules, serialised with every other sync: remember the
        declaration set ``digest`` (when it was first seen; ``force``: seen now), read
        the code schedules of the declared ``keys`` and the live ones of the task
        ``names``, and the runtime tasks holding those keys, into a ``SyncView``; call
        ``plan`` with it and write what it returns (creates, edits as ``edit_task``,
        removals: cancelled, with a CANCELLED execution holding the note), all in one
        transaction. ``dry_run``: plan, write nothing. Raises ``EditConflict`` when an
        edited task changed in between (a claim): nothing was written, sync again."""
        ...

    def next_due_at(self, names: Sequence[str], queues: Sequence[str] | None = None) -> datetime | None:
        """The earliest ``next_run_at`` among PENDING tasks with these names (in these
        queues; None: any), or None."""
        ...

    def upcoming_due(self, names: Sequence[str], queues: Sequence[str] | None = None, ahead: int = 64) -> list[DueTime]:
        """Up to ``ahead`` of the next dispatch times ``next_due_at`` would give, earliest
        first (each served queue's first ``ahead``, and the lane's earliest, after which
        none: the lane's next is unknown until it passes): a node's sleep hints from one
        claim to the next, never a promise that a task is there."""
        ...

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
        """Claim at most ``limit`` due PENDING tasks with these names, for ``lease`` seconds,
        leaving out the ids in ``exclude`` (tasks the node knows another node is on), from
        the ``queues`` given (None: every queue).

        ``ahead`` (seconds): plain one-time tasks (no limit, priority 0) due up to that
        long from now count as due too, so that one claim serves several close due times;
        the caller starts each run at its due time, not before. Their execution rows say
        they started then (the result's write records the real start). A recurring task is
        claimed only once due: claimed ahead, one whose period is about that short would
        be RUNNING nearly all the time (and its history, kept whole while it runs, never
        pruned); so is a task of the lane, whose limits are judged at a moment.

        Due means ``next_run_at <= now``; oldest due first, higher priority first among
        tasks due at the same time (Quartz's order: it keeps the claim an index walk). Each
        claim bumps the task's version, sets it RUNNING with this node's lease,
        increments ``attempt`` and inserts a RUNNING execution row. A task is claimed
        by at most one node, however many claim at once.
        """
        ...

    def renew(self, node: str, runs: Sequence[tuple[int, int]], lease: float) -> list[Renewal]:
        """Extend the leases of ``(task_id, fence)`` runs this node still owns.

        Runs missing from the result were lost (fence or owner no longer match): the
        node must stop treating them as its own.
        """
        ...

    def finish(self, node: str, outcomes: Sequence[Outcome]) -> list[bool]:
        """Record ended runs: execution row and task state, each fenced.

        Returns, per outcome, whether it was applied. False means a stale result (the
        lease was lost and the run taken over or reaped): nothing was changed.
        """
        ...

    def release(self, node: str, claims: Sequence[Claim], *, notify: bool = True) -> int:
        """Give back claims that never started: PENDING again (CANCELLED if a cancel
        was requested meanwhile), attempt restored, their execution rows removed.
        Fenced; returns how many were released. ``notify=False``: do not wake the nodes
        (claims given back because another node is running them)."""
        ...

    def claimed_since(self, node: str, since: datetime) -> list[Claim]:
        """This node's running claims made at or after ``since`` (by the store's clock)."""
        ...

    def expired(self, limit: int, exclude: Sequence[int] = ()) -> list[Claim]:
        """RUNNING tasks whose lease expired before now, with their execution rows
        (leaving out ``exclude``: runs already judged alive by another signal)."""
        ...

    def overrun(self, limit: int, grace: float) -> list[Claim]:
        """RUNNING tasks whose run was claimed more than their ``max_runtime`` plus
        ``grace`` seconds ago, whether or not their node still renews the lease."""
        ...

    def reap(self, lease_owner: str, outcomes: Sequence[Outcome], *, expired_only: bool = True) -> list[bool]:
        """Like ``finish`` on behalf of the node holding the lease. With ``expired_only``
        (a lost run) only while that lease is still expired: a renewal that lands first
        wins. Without it (an overrun run) the fence alone decides, so the run's own
        result and this write cannot both land."""
        ...

    def get_task(self, task_id: int) -> Task | None: ...

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
        """Tasks filtered by status, name, kind and queue, in id order (``newest_first``:
        the reverse), one page."""
        ...

    def task_headers(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        limit: int = 100,
        offset: int = 0,
        queue: str | None = None,
    ) -> list[TaskHeader]:
        """The id, name and status of ``list_tasks``'s rows, in its order, read without
        decoding them: a row written by another program cannot hide the others."""
        ...

    def task_header(self, task_id: int) -> TaskHeader | None: ...

    def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        """Refuse the dashboard session ``session_id`` from now on, at least until
        ``expires_at`` (no cookie of it is valid after that anyway); forget expired ones.
        Only a digest of the id is stored: nothing a cookie could be made from."""
        ...

    def session_revoked(self, session_id: str) -> bool:
        """Whether the dashboard session ``session_id`` signed out."""
        ...

    def list_executions(
        self, *, task_id: int | None = None, status: ExecutionStatus | None = None, limit: int = 100
    ) -> list[Execution]:
        """Executions, newest first."""
        ...

    def cancel(self, task_id: int, *, run_only: bool = False) -> Task | None:
        """PENDING or PAUSED → CANCELLED; RUNNING → ``cancel_requested`` (the run ends
        CANCELLED, and the task with it). With ``run_only``, only the current run of a
        RUNNING recurring task is asked to stop; the task then goes on to its next slot.
        Returns the task, or None if it does not exist; a task the request does not
        apply to is returned unchanged."""
        ...

    def pause(self, task_id: int) -> Task | None:
        """PENDING → PAUSED; other states unchanged. None if the task does not exist."""
        ...

    def resume(self, task_id: int, skipping: Skipping | None = None) -> Task | None:
        """PAUSED → PENDING; other states unchanged. None if the task does not exist.

        With ``skipping``, the task moves on to ``skipping.next_slot`` and one SKIPPED
        execution records the slots passed over, in the same transaction."""
        ...

    def backfill(self, task_id: int, start: datetime, end: datetime, runs: Sequence[NewTask]) -> list[Task]:
        """Insert the backfill ``runs`` of a recurring task whose slot (``scheduled_at``)
        in [start, end] has not completed (by the task or an earlier backfill) and is not
        waiting in a live backfill run. One transaction, serialised per task: two
        backfills of one range at once schedule each slot once."""
        ...

    def trigger(self, task_id: int) -> Task | None:
        """Make a PENDING task due now. A ONE_TIME task's slot moves to now; a RECURRING
        task gets an extra run now that does not consume its next nominal slot."""
        ...

    def register_node(self, node: Node) -> None: ...

    def node_heartbeat(self, node_id: str, running: int, stuck: Sequence[StuckRun] = ()) -> None:
        """Mark the node alive with ``running`` busy slots, ``stuck`` among them."""
        ...

    def end_execution(
        self, node: str, claim: Claim, status: ExecutionStatus, at: datetime, error: ErrorInfo | None, note: str | None
    ) -> bool:
        """End a run's execution row now while its task stays RUNNING (a thread past its
        timeout that has not let go): fenced by the claim; the task's own write, when the
        thread returns, leaves the row as this made it. False if nothing was changed."""
        ...

    def note_execution(self, task_id: int, execution_id: int, text: str) -> None:
        """Add ``text`` to the note of run ``execution_id`` of task ``task_id`` (what its
        node learnt of it: a thread that did not stop), whether it ended or still runs."""
        ...

    def remove_node(self, node_id: str) -> None: ...

    def prune_nodes(self, silent_for: float) -> int:
        """Remove nodes whose last heartbeat is more than ``silent_for`` seconds old."""
        ...

    def list_nodes(self) -> list[Node]: ...

    def prune(self, older_than: datetime, keep_last: int, limit: int, *, dry_run: bool = False) -> PruneCounts:
        """Delete one bounded batch of old history; return what was deleted.

        Deleted: ONE_TIME tasks ended (COMPLETED, FAILED, CANCELLED) whose last change
        is before ``older_than``, at most ``limit`` of them, with all their executions;
        then at most ``limit`` ended executions that finished before ``older_than``,
        oldest first, except a RECURRING task's newest ``keep_last`` executions (by id,
        whatever their age). Never deleted: a live task (PENDING, RUNNING, PAUSED), a
        RUNNING execution, or any execution of a task that is RUNNING.

        One short transaction of statements bounded by ``limit``: call it again until
        it deletes nothing. One pruner at a time: while another holds the store's prune
        lock this returns at once, nothing done, with ``busy`` set. ``dry_run``: count
        what this call would delete, changing nothing.
        """
        ...

    def due_count(self, limit: int) -> int:
        """How many tasks are due and unclaimed, counting no further than ``limit``."""
        ...

    def queue_depth(self) -> tuple[int, datetime | None]:
        """How many tasks are due and unclaimed, and the due time of the oldest of them."""
        ...

    def stats(self) -> Stats:
        """Queue depth and age, tasks per status, recent runs per status, live nodes."""
        ...

    # -- insights: bounded reads for the dashboard (store/insights.py) ----------------

    def task_name_stats(self, window_s: float, limit: int, *, name: str | None = None) -> NameStatsReport:
        """Per task name (only ``name``'s, if given), the runs that ended in the last
        ``window_s`` seconds: counts, the newest success, p50/p95 of duration and
        lateness. Looks at the newest ``limit`` executions at most (``truncated`` says
        the cap was reached); the busiest ``insights.MAX_NAMES`` names, busiest first."""
        ...

    def set_queue_paused(self, name: str, paused: bool) -> None:
        """Pause or resume a queue: claims leave a paused queue's tasks alone."""
        ...

    def paused_queues(self) -> set[str]:
        """The queues paused now."""
        ...

    def limit_facts(self, task: Task) -> LimitFacts:
        """What holds ``task``'s limits now: its name's RUNNING runs (when it has a
        max_running), a RUNNING task holding its lock, its rate's next allowed start."""
        ...

    def due_by_queue(self) -> dict[str, tuple[int, datetime | None]]:
        """Queue -> (due PENDING tasks, the oldest one's dispatch time), queues with any."""
        ...

    def queues(self, name: str | None = None) -> list[QueueInfo]:
        """Every queue in use or ever paused (or only ``name``), by name, with what waits
        in it (at most ``queues.MAX_QUEUES``)."""
        ...

    def sample_queue(self) -> None:
        """Keep this minute's queue depth and oldest due age (one row per minute for the
        cluster, a day of them): what the dashboard draws over the last hour."""
        ...

    def queue_samples(self, since: datetime) -> list[QueueSample]:
        """The samples from ``since`` on, oldest first."""
        ...

    def throughput(self, window_s: float, bucket_s: float, limit: int) -> Throughput:
        """Runs that ended per ``bucket_s`` seconds over the last ``window_s`` (rounded up
        to whole buckets), by status, among the newest ``limit`` executions."""
        ...

    def find_executions(
        self,
        *,
        name: str | None = None,
        status: ExecutionStatus | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        scan: int = 50_000,
    ) -> RunPage:
        """The newest ``limit`` executions among the newest ``scan``, of tasks named
        ``name``, in ``status``, whose slot is in [since, until); with their tasks' names."""
        ...

    def running_tasks(self, limit: int) -> list[RunningTask]:
        """RUNNING tasks by the node holding their lease (then id), at most ``limit``."""
        ...

    def listen(self, on_notify: Callable[[str], None], stop: threading.Event, elect: Election | None = None) -> None:
        """Block until ``stop`` is set, calling ``on_notify(payload)`` for each change
        another process announced ("due": work may be due now; "cancel": a running
        task's cancellation was requested; "": listening (re)started, look for
        yourself). Stores without notifications return at once: nodes then poll.
        ``elect``: stand for the keeper role of ``elect.group`` while listening, telling
        ``elect.on_role`` whether this node holds it (stores without notifications
        elect no keeper: every node watches its due times)."""
        ...

    def announce_due(self) -> None:
        """Wake every listening node: tasks are due that this node cannot take now (a
        keeper whose slots are full). Nothing, where nodes are not notified."""
        ...

    def is_transient(self, exc: BaseException) -> bool:
        """Whether an error raised by this store may go away by itself (connection lost,
        database locked, server restarting): worth retrying the same write."""
        ...

    def close(self) -> None: ...
