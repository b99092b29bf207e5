"""A worker node: its threads, the poll loop that fills its slots, and its shutdown.

Threads and their jobs (see docs/architecture.md for a run's whole life):
* the poll loop (the thread that calls ``run``): claims at most the free slots
  (claims.py) and sleeps until the next due time, capped by ``poll_interval``, or until
  woken (a task scheduled in this process, a slot freed, a stop request);
* ``concurrency`` slot threads (slots.py) that run the claims (runner.py);
* the monitor and the renewer (leases.py): renew leases and the node row every
  ``heartbeat`` seconds, turn cancel requests, lost leases and timeouts into
  cancellation;
* the recorder (recorder.py), which writes outcomes in batches, and the reconciler
  (reconciler.py), which recovers other nodes' zombies; the listener, for NOTIFY.

The poll loop supervises the others: when the monitor or the recorder dies, the node
stops. Shutdown is ordered: stop claiming, give back claims that never started, let
running runs finish within ``shutdown_grace``, interrupt and record what is left, stop
the monitor last, remove the node row.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence

from tickwork import validate
from tickwork.errors import InvalidInput, NodeError
from tickwork.events import Events
from tickwork.logs import database_of
from tickwork.model import Claim, Node, Outcome
from tickwork.node.autoscale import Autoscaler
from tickwork.node.claims import Claimer, Round
from tickwork.node.executor import Executor
from tickwork.node.health import StoreHealth
from tickwork.node.isolation import prepare
from tickwork.node.leases import LEASE_SAFETY, Leases
from tickwork.node.pacing import Pacer
from tickwork.node.pruner import Pruner
from tickwork.node.reconciler import ReconcilerLoop
from tickwork.node.recorder import Recorder
from tickwork.node.redis_locks import NodeLocks
from tickwork.node.run import CancelReason, Run
from tickwork.node.runner import Runner
from tickwork.node.sampler import QueueSampler
from tickwork.node.settings import NodeSettings
from tickwork.node.signals import GracefulSignals
from tickwork.node.slots import Prefetch, RunTable, RunThreads
from tickwork.node.stats import NO_STATS, NodeStats
from tickwork.registry import Isolation, Registry
from tickwork.store.base import Store
from tickwork.store.dialect import Election
from tickwork.wakeup import Wakeup

log = logging.getLogger("tickwork.worker")

# A busy node whose runs are short claims again once 1/N of its capacity is free.
CLAIM_BATCH_DIVISOR = 4
# Prefetch never exceeds this many claims per slot. It binds only for runs far shorter than
# a round trip (the prefetch is one refill's worth of runs): 64 let W1's claims and writes
# come ~600 rows at a time (bench.peers W1 +10-20 %, W3 -10 % against 16). Since the
# prefetch follows the mean run time it binds all through W1: 128 and 256 gave W1 +4 and
# +9 %, but a node holding that many grew by 14 MB in W5 on SQLite (10 MB is the bound).
PREFETCH_CAP_PER_SLOT = 64
# While cancelled runs are awaited at shutdown, say so this often.
INTERRUPT_LOG_EVERY_S = 5.0
# After the store failed, the reconciler waits a heartbeat plus this before reaping: room
# for an owner's connection wait (2 s at most), its recorder's retry pause (1 s) and a margin.
POST_OUTAGE_MARGIN_S = 5.0
# The start-up line names at most this many tasks.
SHOWN_NAMES = 50
# How often an autoscaling node looks at the queue.
AUTOSCALE_EVERY_S = 1.0


def check_sizes(concurrency: int, prefetch: int | None) -> None:
    """Refuse a node's sizes where they are given: a node started later, on a thread of
    its own (the server's in-process node), would otherwise fail there, far from the call."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidInput("concurrency", concurrency, "must be an integer of at least 1")
    if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0):
        raise InvalidInput("prefetch", prefetch, "must be an integer >= 0, or None (adaptive)")


