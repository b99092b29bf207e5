"""The App's node side: building and running a worker node over the App's settings."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from tickwork import gc_young, validate
from tickwork.app_edits import EditsMixin
from tickwork.errors import InvalidInput, PruneBusy
from tickwork.events import Events
from tickwork.locks import RedisLocks
from tickwork.model import PruneCounts
from tickwork.node.redis_locks import NodeLocks, RedisMode
from tickwork.node.settings import NodeSettings
from tickwork.urls import new_sqlite_file

if TYPE_CHECKING:
    from tickwork.app_settings import AppSettings
    from tickwork.node.autoscale import Autoscaler
    from tickwork.node.worker import Worker

log = logging.getLogger("tickwork.worker")

PRUNE_BATCH = 1000
DRY_RUN_LIMIT = 2**62
"""A dry run counts everything in one read: nothing is locked or deleted."""
BUSY_WAIT_S = 60.0
"""How long ``prune()`` waits for a node that holds the prune lock before giving up."""
BUSY_POLL_S = 0.5


def _age(value: timedelta | float) -> float:
    return validate.seconds("older_than", value, allow_zero=True)


def _keep(value: int) -> int:
    validate.integer("keep_last", value)
    if value < 0:
        raise InvalidInput("keep_last", value, "must be 0 or more executions")
    return value


class NodeMixin(EditsMixin):
    """Part of ``App`` (see there)."""

    settings: AppSettings
    events: Events
    redis_url: str | None
    redis_prefix: str
    redis_mode: RedisMode
    lease: float
    heartbeat: float
    lock_ttl: float | None
    retention: timedelta | None
    keep_last: int

    @property
    def url(self) -> str:  # provided by App
        raise NotImplementedError

    def open_store(self) -> None:
        """Open (and migrate) the store now. A SQLite file this creates is told (WARNING,
        with its absolute path): a mistyped path or working directory would otherwise
        start an empty scheduler that waits for ever."""
        new = new_sqlite_file(self.url)
        self.store  # noqa: B018
        if new is not None and new.exists():
            log.warning(
                "no database at %s: created a new, empty one (check the database URL, TICKWORK_DB or --db)", new
            )

    def sync_at_start(self) -> None:
        """A node's start-up sync. A bad declaration stops the node (the code must be
        fixed); a store that cannot be reached does not: the node starts and keeps
        trying to claim, and the next start syncs."""
        try:
            changes = self.sync_schedules()
        except InvalidInput:
            raise
        except Exception as exc:  # the node's own start-up must not depend on it
            log.warning("schedules in code were not synced: %s: %s", type(exc).__name__, exc)
            return
        done = [c for c in changes if c.action in ("create", "update", "remove")]
        for change in changes:
            if change.action == "unchanged":
                continue
            level = logging.WARNING if change.action in ("kept", "conflict") else logging.INFO
            note = f" ({change.note})" if change.note else ""
            log.log(level, "schedule %r: %s%s", change.key, change.action, note)
        log.info("schedules in code synced: %d declared, %d changed", len(changes), len(done))

    def prune(
        self, older_than: timedelta | float | None = None, *, keep_last: int | None = None, dry_run: bool = False
    ) -> PruneCounts:
        """Delete old history now, as nodes do by themselves: executions that ended more
        than ``older_than`` ago (default: the App's ``retention``), except each recurring
        task's newest ``keep_last`` (default: the App's), and ended one-time tasks with
        theirs; in batches until one deletes nothing. ``dry_run``: count, delete nothing.
        Waits (up to a minute) while a node holds the prune lock."""
        age = self.retention if older_than is None else timedelta(seconds=_age(older_than))
        if age is None:
            raise InvalidInput("older_than", None, "retention=None keeps everything: give older_than to prune anyway")
        keep = self.keep_last if keep_last is None else _keep(keep_last)
        store = self.store
        cutoff = store.now() - age
        if dry_run:
            return store.prune(cutoff, keep, DRY_RUN_LIMIT, dry_run=True)
        total = PruneCounts()
        deadline = time.monotonic() + BUSY_WAIT_S
        while True:
            counts = store.prune(cutoff, keep, PRUNE_BATCH)
            total += PruneCounts(counts.executions, counts.tasks)
            if counts.busy:
                if time.monotonic() > deadline:
                    raise PruneBusy(BUSY_WAIT_S)
                time.sleep(BUSY_POLL_S)
                continue
            if not counts.rows:
                return total
            deadline = time.monotonic() + BUSY_WAIT_S

    def node_locks(self) -> NodeLocks | None:
        """A node's Redis locks, when ``redis_url`` is set (each node has its own connection)."""
        if self.redis_url is None:
            return None
        locks = RedisLocks(self.redis_url, self.redis_prefix)
        return NodeLocks(
            locks, mode=self.redis_mode, lease=self.lease, heartbeat=self.heartbeat, lock_ttl=self.lock_ttl
        )

    # -- running ------------------------------------------------------------------------------------

    def run_worker(
        self,
        concurrency: int = 8,
        *,
        max_concurrency: int | None = None,
        scale_up_age: float = 5.0,
        scale_down_after: float = 30.0,
        prefetch: int | None = None,
        install_signals: bool = True,
        sync: bool = True,
        queues: Sequence[str] | None = None,
        gc_threshold: int | None = gc_young.NODE_THRESHOLD,
    ) -> None:
        """Run a node in this thread until SIGINT/SIGTERM (or ``Worker.stop``), claiming
        from ``queues`` (default: every queue its registered tasks use).

        ``max_concurrency`` turns on autoscaling: the node starts with ``concurrency``
        slots, grows toward ``max_concurrency`` while every slot is busy and the oldest
        due task is ``scale_up_age`` seconds old or more, and shrinks back after
        ``scale_down_after`` seconds with idle slots and no such backlog.
        ``prefetch``: claims held beyond the busy slots; None adapts it to how long runs
        take (see ``worker.Prefetch``), 0 claims only free slots. ``sync``: bring the
        code schedules in line first (``sync_schedules``), as every node does unless
        told not to. ``gc_threshold``: from the node's start (its store opened, its sync)
        until it ends, the process's cyclic garbage collector waits for at least this
        many new objects before a collection
        (``gc.set_threshold``; raised, never lowered, put back by the last node to end;
        None leaves it alone, as a node on a thread of a process with other work should):
        the node's objects live until its runs are written, and at Python's default (700)
        the collector walked them again and again (see tickwork/gc_young.py)."""
        from tickwork.node.autoscale import Autoscaler

        gc_young.checked(gc_threshold)
        autoscaler = None
        if max_concurrency is not None:
            autoscaler = Autoscaler(
                concurrency, max_concurrency, scale_up_age=scale_up_age, scale_down_after=scale_down_after
            )
        # From the start: opening the store and building the node import the driver and
        # the node's modules, whose long-lived objects the collector would otherwise walk
        # in ~45 young collections more (~2 ms of a start's ~0.2 s of CPU).
        with gc_young.raised(gc_threshold):
            if new_sqlite_file(self.url) is not None:
                self.open_store()  # told now; another store opens when the node first needs it
            if sync:
                self.sync_at_start()
            node = self.worker(concurrency=concurrency, prefetch=prefetch, autoscaler=autoscaler, queues=queues)
            node.run(install_signals=install_signals)

    def node_settings(self) -> NodeSettings:
        return self.settings.node()

    def worker(
        self,
        *,
        concurrency: int = 8,
        prefetch: int | None = None,
        autoscaler: Autoscaler | None = None,
        node_id: str | None = None,
        queues: Sequence[str] | None = None,
    ) -> Worker:
        """A node for this App's tasks, store, hooks and settings (not started: ``run()``),
        claiming from ``queues`` (default: the queues its registered tasks use)."""
        from tickwork.metrics import PrometheusStats
        from tickwork.node.worker import Worker

        return Worker(
            self.store,
            self.registry,
            self.node_settings(),
            events=self.events,
            wakeup=self.wakeup,
            locks=self.node_locks(),
            concurrency=concurrency,
            prefetch=prefetch,
            node_id=node_id,
            autoscaler=autoscaler,
            stats=PrometheusStats(),
            queues=queues,
        )
