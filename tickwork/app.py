"""The App: the registry of task functions and the client API over a store.

Every input is checked before the store is touched, so a refused call leaves nothing behind."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar, overload

from tickwork import gc_pause, missed_slots, planning, validate, waiting
from tickwork.app_node import NodeMixin
from tickwork.app_settings import DEFAULT_CLAIM_AHEAD, DEFAULT_MAX_PAYLOAD, DEFAULT_RETENTION, AppSettings, Setting
from tickwork.clock import Clock, utcnow
from tickwork.declarations import Declarations
from tickwork.errors import EditConflict, InvalidInput, InvalidState, TaskNotFound
from tickwork.events import Events, Hook
from tickwork.lazy_store import LazyStore
from tickwork.model import Execution, ExecutionStatus, Kind, Misfire, Node, OnLost, Overlap, Stats, Status, Task
from tickwork.node.redis_locks import RedisMode
from tickwork.registry import Isolation, Registry, TaskOptions
from tickwork.store import Store
from tickwork.store.queues import QueueInfo
from tickwork.wakeup import Wakeup

F = TypeVar("F", bound=Callable[..., Any])

RESUME_ATTEMPTS = 3


class App(NodeMixin):
    """Register tasks with ``@app.task``, schedule them, run nodes with ``run_worker``."""

    lease: Setting[float] = Setting()
    heartbeat: Setting[float] = Setting()
    poll_interval: Setting[float] = Setting()
    claim_ahead: Setting[float] = Setting()
    misfire_grace: Setting[float] = Setting()
    shutdown_grace: Setting[float] = Setting()
    claim_strategy: Setting[str | None] = Setting("claim")
    max_payload: Setting[int] = Setting()
    max_pending: Setting[int | None] = Setting()
    redis_url: Setting[str | None] = Setting()
    redis_prefix: Setting[str] = Setting()
    redis_mode: Setting[RedisMode] = Setting()
    lock_ttl: Setting[float | None] = Setting()
    retention: Setting[timedelta | None] = Setting()
    keep_last: Setting[int] = Setting()

    def __init__(
        self,
        url: str | None = None,
        *,
        lease: float = 30.0,
        heartbeat: float = 10.0,
        poll_interval: float = 1.0,
        claim_ahead: float = DEFAULT_CLAIM_AHEAD,
        misfire_grace: float = 60.0,
        shutdown_grace: float = 30.0,
        claim: str | None = None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        max_pending: int | None = None,
        redis_url: str | None = None,
        redis_prefix: str = "tickwork:",
        redis_mode: str = "best_effort",
        lock_ttl: float | None = None,
        retention: timedelta | float | None = DEFAULT_RETENTION,
        keep_last: int = 20,
        clock: Clock = utcnow,
    ) -> None:
        self.settings = AppSettings(
            url=url, lease=lease, heartbeat=heartbeat, poll_interval=poll_interval, claim_ahead=claim_ahead,
            misfire_grace=misfire_grace, shutdown_grace=shutdown_grace, claim=claim, max_payload=max_payload,
            max_pending=max_pending, redis_url=redis_url, redis_prefix=redis_prefix, redis_mode=redis_mode,
            lock_ttl=lock_ttl, retention=retention, keep_last=keep_last,
        )  # fmt: skip
        self.clock = clock
        self.registry = Registry()
        self.events = Events(webhook_url, webhook_secret)
        self.wakeup = Wakeup()
        """Set when this process schedules or triggers something, to wake a local node."""
        self._store = LazyStore(url)
        self.declarations = Declarations()
        """The schedules declared with ``@app.periodic``."""

    # -- store --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The database URL: the one given, else ``TICKWORK_DB`` when the store is
        opened (so ``tickwork --db`` applies to apps imported earlier), else the default."""
        return self._store.url

    @property
    def store(self) -> Store:
        """The store, opened and migrated to the latest schema on first use."""
        return self._store.get(clock=self.clock, claim=self.claim_strategy)

    def on(self, event: str) -> Callable[[Hook], Hook]:
        """Register a hook for an event (see ``events.EVENTS``): ``@app.on("execution_failed")``.

        Hooks run on the node that recorded the event, after the write, on a thread of
        their own; one that raises is logged and never breaks the node."""
        return self.events.on(event)

    def close(self) -> None:
        self.events.close()
        self._store.close()

    # -- registration ---------------------------------------------------------------------

    @overload
    def task(self, func: F, /) -> F: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        timeout: float | None = None,
        max_retries: int = 0,
        retry_backoff: float = 1.0,
        misfire: Misfire | str | None = None,
        misfire_grace: float | None = None,
        jitter: float = 0.0,
        priority: int = 0,
        max_catchup: int = 100,
        overlap: Overlap | str = Overlap.SKIP,
        on_lost: OnLost | str = OnLost.RETRY,
        max_lost: int = 3,
        queue: str = "default",
        max_running: int | None = None,
        rate_limit: str | None = None,
        max_runtime: float | None = None,
        isolation: Isolation | str = Isolation.THREAD,
        kill_grace: float = 5.0,
        context: bool = True,
    ) -> Callable[[F], F]: ...

    def task(  # type: ignore[misc]  # mypy 2.4 rejects this valid overload pair
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        timeout: float | None = None,
        max_retries: int = 0,
        retry_backoff: float = 1.0,
        misfire: Misfire | str | None = None,
        misfire_grace: float | None = None,
        jitter: float = 0.0,
        priority: int = 0,
        max_catchup: int = 100,
        overlap: Overlap | str = Overlap.SKIP,
        on_lost: OnLost | str = OnLost.RETRY,
        max_lost: int = 3,
        queue: str = "default",
        max_running: int | None = None,
        rate_limit: str | None = None,
        max_runtime: float | None = None,
        isolation: Isolation | str = Isolation.THREAD,
        kill_grace: float = 5.0,
        context: bool = True,
    ) -> Any:
        """Register a function as a task; it stays a plain callable.

        The default name is ``module.qualname``; give ``name=`` when the module path may
        change, since stored tasks refer to it.

        ``isolation="process"`` runs each run in a child process, so that a cancel or a
        timeout can stop code that never checks ``ctx.cancelled`` (SIGTERM, then SIGKILL
        after ``kill_grace`` seconds); the function must be defined at module level.
        ``max_runtime`` bounds a run even while its node keeps renewing the lease: past
        it, any node's reconciler ends the run TIMED_OUT.
        A run lost with its node (``on_lost="retry"``) runs again, up to ``max_lost``
        times in a row, apart from ``max_retries``: it was never seen to fail; the next
        lost run then counts as a failure, so a task that kills its node cannot loop.
        ``max_running`` and ``rate_limit`` (``"100/m"``) hold across every node: at most
        that many runs of the name at once, at most that many starts per window.
        """
        options = TaskOptions(
            **validate.task_options(
                timeout=timeout, max_retries=max_retries, retry_backoff=retry_backoff, misfire=misfire,
                misfire_grace=misfire_grace, jitter=jitter, priority=priority, max_catchup=max_catchup,
                overlap=overlap, on_lost=on_lost, max_lost=max_lost, queue=queue, max_running=max_running,
                rate_limit=rate_limit, max_runtime=max_runtime,
                isolation=isolation,
                kill_grace=kill_grace, context=context,
            )
        )  # fmt: skip

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            self.registry.add(validate.task_name(f, name, options.isolation), f, options)
            return f

        return register(func) if func is not None else register

    # -- scheduling -------------------------------------------------------------------------

    def schedule(
        self,
        task: str | Callable[..., Any],
        *,
        args: Iterable[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        delay: float | timedelta | None = None,
        at: datetime | None = None,
        cron: str | None = None,
        timezone: str = "UTC",
        every: float | timedelta | None = None,
        key: str | None = None,
        misfire: Misfire | str | None = None,
        misfire_grace: float | None = None,
        jitter: float | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        retry_backoff: float | None = None,
        priority: int | None = None,
        max_catchup: int | None = None,
        overlap: Overlap | str | None = None,
        until: datetime | None = None,
        max_runs: int | None = None,
        queue: str | None = None,
        lock: str | None = None,
        replace: bool = False,
    ) -> Task:
        """Schedule ``task`` once (now, after ``delay``, ``at`` a time) or recurring
        (``cron`` in ``timezone``, or ``every``; ``until`` an aware time, at most
        ``max_runs`` runs, after which it ends COMPLETED). Returns the stored task.

        With ``key``: when a live task already holds it, that task is returned
        unchanged, with ``existed=True``; ``replace=True`` updates it in place to this
        call's definition instead, as ``update()`` would (``existed`` is True too).
        ``lock``: at most one task holding it runs at a time, across every node; the
        others wait their turn in due order."""
        given = planning.ScheduleArgs(
            args=args, kwargs=kwargs, delay=delay, at=at, cron=cron, timezone=timezone, every=every,
            key=key, misfire=misfire, misfire_grace=misfire_grace, jitter=jitter, timeout=timeout,
            max_retries=max_retries, retry_backoff=retry_backoff, priority=priority, max_catchup=max_catchup,
            overlap=overlap, until=until, max_runs=max_runs, queue=queue, lock=lock,
        )  # fmt: skip
        if replace and key is None:
            raise InvalidInput("replace", replace, "needs a key: it replaces the live task holding that key")
        definition = self.registry.resolve(task)
        request = planning.check(definition, given, max_payload=self.max_payload, misfire_grace=self.misfire_grace)
        new = planning.new_task(request, self.store.approximate_now())
        for attempt in range(1, RESUME_ATTEMPTS + 1):
            [stored] = self.store.insert_tasks([new], max_pending=self.max_pending)
            if not (stored.existed and replace):
                self.wakeup.set()
                return stored
            try:
                return self._replace(stored, new, start_given=delay is not None or at is not None)
            except EditConflict:  # the key's holder ended or kept changing: insert again
                if attempt == RESUME_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def schedule_many(self, items: Iterable[Mapping[str, Any]]) -> list[Task]:
        """Schedule many tasks in one transaction: all are validated before any is stored.

        Each item holds ``task`` (name or function) and ``schedule()``'s keyword arguments.
        The cyclic garbage collector waits meanwhile (tickwork/gc_pause.py)."""
        with gc_pause.paused():
            grace = self.misfire_grace
            requests = planning.check_items(self.registry, items, max_payload=self.max_payload, misfire_grace=grace)
            now = self.store.approximate_now()
            news = [planning.new_task(request, now) for request in requests]
            stored = self.store.insert_tasks(news, max_pending=self.max_pending) if news else []
        self.wakeup.set()
        return stored

    # -- reading ------------------------------------------------------------------------------

    def get(self, task_id: int) -> Task:
        return self._require(self.store.get_task(validate.task_id(task_id)), task_id)

    def tasks(
        self,
        *,
        status: Status | str | None = None,
        name: str | None = None,
        limit: int = 100,
        offset: int = 0,
        kind: Kind | str | None = None,
        newest_first: bool = False,
        queue: str | None = None,
    ) -> list[Task]:
        """Tasks in id order (``newest_first``: the reverse), filtered, one page."""
        validate.offset(offset)
        status_ = validate.enum_value(Status, "status", status)
        kind_ = validate.enum_value(Kind, "kind", kind)
        return self.store.list_tasks(
            status=status_, name=name, limit=validate.limit(limit), offset=offset, kind=kind_,
            newest_first=validate.flag("newest_first", newest_first),
            **({} if queue is None else {"queue": validate.queue(queue)}),
        )  # fmt: skip

    def executions(
        self, task_id: int | None = None, *, status: ExecutionStatus | str | None = None, limit: int = 100
    ) -> list[Execution]:
        """Executions (of one task, if given), newest first."""
        if task_id is not None:
            self.get(task_id)
        return self.store.list_executions(
            task_id=task_id, status=validate.enum_value(ExecutionStatus, "status", status), limit=validate.limit(limit)
        )

    def nodes(self) -> list[Node]:
        return self.store.list_nodes()

    def stats(self) -> Stats:
        """Queue depth and the age of the oldest due task, tasks per status, runs that
        ended in the last minute and hour per status, live nodes."""
        return self.store.stats()

    # -- managing ---------------------------------------------------------------------------------

    def cancel(self, task_id: int, *, run_only: bool = False) -> Task:
        """Cancel a task. A waiting task is CANCELLED now; a running one is asked to stop
        (``ctx.cancelled``, or ``asyncio`` cancellation) and ends CANCELLED when its run
        ends. With ``run_only=True``, only the current run of a running recurring task is
        stopped; the task goes on to its next slot."""
        task = self._require(self.store.cancel(validate.task_id(task_id), run_only=run_only), task_id)
        if run_only and not (task.status is Status.RUNNING and task.cancel_requested):
            raise InvalidState(task_id, f"{task.status.value} {task.kind.value}", "cancel the current run of")
        if task.status in (Status.COMPLETED, Status.FAILED):
            raise InvalidState(task_id, task.status.value, "cancel")
        return task

    def pause(self, task_id: int) -> Task:
        task = self._require(self.store.pause(validate.task_id(task_id)), task_id)
        if task.status is not Status.PAUSED:
            raise InvalidState(task_id, task.status.value, "pause")
        return task

    def pause_queue(self, name: str) -> None:
        """No task of queue ``name`` is claimed until it is resumed (runs going on finish).
        Its tasks' slots wait: on resume the misfire policy decides about the late ones,
        as for a paused task."""
        self.store.set_queue_paused(validate.queue(name), True)

    def resume_queue(self, name: str) -> None:
        self.store.set_queue_paused(validate.queue(name), False)

    def why_waiting(self, task: Task) -> str | None:
        """Why a due PENDING task is not running (its queue paused, a limit full), or None."""
        return waiting.why_waiting(self.store, task)

    def queues(self, name: str | None = None) -> list[QueueInfo]:
        """Every queue in use or ever paused, or only ``name``, with its state and counts."""
        return self.store.queues(None if name is None else validate.queue(name))

    def resume(self, task_id: int, *, catch_up: bool = True) -> Task:
        """Resume a paused task. A paused task builds no backlog: the slots missed while
        paused go to its misfire policy when it is next claimed, or, with
        ``catch_up=False``, are all skipped now (and recorded as one SKIPPED execution)."""
        for _ in range(RESUME_ATTEMPTS):
            skipping = None
            if not catch_up:
                skipping = missed_slots.skip_while_paused(self.get(task_id), self.store.approximate_now())
            task = self._require(self.store.resume(validate.task_id(task_id), skipping), task_id)
            if task.status is not Status.PAUSED:
                break  # resumed (or no longer paused): otherwise it changed under us, decide again
        if task.status is not Status.PENDING:
            raise InvalidState(task_id, task.status.value, "resume")
        self.wakeup.set()
        return task

    def backfill(self, task_id: int, start: datetime, end: datetime) -> list[Task]:
        """Run every slot of a recurring task in [start, end] once, oldest first.

        Each slot becomes a one-time run of the same function and arguments whose
        ``ctx.scheduled_for`` is the slot, logged like any run. Slots that already have a
        COMPLETED execution (or a backfill run waiting) are refused. Returns the runs
        scheduled."""
        span = missed_slots.window(start, end)
        runs = missed_slots.backfill_runs(self.get(task_id), span, self.store.approximate_now())
        scheduled = self.store.backfill(task_id, span.first, span.last, runs) if runs else []
        self.wakeup.set()
        return scheduled

    def trigger(self, task_id: int) -> Task:
        """Run a PENDING task now. A recurring task keeps its schedule: the extra run
        does not consume its next slot."""
        task = self._require(self.store.trigger(validate.task_id(task_id)), task_id)
        # The guard (PENDING) and the read-back share one transaction: a task that is not
        # PENDING now is one the trigger did not apply to.
        if task.status is not Status.PENDING:
            raise InvalidState(task_id, task.status.value, "trigger")
        self.wakeup.set()
        return task

    @staticmethod
    def _require(task: Task | None, task_id: int) -> Task:
        if task is None:
            raise TaskNotFound(task_id)
        return task
