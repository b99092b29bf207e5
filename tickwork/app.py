"""The App: the registry of task functions and the client API over a store.

Every input is validated here, before the store is touched, so a rejected call names
the field and value and leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

from tickwork import validate
from tickwork.clock import Clock, utcnow
from tickwork.codec import check_json, dumps
from tickwork.cron import CronSchedule, parse_timezone
from tickwork.errors import InvalidInput, InvalidState, PayloadTooLarge, TaskNotFound
from tickwork.events import Events, Hook
from tickwork.locks import RedisLocks
from tickwork.model import Execution, ExecutionStatus, Kind, Misfire, Node, OnLost, Overlap, Stats, Status, Task
from tickwork.node.redis_locks import NodeLocks, RedisMode
from tickwork.node.settings import NodeSettings
from tickwork.registry import Isolation, Registry, TaskOptions
from tickwork.schedules import IntervalSchedule, decide, first_slot_from, jitter_offset, schedule_of
from tickwork.store import NewTask, Skipping, Store, open_store

if TYPE_CHECKING:
    from tickwork.node.autoscale import Autoscaler
    from tickwork.node.worker import Worker

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_URL = "sqlite:///tickwork.db"
DEFAULT_MAX_PAYLOAD = 64 * 1024
RESUME_ATTEMPTS = 3
MAX_BACKFILL = 10_000
"""Most slots one backfill call schedules."""


class App:
    """Register tasks with ``@app.task``, schedule them, run nodes with ``run_worker``."""

    def __init__(
        self,
        url: str | None = None,
        *,
        lease: float = 30.0,
        heartbeat: float = 10.0,
        poll_interval: float = 1.0,
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
        clock: Clock = utcnow,
    ) -> None:
        if url is not None and (not isinstance(url, str) or not url):
            raise InvalidInput("url", url, "must be a database URL such as sqlite:///tickwork.db")
        self._url = url
        self._opened_url: str | None = None
        self.lease = validate.positive("lease", lease)
        self.heartbeat = validate.positive("heartbeat", heartbeat)
        if self.heartbeat >= self.lease:
            raise InvalidInput("heartbeat", heartbeat, f"must be shorter than the lease ({lease} s)")
        self.poll_interval = validate.positive("poll_interval", poll_interval)
        self.misfire_grace = validate.non_negative("misfire_grace", misfire_grace)
        self.shutdown_grace = validate.non_negative("shutdown_grace", shutdown_grace)
        if claim not in (None, "skip_locked", "optimistic"):
            raise InvalidInput("claim", claim, "must be 'skip_locked' or 'optimistic'")
        if claim == "skip_locked" and self.url.startswith("sqlite:"):
            raise InvalidInput("claim", claim, "SQLite supports only 'optimistic' (SKIP LOCKED needs PostgreSQL)")
        self.claim_strategy = claim
        if isinstance(max_payload, bool) or not isinstance(max_payload, int) or max_payload <= 0:
            raise InvalidInput("max_payload", max_payload, "must be a positive number of bytes")
        self.max_payload = max_payload
        if max_pending is not None and (
            isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1
        ):
            raise InvalidInput("max_pending", max_pending, "must be a positive number of tasks, or None (no limit)")
        self.max_pending = max_pending
        self.clock = clock
        self.registry = Registry()
        self.events = Events(webhook_url, webhook_secret)
        if redis_url is not None and (
            not isinstance(redis_url, str) or not redis_url.startswith(("redis://", "rediss://", "unix://"))
        ):
            raise InvalidInput("redis_url", redis_url, "must be a redis://, rediss:// or unix:// URL")
        self.redis_url = redis_url
        if not isinstance(redis_prefix, str) or not redis_prefix:
            raise InvalidInput("redis_prefix", redis_prefix, "must be a non-empty string")
        self.redis_prefix = redis_prefix
        try:
            self.redis_mode = RedisMode(redis_mode)
        except ValueError as exc:
            raise InvalidInput("redis_mode", redis_mode, "must be 'best_effort' or 'required'") from exc
        self.lock_ttl = validate.optional_positive("lock_ttl", lock_ttl)
        if self.lock_ttl is not None and self.lock_ttl < self.lease:
            raise InvalidInput("lock_ttl", lock_ttl, f"must be at least the lease ({lease} s): heartbeats extend it")
        self.wakeup = threading.Event()
        """Set when this process schedules or triggers something, to wake a local node."""
        self._store: Store | None = None
        self._store_lock = threading.Lock()

    # -- store --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The database URL: the one given, else ``TICKWORK_DB`` when the store is
        opened (so ``tickwork --db`` applies to apps imported earlier), else the default."""
        return self._opened_url or self._url or os.environ.get("TICKWORK_DB") or DEFAULT_URL

    @property
    def store(self) -> Store:
        """The store, opened and migrated to the latest schema on first use."""
        with self._store_lock:
            if self._store is None:
                url = self.url
                store = open_store(url, clock=self.clock, claim=self.claim_strategy)
                store.migrate()
                self._store, self._opened_url = store, url
            return self._store

    def node_locks(self) -> NodeLocks | None:
        """A node's Redis locks, when ``redis_url`` is set (each node has its own connection)."""
        if self.redis_url is None:
            return None
        locks = RedisLocks(self.redis_url, self.redis_prefix)
        return NodeLocks(
            locks, mode=self.redis_mode, lease=self.lease, heartbeat=self.heartbeat, lock_ttl=self.lock_ttl
        )

    def on(self, event: str) -> Callable[[Hook], Hook]:
        """Register a hook for an event (see ``events.EVENTS``): ``@app.on("execution_failed")``.

        Hooks run on the node that recorded the event, after the write, on a thread of
        their own; one that raises is logged and never breaks the node."""
        return self.events.on(event)

    def close(self) -> None:
        self.events.close()
        with self._store_lock:
            if self._store is not None:
                self._store.close()
                self._store, self._opened_url = None, None

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
        max_runtime: float | None = None,
        isolation: Isolation | str = Isolation.THREAD,
        kill_grace: float = 5.0,
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
        max_runtime: float | None = None,
        isolation: Isolation | str = Isolation.THREAD,
        kill_grace: float = 5.0,
    ) -> Any:
        """Register a function as a task; it stays a plain callable.

        The default name is ``module.qualname``; give ``name=`` when the module path may
        change, since stored tasks refer to it.

        ``isolation="process"`` runs each run in a child process, so that a cancel or a
        timeout can stop code that never checks ``ctx.cancelled`` (SIGTERM, then SIGKILL
        after ``kill_grace`` seconds); the function must be defined at module level.
        ``max_runtime`` bounds a run even while its node keeps renewing the lease: past
        it, any node's reconciler ends the run TIMED_OUT.
        """
        options = TaskOptions(
            timeout=validate.optional_positive("timeout", timeout),
            max_retries=validate.retries(max_retries),
            retry_backoff=validate.positive("retry_backoff", retry_backoff),
            misfire=validate.misfire(misfire),
            misfire_grace=None if misfire_grace is None else validate.non_negative("misfire_grace", misfire_grace),
            jitter=validate.non_negative("jitter", jitter),
            priority=validate.integer("priority", priority),
            max_catchup=validate.max_catchup(max_catchup),
            overlap=validate.overlap(overlap),
            on_lost=validate.on_lost(on_lost),
            max_runtime=validate.optional_positive("max_runtime", max_runtime),
            isolation=validate.isolation(isolation),
            kill_grace=validate.non_negative("kill_grace", kill_grace),
        )

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            if not callable(f):
                raise InvalidInput("func", f, "a task must be a function")
            if name is not None and (not isinstance(name, str) or not name.strip()):
                raise InvalidInput("name", name, "must be a non-empty string")
            qualname = getattr(f, "__qualname__", None)
            if name is None and qualname is None:
                raise InvalidInput("name", None, f"{f!r} has no __qualname__: give the task a name=")
            task_name = name or f"{getattr(f, '__module__', None) or '__main__'}.{qualname}"
            if options.isolation is Isolation.PROCESS and (qualname is None or "<" in qualname):
                raise InvalidInput(
                    "isolation", "process", f"{f!r} is not defined at module level: a child process cannot find it"
                )
            self.registry.add(task_name, f, options)
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
    ) -> Task:
        """Schedule ``task`` once (now, after ``delay``, ``at`` a time) or recurring
        (``cron`` in ``timezone``, or ``every``). Returns the stored task; with ``key``,
        the live task already holding that key if there is one."""
        new = self._new_task(
            task, args=args, kwargs=kwargs, delay=delay, at=at, cron=cron, timezone=timezone, every=every,
            key=key, misfire=misfire, misfire_grace=misfire_grace, jitter=jitter, timeout=timeout,
            max_retries=max_retries, retry_backoff=retry_backoff, priority=priority, max_catchup=max_catchup,
            overlap=overlap,
        )  # fmt: skip
        [stored] = self.store.insert_tasks([new], max_pending=self.max_pending)
        self.wakeup.set()
        return stored

    def schedule_many(self, items: Iterable[Mapping[str, Any]]) -> list[Task]:
        """Schedule many tasks in one transaction: all are validated before any is stored.

        Each item holds ``task`` (name or function) and ``schedule()``'s keyword arguments.
        """
        news: list[NewTask] = []
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidInput(f"items[{index}]", item, "must be a mapping of schedule() arguments")
            fields = dict(item)
            if "task" not in fields:
                raise InvalidInput(f"items[{index}].task", None, "missing")
            task = fields.pop("task")
            try:
                news.append(self._new_task(task, **fields))
            except InvalidInput as exc:
                raise type(exc)(f"items[{index}].{exc.field}", exc.value, exc.reason) from exc
            except TypeError as exc:
                raise InvalidInput(f"items[{index}]", sorted(fields), str(exc)) from exc
        stored = self.store.insert_tasks(news, max_pending=self.max_pending) if news else []
        self.wakeup.set()
        return stored

    def _new_task(
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
    ) -> NewTask:
        definition = self.registry.resolve(task)
        args_list, kwargs_dict = self._payload(args, kwargs)
        if cron is not None and every is not None:
            raise InvalidInput("every", every, "give either cron or every, not both")
        if delay is not None and at is not None:
            raise InvalidInput("at", at, "give either delay or at, not both")
        parse_timezone(timezone)
        if timezone != "UTC" and cron is None:
            raise InvalidInput("timezone", timezone, "only applies to cron schedules")
        # Everything that can be refused is checked before the store is touched.
        delay_s = None if delay is None else validate.seconds("delay", delay, allow_zero=True)
        at_utc = None if at is None else validate.moment("at", at)
        cron_schedule = None if cron is None else CronSchedule(cron, timezone)
        interval: float | None = None
        if every is not None:
            interval = validate.seconds("every", every, allow_zero=False)
            IntervalSchedule(interval)
        now = self.store.approximate_now()
        start = now if at_utc is None else at_utc
        if delay_s is not None:
            start = now + timedelta(seconds=delay_s)
        if cron_schedule is not None:
            kind = Kind.RECURRING
            scheduled_at = cron_schedule.next_after(start - timedelta(microseconds=1))
        elif interval is not None:
            kind = Kind.RECURRING
            # The first slot is one interval from now, unless a start was given.
            scheduled_at = start if (at is not None or delay is not None) else now + timedelta(seconds=interval)
        else:
            kind = Kind.ONE_TIME
            scheduled_at = start
        options = definition.options
        default_misfire = Misfire.SINGLE_CATCHUP if kind is Kind.RECURRING else Misfire.CATCHUP
        jitter_s = options.jitter if jitter is None else validate.non_negative("jitter", jitter)
        if key is not None and (not isinstance(key, str) or not key):
            raise InvalidInput("key", key, "must be a non-empty string")
        return NewTask(
            name=definition.name,
            args=args_list,
            kwargs=kwargs_dict,
            kind=kind,
            scheduled_at=scheduled_at,
            next_run_at=scheduled_at + jitter_offset(first_slot_seed(key), scheduled_at, jitter_s),
            key=key,
            cron=cron.strip() if cron is not None else None,
            timezone=timezone,
            interval=interval,
            misfire=validate.misfire(misfire) or options.misfire or default_misfire,
            misfire_grace=(
                validate.non_negative("misfire_grace", misfire_grace)
                if misfire_grace is not None
                else options.misfire_grace
                if options.misfire_grace is not None
                else self.misfire_grace
            ),
            jitter=jitter_s,
            timeout=options.timeout if timeout is None else validate.optional_positive("timeout", timeout),
            max_retries=options.max_retries if max_retries is None else validate.retries(max_retries),
            retry_backoff=options.retry_backoff
            if retry_backoff is None
            else validate.positive("retry_backoff", retry_backoff),
            priority=options.priority if priority is None else validate.integer("priority", priority),
            max_catchup=options.max_catchup if max_catchup is None else validate.max_catchup(max_catchup),
            overlap=options.overlap if overlap is None else validate.overlap(overlap),
            on_lost=options.on_lost,
            max_runtime=options.max_runtime,
        )

    def _payload(
        self, args: Iterable[Any] | None, kwargs: Mapping[str, Any] | None
    ) -> tuple[list[Any], dict[str, Any]]:
        if args is not None and (isinstance(args, (str, bytes, Mapping)) or not isinstance(args, Iterable)):
            raise InvalidInput("args", args, "must be a list of JSON values")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise InvalidInput("kwargs", kwargs, "must be a mapping of names to JSON values")
        args_list = list(args or [])
        kwargs_dict = dict(kwargs or {})
        check_json("args", args_list)
        check_json("kwargs", kwargs_dict)
        args_size, kwargs_size = len(dumps(args_list).encode()), len(dumps(kwargs_dict).encode())
        if args_size + kwargs_size > self.max_payload:
            field = "kwargs" if kwargs_size >= args_size else "args"
            raise PayloadTooLarge(
                field, f"<{args_size + kwargs_size} bytes>", f"payload exceeds max_payload={self.max_payload} bytes"
            )
        return args_list, kwargs_dict

    # -- reading ------------------------------------------------------------------------------

    def get(self, task_id: int) -> Task:
        task = self.store.get_task(validate.task_id(task_id))
        if task is None:
            raise TaskNotFound(task_id)
        return task

    def tasks(
        self, *, status: Status | str | None = None, name: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[Task]:
        validate.offset(offset)
        status_ = validate.enum_value(Status, "status", status)
        return self.store.list_tasks(status=status_, name=name, limit=validate.limit(limit), offset=offset)

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

    def resume(self, task_id: int, *, catch_up: bool = True) -> Task:
        """Resume a paused task. A paused task builds no backlog: the slots missed while
        paused go to its misfire policy when it is next claimed, or, with
        ``catch_up=False``, are all skipped now (and recorded as one SKIPPED execution)."""
        for _ in range(RESUME_ATTEMPTS):
            skipping = None if catch_up else self._skipping(self.get(task_id))
            task = self._require(self.store.resume(validate.task_id(task_id), skipping), task_id)
            if task.status is not Status.PAUSED:
                break  # resumed (or no longer paused): otherwise it changed under us, decide again
        if task.status is not Status.PENDING:
            raise InvalidState(task_id, task.status.value, "resume")
        self.wakeup.set()
        return task

    def _skipping(self, task: Task) -> Skipping | None:
        """The missed slots of a paused recurring task, decided as SKIP with no grace."""
        if task.kind is not Kind.RECURRING or task.status is not Status.PAUSED:
            return None
        policy = dataclasses.replace(task, misfire=Misfire.SKIP, misfire_grace=0.0, triggered=False)
        decision = decide(policy, self.store.approximate_now())
        if decision.run or decision.skipped_first is None or decision.skipped_last is None:
            return None
        then = decision.next_slot
        return Skipping(
            version=task.version,
            next_slot=then,
            next_run_at=then + jitter_offset(task.id, then, task.jitter),
            count=decision.skipped,
            first=decision.skipped_first,
            last=decision.skipped_last,
            decision=f"resumed without catch-up: {decision.text}",
        )

    def backfill(self, task_id: int, start: datetime, end: datetime) -> list[Task]:
        """Run every slot of a recurring task in [start, end] once, oldest first.

        Each slot becomes a one-time run of the same function and arguments whose
        ``ctx.scheduled_for`` is the slot, logged like any run. Slots that already have a
        COMPLETED execution (or a backfill run waiting) are refused. Returns the runs
        scheduled."""
        first = validate.moment("start", start)
        last = validate.moment("end", end)
        task = self.get(task_id)
        schedule = schedule_of(task)
        if schedule is None:
            raise InvalidInput("task_id", task_id, "only a recurring task can be backfilled")
        if last < first:
            raise InvalidInput("end", end.isoformat(), "must not be before start")
        if last > self.store.approximate_now():
            raise InvalidInput("end", end.isoformat(), "must not be in the future: the schedule runs those slots")
        slots: list[datetime] = []
        slot = first_slot_from(schedule, task.scheduled_at, first)
        while slot <= last:
            if len(slots) == MAX_BACKFILL:
                raise InvalidInput("end", end.isoformat(), f"the range holds more than {MAX_BACKFILL} slots")
            slots.append(slot)
            slot = schedule.next_after(slot)
        runs = [
            NewTask(
                name=task.name,
                args=task.args,
                kwargs=task.kwargs,
                kind=Kind.ONE_TIME,
                scheduled_at=s,
                next_run_at=s,
                key=f"backfill:{task_id}:{s.isoformat()}",
                misfire=Misfire.CATCHUP,
                misfire_grace=task.misfire_grace,
                timeout=task.timeout,
                max_retries=task.max_retries,
                retry_backoff=task.retry_backoff,
                priority=task.priority,
                parent_id=task_id,
                on_lost=task.on_lost,
                max_runtime=task.max_runtime,
            )
            for s in slots
        ]
        scheduled = self.store.backfill(task_id, first, last, runs) if runs else []
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
    ) -> None:
        """Run a node in this thread until SIGINT/SIGTERM (or ``Worker.stop``).

        ``max_concurrency`` turns on autoscaling: the node starts with ``concurrency``
        slots, grows toward ``max_concurrency`` while every slot is busy and the oldest
        due task is ``scale_up_age`` seconds old or more, and shrinks back after
        ``scale_down_after`` seconds with idle slots and no such backlog.
        ``prefetch``: claims held beyond the busy slots; None adapts it to how long runs
        take (see ``worker.Prefetch``), 0 claims only free slots."""
        from tickwork.node.autoscale import Autoscaler

        autoscaler = None
        if max_concurrency is not None:
            autoscaler = Autoscaler(
                concurrency, max_concurrency, scale_up_age=scale_up_age, scale_down_after=scale_down_after
            )
        self.worker(concurrency=concurrency, prefetch=prefetch, autoscaler=autoscaler).run(
            install_signals=install_signals
        )

    def node_settings(self) -> NodeSettings:
        return NodeSettings(
            lease=self.lease,
            heartbeat=self.heartbeat,
            poll_interval=self.poll_interval,
            shutdown_grace=self.shutdown_grace,
            max_payload=self.max_payload,
        )

    def worker(
        self,
        *,
        concurrency: int = 8,
        prefetch: int | None = None,
        autoscaler: Autoscaler | None = None,
        node_id: str | None = None,
    ) -> Worker:
        """A node for this App's tasks, store, hooks and settings (not started: ``run()``)."""
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
        )


def first_slot_seed(key: str | None) -> int:
    """Seeds the first slot's jitter before the task has an id (later slots use the id).

    Random per task, so a thousand tasks scheduled alike spread out; stable per key, so
    scheduling the same keyed task again lands on the same dispatch time.
    """
    return zlib.crc32(key.encode()) if key is not None else secrets.randbits(63)
