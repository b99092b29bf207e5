"""A worker node: claim due tasks into free slots, run them, keep their leases alive.

Threads and their jobs:
* the poll loop (the thread that calls ``run``): claims at most the free slots and
  sleeps until the next due time, capped by ``poll_interval``, or until woken (a task
  scheduled in this process, a slot freed, a stop request);
* a bounded pool of ``concurrency`` threads that run the claims;
* the monitor: renews leases and the node row every ``heartbeat`` seconds, turns
  cancel requests, lost leases and timeouts into cancellation, and reconciles zombies.

Shutdown is ordered: stop claiming, give back claims that never started, let running
runs finish within ``shutdown_grace``, interrupt and record what is left, stop the
monitor last, remove the node row.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from types import FrameType

from tickwork.clock import utcnow
from tickwork.context import Context
from tickwork.errors import InvalidInput, NodeError
from tickwork.events import Events, for_outcome
from tickwork.metrics import RUNNING, SLOTS, STALE_RESULTS, TaskMetrics
from tickwork.model import Claim, ErrorInfo, ExecutionStatus, Node, Outcome, Overlap, Renewal
from tickwork.node.autoscale import Autoscaler
from tickwork.node.executor import CancelReason, Executor, Run, RunResult
from tickwork.node.health import StoreHealth
from tickwork.node.isolation import prepare
from tickwork.node.reconciler import reconcile
from tickwork.node.recorder import Recorder
from tickwork.node.redis_locks import NodeLocks
from tickwork.node.renewer import Renewer
from tickwork.node.settings import NodeSettings
from tickwork.registry import Isolation, Registry
from tickwork.schedules import decide, failed_outcome, outcome_of, schedule_of, skipped_outcome
from tickwork.store.base import Store

log = logging.getLogger("tickwork.worker")

# A node row whose heartbeat is older than this (and three leases) belongs to a dead node.
NODE_TTL_FLOOR_S = 60.0
# A busy node whose runs are short claims again once 1/N of its capacity is free.
CLAIM_BATCH_DIVISOR = 4
# Prefetch never exceeds this many claims per slot.
PREFETCH_CAP_PER_SLOT = 4
# While cancelled runs are awaited at shutdown, say so this often.
INTERRUPT_LOG_EVERY_S = 5.0
# Runs claimed this long before a failed claim are looked at too: the store's clock and
# this node's estimate of it may differ by a round trip.
CLOCK_MARGIN = timedelta(seconds=1)
MAX_ERROR_PAUSE_S = 1.0
"""Longest pause between failing claims: a node resumes within about this much of the
store answering again (each failing try is one connection attempt, cheap for a server)."""
FAILURE_LOG_EVERY = 30
"""While claims keep failing, one log line per this many failures after the first."""
# A store call that kept its caller waiting this many leases may have let leases lapse:
# it counts as an outage (see node/health.py).
SLOW_CALL_LEASES = 0.5
# How far this node's estimate of the store's clock may be off (half a round trip).
CLOCK_ESTIMATE_MARGIN_S = 0.1
# After the store failed, the reconciler waits a heartbeat plus this before reaping: room
# for an owner's connection wait (2 s at most), its recorder's retry pause (1 s) and a margin.
POST_OUTAGE_MARGIN_S = 5.0
# How often an autoscaling node looks at the queue.
AUTOSCALE_EVERY_S = 1.0
# A run whose lease could not be renewed for this fraction of the lease cancels itself
# rather than keep running unowned.
LEASE_SAFETY = 0.8


class Prefetch:
    """How many claims a node holds beyond its busy slots.

    Enough to keep the slots busy during one refill (the round trips that write results
    and claim more), at the rate runs are ending: ``concurrency * refill time / run time``,
    capped. Long runs give ~0, so a node never sits on work another node could start;
    very short runs give the cap, so a node is not bound by its round trips. With no runs
    observed yet it is 0: a node starting on a herd takes only its slots.
    """

    SMOOTHING = 0.2

    def __init__(self, concurrency: int, cap: int) -> None:
        self.concurrency = concurrency
        self.cap = cap
        self.run_s: float | None = None
        self.refill_s: float | None = None

    def observe_run(self, seconds: float) -> None:
        self.run_s = self._smooth(self.run_s, seconds)

    def observe_refill(self, seconds: float) -> None:
        self.refill_s = self._smooth(self.refill_s, seconds)

    def extra(self) -> int:
        if self.cap <= 0 or self.run_s is None or self.refill_s is None:
            return 0
        return min(self.cap, int(self.concurrency * self.refill_s / max(self.run_s, 1e-6)))

    def _smooth(self, average: float | None, sample: float) -> float:
        return sample if average is None else average + self.SMOOTHING * (sample - average)


class RunThreads:
    """The node's slots: ``size`` threads taking runs from one queue, in order.

    Lighter than a ThreadPoolExecutor (no future per run): the node tracks its runs
    itself, and a run given back at shutdown is skipped when its turn comes.
    """

    def __init__(self, size: int, target: Callable[[Run], None]) -> None:
        self._queue: queue.SimpleQueue[Run | None] = queue.SimpleQueue()
        self._target = target
        self._size = 0
        self._started = 0
        self._lock = threading.Lock()
        self.resize(size)

    def submit(self, run: Run) -> None:
        self._queue.put(run)

    def resize(self, size: int) -> None:
        """Start threads, or let some end once they reach their turn in the queue (a run
        going on is never interrupted by a shrink)."""
        with self._lock:
            for _ in range(size - self._size):
                self._started += 1
                threading.Thread(target=self._main, name=f"tickwork-run-{self._started}", daemon=True).start()
            for _ in range(self._size - size):
                self._queue.put(None)
            self._size = size

    def shutdown(self) -> None:
        """Let the threads end once they reach the end of the queue."""
        self.resize(0)

    def _main(self) -> None:
        while (run := self._queue.get()) is not None:
            self._target(run)


class Worker:
    """A node, built from its collaborators (``App.worker()`` composes one for an App)."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        settings: NodeSettings,
        *,
        events: Events | None = None,
        wakeup: threading.Event | None = None,
        locks: NodeLocks | None = None,
        concurrency: int = 8,
        prefetch: int | None = None,
        node_id: str | None = None,
        autoscaler: Autoscaler | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInput("concurrency", concurrency, "must be an integer of at least 1")
        self.autoscaler = autoscaler
        if autoscaler is not None:
            concurrency = autoscaler.minimum
        self._next_scale_check = 0.0
        self.settings = settings
        self.registry = registry
        self.events = events if events is not None else Events(None, None)
        self.wakeup = wakeup if wakeup is not None else threading.Event()
        """Set to wake the poll loop: work scheduled in this process, a slot freed, a stop."""
        if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0):
            raise InvalidInput("prefetch", prefetch, "must be an integer >= 0, or None (adaptive)")
        self.prefetch = Prefetch(concurrency, PREFETCH_CAP_PER_SLOT * concurrency if prefetch is None else prefetch)
        self._adaptive_prefetch = prefetch is None
        self._metrics = TaskMetrics()
        self._locked_elsewhere: dict[int, float] = {}  # task id -> monotonic time to try it again
        self.store = store
        self.concurrency = concurrency
        self.node_id = node_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.names = registry.names()
        self.executor = Executor(settings.max_payload)
        prepare([d.func for d in registry if d.options.isolation is Isolation.PROCESS])
        self._pool = RunThreads(concurrency, self._execute)
        self._runs: dict[int, Run] = {}  # by execution id: one entry per claimed run
        self._runs_lock = threading.Lock()
        self._runs_changed = threading.Condition(self._runs_lock)
        self._stopping = threading.Event()
        self._monitor_stop = threading.Event()
        self._monitor_wake = threading.Event()
        self._beat_now = threading.Event()
        self._monitor: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        self._reconciler: threading.Thread | None = None
        self._monitor_failed: BaseException | None = None
        self._recorder: Recorder[Run] = Recorder(self.store, self.node_id, self._written)
        self._renewer = Renewer(self._heartbeat)
        self._health = StoreHealth(grace=settings.heartbeat + POST_OUTAGE_MARGIN_S)
        self._kept_locks: set[int] = set()  # unconfirmed runs whose Redis lock was extended
        self._renewal_stuck_since: float | None = None
        self.locks = locks
        self.started = threading.Event()
        self.stopped = threading.Event()

    # -- public ---------------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> None:
        """Run the node until ``stop()`` or SIGINT/SIGTERM; returns after shutdown."""
        if install_signals:
            self._install_signal_handlers()
        self.store.register_node(self._node_row())
        self._renewer.start()
        self._monitor = threading.Thread(target=self._monitor_main, name="tickwork-monitor", daemon=True)
        self._monitor.start()
        self._recorder.start()
        self._reconciler = threading.Thread(target=self._reconcile_main, name="tickwork-reconcile", daemon=True)
        self._reconciler.start()
        self._listener = threading.Thread(
            target=self.store.listen, args=(self._on_notify, self._monitor_stop), name="tickwork-listen", daemon=True
        )
        self._listener.start()
        SLOTS.set(self.concurrency)
        log.info("node %s started: %d slots, tasks %s", self.node_id, self.concurrency, self.names)
        self.started.set()
        try:
            self._poll_loop()
        finally:
            self._shutdown()

    def stop(self) -> None:
        """Ask the node to shut down gracefully (thread-safe, returns at once)."""
        self._stopping.set()
        self.wakeup.set()

    @property
    def running(self) -> int:
        with self._runs_lock:
            return len(self._runs)

    def _on_notify(self, payload: str) -> None:
        """Another process changed something: work may be due now, or a running task's
        cancellation was requested (the monitor renews at once and so learns of it)."""
        if payload != "cancel":
            self.wakeup.set()
        if payload != "due":
            self._beat_now.set()
            self._monitor_wake.set()

    # -- poll loop ------------------------------------------------------------------

    def _poll_loop(self) -> None:
        wakeup = self.wakeup
        failures, failing_since = 0, 0.0
        while not self._stopping.is_set():
            if self._monitor_failed is not None:
                raise NodeError("monitor thread died; stopping the node") from self._monitor_failed
            if self._recorder.failure is not None:
                raise NodeError("recorder thread died; stopping the node") from self._recorder.failure
            extra = self.prefetch.extra()
            capacity = self.concurrency + extra
            running = self.running
            free = capacity - running
            if extra and running and free < capacity // CLAIM_BATCH_DIVISOR:
                # Runs are short and slots refill faster than a round trip: let a batch's
                # worth free up so that one claim fills it (a finishing run wakes us).
                wakeup.wait(self.settings.poll_interval)
                wakeup.clear()
                continue
            claimed = 0
            attempted_at: datetime | None = None
            if free > 0 and self.locks is not None and not self.locks.may_start():
                wakeup.wait(self.settings.poll_interval)  # redis_mode="required" and Redis is down
                wakeup.clear()
                continue
            if free > 0:
                attempted_at = self.store.approximate_now()
                try:
                    started = time.monotonic()
                    claims = self.store.claim(
                        self.node_id, self.names, free, self.settings.lease, exclude=self._locked_elsewhere_ids()
                    )
                    if claims:
                        self.prefetch.observe_refill(time.monotonic() - started + self._recorder.write_s)
                except Exception:
                    self._give_back_lost_claims(attempted_at - CLOCK_MARGIN)
                    failures += 1
                    pause = min(self.settings.poll_interval * failures, MAX_ERROR_PAUSE_S)
                    if failures == 1:
                        failing_since = time.monotonic()
                        self._health.failed()
                        log.exception(
                            "claim failed; retrying until the store answers (every %.0f s at most)", MAX_ERROR_PAUSE_S
                        )
                    elif failures % FAILURE_LOG_EVERY == 0:
                        log.warning("claims still failing (%d in a row, %.0f s)", failures, started - failing_since)
                    self._stopping.wait(pause)
                    continue
                if time.monotonic() - started > self.settings.lease * SLOW_CALL_LEASES:
                    self._health.slow()  # the claim waited on the store (a lock held elsewhere)
                else:
                    self._health.answered()
                if failures:
                    log.warning("claims work again after %.1f s (%d failed)", started - failing_since, failures)
                failures = 0
                claimed = len(claims)
                tokens, refused = self._lock(claims)
                leased_at = self._lease_start(claims, started)
                for claim in claims:
                    if claim.execution_id not in refused:
                        self._dispatch(claim, tokens.get(claim.execution_id), leased_at=leased_at)
                self._autoscale()  # with the slots just refilled: how busy the node really is
                if refused and len(refused) == claimed:
                    # Redis down in required mode, or all locked by live nodes (left out of
                    # the next claims for a while): do not spin on them.
                    self._stopping.wait(self.settings.poll_interval)
                    continue
                if claimed == free:
                    continue  # every slot filled: more may be due
            else:
                self._autoscale()
            wakeup.wait(self._sleep_for(free - claimed, attempted_at))
            wakeup.clear()

    def _locked_elsewhere_ids(self) -> list[int]:
        now = time.monotonic()
        for task_id in [t for t, until in self._locked_elsewhere.items() if until <= now]:
            del self._locked_elsewhere[task_id]
        return list(self._locked_elsewhere)

    def _lock(self, claims: list[Claim]) -> tuple[dict[int, str], set[int]]:
        """Take the Redis locks of fresh claims; give back those another node holds and
        leave those out of this node's claims for a heartbeat (their holder extends
        them every heartbeat, and the next claims must not be the same ones again).
        Returns the tokens and the execution ids given back, both by execution id."""
        if self.locks is None or not claims:
            return {}, set()
        taken = self.locks.take(claims)
        if taken.refused:
            until = time.monotonic() + self.settings.heartbeat
            for claim in taken.refused:
                self._locked_elsewhere[claim.task.id] = until
            try:
                self.store.release(self.node_id, taken.refused, notify=False)
            except Exception:
                log.warning(
                    "could not give back %d claims; their leases will expire", len(taken.refused), exc_info=True
                )
        return taken.tokens, {c.execution_id for c in taken.refused}

    def _autoscale(self) -> None:
        """Every AUTOSCALE_EVERY_S: grow or shrink the slots as the autoscaler decides."""
        if self.autoscaler is None or time.monotonic() < self._next_scale_check:
            return
        self._next_scale_check = time.monotonic() + AUTOSCALE_EVERY_S
        try:
            oldest = self.store.next_due_at(self.names)  # the tasks this node runs, not others'
            age = None if oldest is None else (self.store.approximate_now() - oldest).total_seconds()
        except Exception:
            log.warning("queue age unavailable; slots unchanged", exc_info=True)
            return
        age = age if age is not None and age >= 0 else None  # not due yet: no backlog
        slots = self.autoscaler.decide(self.concurrency, self.running, age)
        if slots != self.concurrency:
            log.info("slots %d -> %d (oldest due task waiting %s s)", self.concurrency, slots, age)
            self._pool.resize(slots)
            self.concurrency = self.prefetch.concurrency = slots
            if self._adaptive_prefetch:
                self.prefetch.cap = PREFETCH_CAP_PER_SLOT * slots
            SLOTS.set(slots)

    def _give_back_lost_claims(self, since: datetime) -> None:
        """A claim can commit while its reply is lost: the rows are ours, but nothing here
        knows of them. Release them (fenced) so they run now, not after a lease expiry
        that would count them as failed attempts."""
        try:
            with self._runs_lock:
                known = set(self._runs)
            lost = [c for c in self.store.claimed_since(self.node_id, since) if c.execution_id not in known]
            if lost:
                released = self.store.release(self.node_id, lost)
                log.warning("gave back %d claims whose confirmation was lost", released)
        except Exception as exc:
            log.warning("could not look for lost claims (%s); their leases will expire", type(exc).__name__)

    def _sleep_for(self, idle_slots: int, claimed_at: datetime | None = None) -> float:
        """Until the next due task (capped by poll_interval); idle slots make it worth asking.

        A task that was already due when a claim that left slots idle was made was passed
        over by that claim: another node is claiming it, or a session outside tickwork
        holds its row locked. Asking again at once would only spin on it: wait for the
        poll interval (new work, a NOTIFY or a finished run still wakes us)."""
        cap = self.settings.poll_interval
        if idle_slots <= 0:
            return cap  # a finishing run wakes us
        try:
            due = self.store.next_due_at(self.names)
            if due is None or (claimed_at is not None and due <= claimed_at):
                return cap
            wait = min(cap, max(0.0, (due - self.store.approximate_now()).total_seconds()))
            if wait == 0.0 and self._locked_elsewhere:
                # The due task may be one left out as locked elsewhere: retry when it may
                # be free (new work still wakes us), rather than spin on it.
                wait = min(cap, max(0.0, min(self._locked_elsewhere.values()) - time.monotonic()))
            return wait
        except Exception:
            log.exception("next_due_at failed")
            return cap

    def _lease_start(self, claims: list[Claim], sent: float) -> float:
        """When the claims' leases began, on this node's monotonic clock: from the expiry
        the store wrote (a claim can wait long for a lock before it runs), never before
        the claim was sent, less a margin for the error of the store-clock estimate."""
        expiries = [c.task.lease_expires_at for c in claims if c.task.lease_expires_at is not None]
        if not expiries:
            return sent
        began = min(expiries) - timedelta(seconds=self.settings.lease)
        ago = (self.store.approximate_now() - began).total_seconds()
        return max(sent, time.monotonic() - ago - CLOCK_ESTIMATE_MARGIN_S)

    def _dispatch(self, claim: Claim, lock_token: str | None = None, *, leased_at: float | None = None) -> None:
        """Hand a claim to the run threads. ``leased_at`` (monotonic) is when the claim
        was sent: its lease runs from no earlier, whatever the reply's delay."""
        definition = self.registry.get(claim.task.name)
        if definition is None:  # cannot happen: we only claim registered names
            raise NodeError(f"claimed unregistered task {claim.task.name!r}")
        run = Run(claim, definition)
        if leased_at is not None:
            run.renewed_at = leased_at
        if lock_token is not None and self.locks is not None:
            run.lock_token, run.lock_ttl = lock_token, self.locks.ttl_for(claim.task)
        with self._runs_lock:
            self._runs[run.execution_id] = run
            RUNNING.set(len(self._runs))
        self._pool.submit(run)

    # -- one run --------------------------------------------------------------------

    def _execute(self, run: Run) -> None:
        try:
            with self._runs_lock:
                if run.released:
                    return
                run.started = True
            if run.cancel_reason is not None:  # it waited as prefetch and was cancelled or lost
                self._skip(run)
                return
            decision = decide(run.claim.task, self.store.approximate_now())
            if not decision.run:  # missed slots the policy does not run now
                log.info("task %s: %s", run.task_id, decision.text)
                run.finished = True
                self._recorder.submit(run, skipped_outcome(run.claim, decision, self.store.approximate_now()))
                return
            task = run.claim.task
            ctx = Context(
                task_id=task.id,
                task_name=task.name,
                execution_id=run.claim.execution_id,
                attempt=task.attempt,
                scheduled_for=run.claim.scheduled_for,
                fence=run.claim.fence,
                cancel_flag=run.cancel_flag,
                renew=lambda: self._renew_one(run),
            )
            run.started_at = self.store.approximate_now()
            self._metrics.started(task.name, max(0.0, (run.started_at - task.next_run_at).total_seconds()))
            limits = [
                (s, r)
                for s, r in ((task.timeout, CancelReason.TIMEOUT), (task.max_runtime, CancelReason.MAX_RUNTIME))
                if s is not None
            ]
            if limits:
                seconds, run.deadline_reason = min(limits)
                run.deadline = time.monotonic() + seconds
                self._monitor_wake.set()
            if task.overlap is Overlap.REPLACE and (schedule := schedule_of(task)) is not None:
                due_in = schedule.next_after(run.claim.scheduled_for) - self.store.approximate_now()
                # A catch-up run whose next slot is missed too is left to the misfire policy.
                if due_in.total_seconds() > -task.misfire_grace:
                    run.replace_at = time.monotonic() + max(0.0, due_in.total_seconds())
                    self._monitor_wake.set()
            began = time.monotonic()
            result = self.executor.execute(run, ctx)
            self.prefetch.observe_run(time.monotonic() - began)
        except BaseException as exc:
            # Executor.execute turns task errors into results: this is a bug of ours.
            log.exception("task %s: unexpected error while running", run.task_id)
            result = RunResult(ExecutionStatus.FAILED, ErrorInfo.from_exception(exc))
        self._record(run, result)

    def _skip(self, run: Run) -> None:
        """A run stopped before it started. One whose lease was lost belongs to someone
        else now: forget it, write nothing. One cancelled on request is recorded so."""
        if run.cancel_reason is CancelReason.LOST:
            log.warning("task %s: lease lost before the run started; not running it", run.task_id)
            self._forget([run])
            return
        if run.cancel_reason is CancelReason.LOCK_LOST:
            log.warning("task %s: Redis lock lost before the run started; giving the claim back", run.task_id)
            try:
                self.store.release(self.node_id, [run.claim])
            except Exception:
                log.warning("could not give back task %s; its lease will expire", run.task_id, exc_info=True)
            self._forget([run])
            return
        log.info("task %s: %s before the run started", run.task_id, run.cancel_reason)
        self._record(run, self.executor.cancelled(run))

    def _record(self, run: Run, result: RunResult) -> None:
        """Hand the result to the recorder; the run keeps its slot and lease until written."""
        try:
            now = self.store.approximate_now()
        except Exception:
            log.warning("store clock unavailable; recording with the local clock", exc_info=True)
            now = utcnow()
        interrupted = result.status is ExecutionStatus.FAILED and run.cancel_reason is CancelReason.SHUTDOWN
        try:
            outcome = outcome_of(
                run.claim, result.status, now, error=result.error, result=result.result, note=result.note,
                interrupted=interrupted,
                replaced=run.cancel_reason in (CancelReason.REPLACED, CancelReason.CANCEL_RUN),
                started_at=run.started_at,
            )  # fmt: skip
        except Exception as exc:
            log.exception("task %s: cannot compute its next state; ending it FAILED", run.task_id)
            outcome = failed_outcome(run.claim, now, ErrorInfo.from_exception(exc))
        run.finished = True
        self._recorder.submit(run, outcome)

    def _written(self, results: list[tuple[Run, Outcome, bool | None]]) -> None:
        """Results are in the store: free the runs' slots, let the poll loop claim, and
        tell the hooks and the webhook what was recorded."""
        self._forget([run for run, _, _ in results])
        events = self.events
        for run, outcome, applied in results:
            if applied:
                started = run.started_at
                took = None if started is None else max(0.0, (outcome.finished_at - started).total_seconds())
                self._metrics.ended(run.claim.task.name, outcome.status.value, took)
                if events.wanted:  # no payloads built for nobody
                    for event, payload in for_outcome(run.claim, outcome, self.node_id):
                        events.emit(event, payload)

    def _forget(self, runs: list[Run]) -> None:
        if self.locks is not None:
            self.locks.release(runs)  # after the write, before another claim can want them
        with self._runs_changed:
            for run in runs:
                self._runs.pop(run.execution_id, None)
            RUNNING.set(len(self._runs))
            self._runs_changed.notify_all()
        self.wakeup.set()

    # -- monitor: heartbeats, cancellation, timeouts, zombies -------------------------

    def _monitor_main(self) -> None:
        try:
            next_beat = 0.0
            while not self._monitor_stop.is_set():
                if time.monotonic() >= next_beat or self._beat_now.is_set():
                    self._beat_now.clear()
                    self._ask_for_heartbeat()
                    next_beat = time.monotonic() + self.settings.heartbeat
                wait = next_beat - time.monotonic()
                for deadline in (self._enforce_timeouts(), self._cancel_unrenewed()):
                    if deadline is not None:
                        wait = min(wait, deadline - time.monotonic())
                self._monitor_wake.wait(max(0.0, wait))
                self._monitor_wake.clear()
        except BaseException as exc:  # supervised: the poll loop stops the node
            self._monitor_failed = exc
            self.wakeup.set()
            raise

    def _ask_for_heartbeat(self) -> None:
        """Start a heartbeat on the renewer's thread; say so, once, when the last one has
        not come back for a while (the database stopped answering: a partition?)."""
        stuck_for = self._renewer.request()
        if stuck_for is None:
            if self._renewal_stuck_since is not None:
                log.warning(
                    "node %s: the store answers again: leases renewed after %.1f s",
                    self.node_id,
                    time.monotonic() - self._renewal_stuck_since,
                )
                self._renewal_stuck_since = None
            return
        if self._renewal_stuck_since is None and stuck_for >= self.settings.heartbeat:
            self._renewal_stuck_since = time.monotonic() - stuck_for
            log.warning(
                "node %s: cannot renew leases: the store has not answered for %.1f s; runs not renewed "
                "within %.0f s of their last renewal are stopped before their leases can pass to another node",
                self.node_id,
                stuck_for,
                self.settings.lease * LEASE_SAFETY,
            )

    def _heartbeat(self) -> None:
        """On the renewer's thread: renew every run's lease, extend their Redis locks,
        and mark this node alive. A failure leaves the runs' last renewal as it was."""
        with self._runs_lock:
            runs = [r for r in self._runs.values() if not r.released]
        asked = time.monotonic()  # the lease runs from (at the latest) now, not from the reply
        try:
            renewals = self.store.renew(self.node_id, [(r.task_id, r.claim.fence) for r in runs], self.settings.lease)
            if time.monotonic() - asked > self.settings.lease * SLOW_CALL_LEASES:
                self._health.slow()
        except Exception:
            log.warning("renewing leases failed", exc_info=True)
            self._health.failed()
            self._kept_locks = self._extend_locks([], runs)
            self._monitor_wake.set()  # the monitor judges the unrenewed runs now
        else:
            self._kept_locks = set()
            self._apply_renewals(runs, renewals, asked)
            renewed = {(r.task_id, r.fence) for r in renewals}
            self._extend_locks([r for r in runs if (r.task_id, r.claim.fence) in renewed], [])
        try:
            self.store.node_heartbeat(self.node_id, len(runs))
        except Exception:
            log.warning("node heartbeat failed", exc_info=True)
            self._health.failed()
        else:
            self._health.answered()

    def _apply_renewals(self, runs: list[Run], renewals: list[Renewal], asked: float) -> None:
        kept = {(r.task_id, r.fence): r for r in renewals}
        for run in runs:
            renewal = kept.get((run.task_id, run.claim.fence))
            if renewal is None:
                if not run.finished:  # a finished run's result may just have been written
                    STALE_RESULTS.labels(write="heartbeat").inc()
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

    def _extend_locks(self, confirmed: list[Run], unconfirmed: list[Run]) -> set[int]:
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

    def _cancel_unrenewed(self) -> float | None:
        """Runs whose lease this node could not renew stop before another node may take
        them: at LEASE_SAFETY of the lease after their last renewal, or, while their
        Redis lock is still extended (which the reconcilers count as a sign of life for
        one more lease), of two. Judged on the monitor's thread from the time of the
        last renewal alone, never waiting on the store; returns the next such deadline."""
        now = time.monotonic()
        earliest: float | None = None
        kept = self._kept_locks
        with self._runs_lock:
            runs = [r for r in self._runs.values() if not (r.released or r.finished or r.cancel_reason)]
        for run in runs:
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

    def _renew_one(self, run: Run) -> bool:
        asked = time.monotonic()
        renewals = self.store.renew(self.node_id, [(run.task_id, run.claim.fence)], self.settings.lease)
        if not renewals:
            STALE_RESULTS.labels(write="heartbeat").inc()
            log.warning("task %s: stale heartbeat from the task: fence %s lost its lease", run.task_id, run.claim.fence)
            run.request_cancel(CancelReason.LOST)
            return False
        run.renewed_at = asked
        if renewals[0].cancel_requested:
            run.request_cancel(CancelReason.CANCEL_RUN if renewals[0].run_only else CancelReason.CANCEL)
        return True

    def _enforce_timeouts(self) -> float | None:
        """Cancel runs past their timeout, or whose replacement slot came due
        (overlap="replace"); return the earliest such deadline still ahead."""
        now = time.monotonic()
        earliest: float | None = None
        with self._runs_lock:
            runs = list(self._runs.values())
        for run in runs:
            if run.cancel_reason is not None or not run.started:
                continue
            for deadline, reason in ((run.deadline, run.deadline_reason), (run.replace_at, CancelReason.REPLACED)):
                if deadline is None:
                    continue
                if deadline <= now:
                    run.request_cancel(reason)
                    break
                if earliest is None or deadline < earliest:
                    earliest = deadline
        return earliest

    def _reconcile_main(self) -> None:
        """Zombie recovery, on its own thread so that a slow pass never delays renewals."""
        waiting = False
        while not self._monitor_stop.is_set():
            if (quiet := self._health.quiet_for()) > 0:
                if not waiting:
                    log.info("reconciler paused by a store outage: it reaps a heartbeat after the store answers again")
                    waiting = True
                self._monitor_stop.wait(min(quiet, self.settings.heartbeat))
                continue
            waiting = False
            try:
                node_ttl = max(NODE_TTL_FLOOR_S, 3 * self.settings.lease)
                live = self.locks.live if self.locks is not None else None
                with self._runs_lock:
                    own = [run.task_id for run in self._runs.values()]
                began = time.monotonic()
                recovered = reconcile(
                    self.store,
                    node_ttl=node_ttl,
                    events=self.events,
                    live=live,
                    lock_grace=self.settings.lease,
                    overrun_grace=self.settings.lease,
                    own=own,
                    may_reap=functools.partial(self._may_reap, began),
                )
                if recovered:
                    self.wakeup.set()  # recovered runs are due again: claim them now, not at the next poll
            except Exception:
                log.warning("reconciler pass failed", exc_info=True)
                self._health.failed()
            self._monitor_stop.wait(self.settings.heartbeat)

    def _may_reap(self, began: float) -> bool:
        """Whether the reconciler pass begun at ``began`` may reap now: not when the store
        kept it waiting for half a lease or more (its owners waited just as long)."""
        if time.monotonic() - began > self.settings.lease * SLOW_CALL_LEASES:
            self._health.slow()
        return self._health.quiet_for() == 0

    # -- shutdown ---------------------------------------------------------------------

    def _shutdown(self) -> None:
        log.info("node %s stopping: no more claims (a second signal exits at once)", self.node_id)
        self._stopping.set()
        self._release_unstarted()
        self._drain(self.settings.shutdown_grace)
        self._interrupt_remaining()
        self._recorder.stop()
        self.events.close()  # deliver what the last writes announced
        self._monitor_stop.set()
        self._monitor_wake.set()
        if self._monitor is not None:
            self._monitor.join(timeout=10)
        self._renewer.stop()
        for thread in (self._listener, self._reconciler):
            if thread is not None:
                thread.join(timeout=5)
        self._pool.shutdown()
        self.executor.close()
        if self.locks is not None:
            self.locks.close()
        try:
            self.store.remove_node(self.node_id)
        except Exception:
            log.warning("could not remove node row", exc_info=True)
        self.stopped.set()
        log.info("node %s stopped", self.node_id)

    def _release_unstarted(self) -> None:
        with self._runs_lock:
            unstarted = [r for r in self._runs.values() if not r.started]
            for run in unstarted:
                run.released = True
        if not unstarted:
            return
        if self.locks is not None:
            self.locks.release(unstarted)  # first: a node claiming them right after must find them free
        try:
            released = self.store.release(self.node_id, [r.claim for r in unstarted])
            log.info("gave back %d claimed but unstarted tasks", released)
        except Exception:
            log.warning("could not give back unstarted claims; their leases will expire", exc_info=True)
        with self._runs_changed:
            for run in unstarted:
                self._runs.pop(run.execution_id, None)
            RUNNING.set(len(self._runs))
            self._runs_changed.notify_all()

    def _drain(self, grace: float) -> bool:
        """Wait up to ``grace`` seconds for every run to end and be written; True if they did."""
        deadline = time.monotonic() + grace
        with self._runs_changed:
            while self._runs and (left := deadline - time.monotonic()) > 0:
                self._runs_changed.wait(left)
            return not self._runs

    def _interrupt_remaining(self) -> None:
        """Runs still going after the grace are asked to stop, and waited for.

        Their leases are still renewed meanwhile: a run whose thread is alive is never
        recorded or given up while it might still act, so no other node starts it at the
        same time. Each ends FAILED ("shutdown") and its task is due again at once, without
        using up an attempt. A run that ignores cancellation holds the node until a second
        signal (or the orchestrator's SIGKILL) ends the process; its lease then expires.
        """
        with self._runs_lock:
            remaining = [r for r in self._runs.values() if not r.finished]
        if not remaining:
            return
        log.warning("%d runs still going after shutdown_grace: cancelling them", len(remaining))
        for run in remaining:
            run.request_cancel(CancelReason.SHUTDOWN)
        while not self._drain(INTERRUPT_LOG_EVERY_S):
            log.warning("waiting for %d cancelled runs to stop (a second signal exits now)", self.running)

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def exit_now(signum: int, frame: FrameType | None) -> None:
            os._exit(128 + signum)

        def graceful(signum: int, frame: FrameType | None) -> None:
            # Only set flags here; a second signal exits at once.
            signal.signal(signal.SIGINT, exit_now)
            signal.signal(signal.SIGTERM, exit_now)
            self.stop()

        signal.signal(signal.SIGINT, graceful)
        signal.signal(signal.SIGTERM, graceful)

    def _node_row(self) -> Node:
        now = self.store.approximate_now()
        return Node(
            id=self.node_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=now,
            heartbeat_at=now,
            capacity=self.concurrency,
            running=0,
        )