class Worker:
    """A node, built from its collaborators (``App.worker()`` composes one for an App).

    ``stats`` hears what the node does (tickwork/node/stats.py; nothing by default);
    ``clock`` is the monotonic clock every lease, deadline and pause is measured on."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        settings: NodeSettings,
        *,
        events: Events | None = None,
        wakeup: Wakeup | None = None,
        locks: NodeLocks | None = None,
        concurrency: int = 8,
        prefetch: int | None = None,
        node_id: str | None = None,
        autoscaler: Autoscaler | None = None,
        stats: NodeStats = NO_STATS,
        clock: Callable[[], float] = time.monotonic,
        queues: Sequence[str] | None = None,
    ) -> None:
        check_sizes(concurrency, prefetch)
        self.queues = registry.queues() if queues is None else validate.queues(queues)
        """The queues this node claims from (default: those its registered tasks use)."""
        self.autoscaler = autoscaler
        self.concurrency = autoscaler.minimum if autoscaler is not None else concurrency
        self.store, self.registry, self.settings, self.locks = store, registry, settings, locks
        self.events = events if events is not None else Events(None, None)
        self.wakeup = wakeup if wakeup is not None else Wakeup()
        """Set to wake the poll loop: work scheduled in this process, a slot freed, a stop."""
        self.stats, self.clock = stats, clock
        self.node_id = node_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.names = registry.names()
        cap = PREFETCH_CAP_PER_SLOT * self.concurrency if prefetch is None else prefetch
        self.prefetch = Prefetch(self.concurrency, cap)
        self._adaptive_prefetch, self._next_scale_check = prefetch is None, 0.0
        self.runs = RunTable(stats.running)
        self.health = StoreHealth(grace=settings.heartbeat + POST_OUTAGE_MARGIN_S, clock=clock)
        self.leases = Leases(store, self.node_id, settings, self.runs, self.health, stats, locks, clock)
        self.claimer = Claimer(
            store, self.node_id, self.names, settings, self.health, queues=self.queues,
            locks=locks, known=self.runs.execution_ids, clock=clock,
        )  # fmt: skip
        self.pacer = Pacer(self.claimer, store, self.wakeup, self._free_slots, settings.poll_interval)
        self.executor = Executor(settings.max_payload)
        hold, urgent = self.pacer.result_hold, self.pacer.ends_hold
        self.recorder: Recorder[Run] = Recorder(store, self.node_id, self._written, stats, hold=hold, urgent=urgent)
        self.runner = Runner(
            store, self.node_id, self.runs, self.executor, self.recorder,
            prefetch=self.prefetch, stats=stats, events=self.events, renew=self.leases.renew_one, locks=locks,
            monitor_wake=self.leases.wake, on_forget=self.pacer.run_forgotten, on_due_again=self.pacer.due_again,
            clock=clock, unowned_after=settings.lease * LEASE_SAFETY,
        )  # fmt: skip
        self.reconciler = ReconcilerLoop(
            store, settings, self.health, own=self.runs.task_ids, live=locks.live if locks is not None else None,
            events=self.events, stats=stats, on_recovered=self.wakeup.set, pruner=Pruner(store, settings, stats, clock),
            sampler=QueueSampler(store, clock),
        )  # fmt: skip
        prepare([d.func for d in registry if d.options.isolation is Isolation.PROCESS])
        self.slots = RunThreads(0, self.runner.execute)  # started by run(): a built node holds no thread
        self._stopping, self._monitor_stop = threading.Event(), threading.Event()
        self._threads: list[threading.Thread] = []
        self._failed: tuple[str, BaseException] | None = None
        self.started, self.stopped = threading.Event(), threading.Event()

    # -- public ---------------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> None:
        """Run the node until ``stop()`` or SIGINT/SIGTERM; returns after shutdown."""
        on_main = threading.current_thread() is threading.main_thread()
        signals = GracefulSignals(self.stop) if install_signals and on_main else None
        self.store.register_node(self._node_row())
        self.slots.resize(self.concurrency)
        self.leases.renewer.start()
        self.recorder.start()
        self._start("tickwork-monitor", self._supervised("monitor", self.leases.monitor_main))
        self._start("tickwork-reconcile", lambda: self.reconciler.main(self._monitor_stop))
        elect = Election(self._group(), self.pacer.on_role)
        self._start("tickwork-listen", lambda: self.store.listen(self._on_notify, self._monitor_stop, elect))
        self.stats.slots(self.concurrency)
        self._log_started()
        self.started.set()
        try:
            self._poll_loop()
        finally:
            self._shutdown()
            if signals is not None:
                signals.close()

    def _log_started(self) -> None:
        """The start-up line: the database (its password masked), the claim strategy, the
        slots and the registered task names."""
        scaling = f" (autoscaling up to {self.autoscaler.maximum})" if self.autoscaler is not None else ""
        names = ", ".join(self.names[:SHOWN_NAMES]) + (
            f" and {len(self.names) - SHOWN_NAMES} more" if len(self.names) > SHOWN_NAMES else ""
        )
        log.info(
            "node %s started: database %s, claim strategy %s, %d slots%s, queues %s, %d tasks: %s",
            self.node_id, database_of(self.store), getattr(self.store, "claim_strategy", "default"),
            self.concurrency, scaling, ", ".join(self.queues) or "none", len(self.names), names or "none",
            extra={"node_id": self.node_id, "slots": self.concurrency, "tasks": self.names, "queues": self.queues},
        )  # fmt: skip

    def _written(self, results: list[tuple[Run, Outcome, bool | None]]) -> None:
        self.runner.written(results)  # the runner is made after the recorder it writes to

    def _free_slots(self) -> int:
        return self.concurrency + self.prefetch.extra() - self.running

    def stop(self) -> None:
        """Ask the node to shut down gracefully (thread-safe, returns at once)."""
        self._stopping.set()
        self.wakeup.set()

    @property
    def running(self) -> int:
        """Runs this node holds: running (stuck ones included), waiting for a slot, or
        being written."""
        return len(self.runs)

    def _start(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _supervised(self, what: str, main: Callable[[threading.Event], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                main(self._monitor_stop)
            except BaseException as exc:  # the poll loop stops the node
                self._failed = (what, exc)
                self.wakeup.set()
                raise

        return body

    def _group(self) -> str:
        """The nodes that share a keeper: those claiming the same task names and queues."""
        return f"{','.join(sorted(self.names))}|{','.join(sorted(self.queues))}"

    def _on_notify(self, payload: str) -> None:
        """Another process changed something: work may be due now, or a running task's
        cancellation was requested (the monitor renews at once and so learns of it)."""
        if payload != "cancel":
            self.wakeup.set()
        if payload != "due":
            self.leases.beat_now.set()
            self.leases.wake.set()

    # -- poll loop ------------------------------------------------------------------

    def _poll_loop(self) -> None:
        while not self._stopping.is_set():
            pause = self.poll_once()
            if pause is None:
                continue
            seconds, wakeable = pause
            if wakeable:
                self.pacer.wait(seconds)
            else:
                self._stopping.wait(seconds)  # new work must not cut this short: it would spin

    def poll_once(self) -> tuple[float, bool] | None:
        """One turn of the poll loop: claim into the free slots, if any. Returns how long
        to sleep after it, and whether new work (a NOTIFY, a freed slot) may end that
        sleep early; None to go again at once."""
        self._check_threads()
        extra = self.prefetch.extra()
        capacity = self.concurrency + extra
        running = self.running
        free = capacity - running
        if extra and running and free < capacity // CLAIM_BATCH_DIVISOR:
            # Runs are short and slots refill faster than a round trip: let a batch's
            # worth free up so that one claim fills it (a finishing run wakes us).
            return self.settings.poll_interval, True
        if free <= 0:
            self._autoscale()
            return self.pacer.when_full()
        if self.locks is not None and not self.locks.may_start():
            return self.settings.poll_interval, True  # redis_mode="required" and Redis is down
        got = self.claimer.claim(free)
        if got is None:
            return self.claimer.error_pause(), False
        self._fill(got)
        if got.claimed and not got.claims:
            # Redis down in required mode, or all locked by live nodes (left out of
            # the next claims for a while): do not spin on them.
            return self.settings.poll_interval, False
        return self.pacer.after_claim(got, free)

    def _check_threads(self) -> None:
        if self._failed is not None:
            what, exc = self._failed
            raise NodeError(f"{what} thread died; stopping the node") from exc
        if self.recorder.failure is not None:
            raise NodeError("recorder thread died; stopping the node") from self.recorder.failure

    def _fill(self, got: Round) -> None:
        """Hand a round's claims to the slot threads: each in the run table (under one
        lock for the round) before any slot can take it, so that its end always finds it
        there. ``got.leased_at``: when their leases began, at the latest (claims.py)."""
        if got.claimed:
            self.prefetch.observe_refill(got.took + self.recorder.write_s)
        runs = [self._run_of(claim, token, got.leased_at) for claim, token in got.claims]
        self.runs.add_all(runs)
        for run in runs:
            self.slots.submit(run)
        self._autoscale()  # with the slots just refilled: how busy the node really is

    def _run_of(self, claim: Claim, lock_token: str | None, leased_at: float) -> Run:
        definition = self.registry.get(claim.task.name)
        if definition is None:  # cannot happen: we only claim registered names
            raise NodeError(f"claimed unregistered task {claim.task.name!r}")
        run = Run(claim, definition, renewed_at=leased_at)
        if lock_token is not None and self.locks is not None:
            run.lock_token, run.lock_ttl = lock_token, self.locks.ttl_for(claim.task)
        return run

    def _autoscale(self) -> None:
        """Every AUTOSCALE_EVERY_S: grow or shrink the slots as the autoscaler decides."""
        if self.autoscaler is None or self.clock() < self._next_scale_check:
            return
        self._next_scale_check = self.clock() + AUTOSCALE_EVERY_S
        try:
            oldest = self.store.next_due_at(self.names, self.queues)  # the tasks this node runs, not others'
            age = None if oldest is None else (self.store.approximate_now() - oldest).total_seconds()
        except Exception:
            log.warning("queue age unavailable; slots unchanged", exc_info=True)
            return
        age = age if age is not None and age >= 0 else None  # not due yet: no backlog
        slots = self.autoscaler.decide(self.concurrency, self.running, age)
        if slots != self.concurrency:
            log.info("slots %d -> %d (oldest due task waiting %s s)", self.concurrency, slots, age)
            self.slots.resize(slots)
            self.concurrency = self.prefetch.concurrency = slots
            if self._adaptive_prefetch:
                self.prefetch.cap = PREFETCH_CAP_PER_SLOT * slots
            self.stats.slots(slots)

    # -- shutdown ---------------------------------------------------------------------

    def _shutdown(self) -> None:
        log.info("node %s stopping: no more claims (a second signal exits at once)", self.node_id)
        self._stopping.set()
        self.release_unstarted()
        self.runs.wait_empty(self.settings.shutdown_grace)
        self._interrupt_remaining()
        self.recorder.stop()
        self.events.close()  # deliver what the last writes announced
        self._monitor_stop.set()
        self.leases.wake.set()
        for thread in self._threads:
            thread.join(timeout=10 if thread.name == "tickwork-monitor" else 5)
        self.leases.renewer.stop()
        self.slots.shutdown()
        self.executor.close()
        if self.locks is not None:
            self.locks.close()
        try:
            self.store.remove_node(self.node_id)
        except Exception:
            log.warning("could not remove node row", exc_info=True)
        self.stopped.set()
        log.info("node %s stopped", self.node_id)

    def release_unstarted(self) -> int:
        """Give back the claims still waiting for a slot, so that another node runs them
        now rather than after their leases expire; returns how many."""
        unstarted = self.runs.release_unstarted()
        if not unstarted:
            return 0
        if self.locks is not None:
            self.locks.release(unstarted)  # first: a node claiming them right after must find them free
        try:
            released = self.store.release(self.node_id, [r.claim for r in unstarted])
            log.info("gave back %d claimed but unstarted tasks", released)
        except Exception:
            log.warning("could not give back unstarted claims; their leases will expire", exc_info=True)
        self.runs.forget(unstarted)
        return len(unstarted)

    def _interrupt_remaining(self) -> None:
        """Runs still going after the grace are asked to stop, and waited for.

        Their leases are still renewed meanwhile: a run whose thread is alive is never
        recorded or given up while it might still act, so no other node starts it at the
        same time. Each ends FAILED ("shutdown") and its task is due again at once, without
        using up an attempt. A run that ignores cancellation holds the node until a second
        signal (or the orchestrator's SIGKILL) ends the process; its lease then expires.
        """
        remaining = self.runs.runs(lambda r: not r.finished)
        if not remaining:
            return
        log.warning("%d runs still going after shutdown_grace: cancelling them", len(remaining))
        for run in remaining:
            run.request_cancel(CancelReason.SHUTDOWN)
        while not self.runs.wait_empty(INTERRUPT_LOG_EVERY_S):
            log.warning("waiting for %d cancelled runs to stop (a second signal exits now)", self.running)

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
