"""From a ``schedule()`` call to the ``NewTask`` the store inserts, without a store.

Two steps, so that every argument is checked before the store is touched (a refused
call opens no database and leaves nothing behind): ``check`` refuses what is wrong and
resolves the task's registered options against the call's overrides; ``new_task`` then
places the first slot relative to the store's "now".
"""

from __future__ import annotations

import dataclasses
import secrets
import zlib
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from tickwork import binding, frozen, limits, validate
from tickwork.codec import check_arguments, dumps_checked
from tickwork.cron import CronSchedule, parse_timezone
from tickwork.errors import InvalidInput, PayloadTooLarge
from tickwork.model import Encoded, Kind, Misfire, NewTask, Overlap
from tickwork.registry import Registry, TaskDef, TaskOptions
from tickwork.schedules import IntervalSchedule, jitter_offset

OVERRIDABLE = (
    "jitter",
    "misfire",
    "misfire_grace",
    "timeout",
    "max_retries",
    "retry_backoff",
    "priority",
    "max_catchup",
    "overlap",
    "queue",
)
"""The registered options a ``schedule()`` call may override (None: keep the task's)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleArgs:
    """``schedule()``'s keyword arguments as the caller gave them, not yet checked.

    One value for ``schedule()`` and for each item of ``schedule_many()``, so both go
    through the same checks (``check_items`` refuses an unknown item key by name)."""

    args: Iterable[Any] | None = None
    kwargs: Mapping[str, Any] | None = None
    delay: float | timedelta | None = None
    at: datetime | None = None
    cron: str | None = None
    timezone: str = "UTC"
    every: float | timedelta | None = None
    key: str | None = None
    misfire: Misfire | str | None = None
    misfire_grace: float | None = None
    jitter: float | None = None
    timeout: float | None = None
    max_retries: int | None = None
    retry_backoff: float | None = None
    priority: int | None = None
    max_catchup: int | None = None
    overlap: Overlap | str | None = None
    until: datetime | None = None
    max_runs: int | None = None
    queue: str | None = None
    lock: str | None = None


SCHEDULE_FIELDS = tuple(f.name for f in dataclasses.fields(ScheduleArgs))
_KNOWN_FIELDS = frozenset(SCHEDULE_FIELDS)


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """A checked ``schedule()`` call: nothing in it can be refused any more."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    delay: float | None
    """Seconds from now to the start, if a delay was given."""
    at: datetime | None
    """The start in UTC, if one was given."""
    cron: CronSchedule | None
    timezone: str
    interval: float | None
    key: str | None
    options: TaskOptions
    """The task's registered options with the call's overrides applied."""
    misfire_grace: float
    """The grace that applies: the call's, else the registration's, else the App's."""
    until: datetime | None = None
    max_runs: int | None = None
    lock: str | None = None
    encoded: Encoded | None = None
    """``args`` and ``kwargs`` with the text that measured them (model.Encoded)."""


_schedule_args = frozen.constructor(ScheduleArgs)
_request = frozen.constructor(Request)
_encoded = frozen.constructor(Encoded)
"""``ScheduleArgs(...)``, ``Request(...)`` and ``Encoded(...)`` at a fraction of their
cost (tickwork/frozen.py): one of each per item of a bulk schedule."""


def check(
    definition: TaskDef, given: ScheduleArgs, *, max_payload: int, misfire_grace: float, bind: bool = True
) -> Request:
    """Refuse a bad ``schedule()`` call, naming the first bad field (in the order the
    arguments are read: payload, arguments against the function's signature, schedule
    form, start, then per-task options). ``bind=False``: ``definition`` is not the
    registered function (an edit in a process that does not register it)."""
    args, kwargs, encoded = payload(given.args, given.kwargs, max_payload)
    if bind:
        binding.check_call(definition, args, kwargs)
    if given.cron is not None and given.every is not None:
        raise InvalidInput("every", given.every, "give either cron or every, not both")
    if given.delay is not None and given.at is not None:
        raise InvalidInput("at", given.at, "give either delay or at, not both")
    parse_timezone(given.timezone)
    if given.timezone != "UTC" and given.cron is None:
        raise InvalidInput("timezone", given.timezone, "only applies to cron schedules")
    delay = None if given.delay is None else validate.seconds("delay", given.delay, allow_zero=True)
    at = None if given.at is None else validate.moment("at", given.at)
    cron = None if given.cron is None else CronSchedule(given.cron, given.timezone)
    interval: float | None = None
    if given.every is not None:
        interval = validate.seconds("every", given.every, allow_zero=False)
        IntervalSchedule(interval)
    if given.key is not None:
        validate.text("key", given.key)
    until, max_runs = _ends(given, recurring=cron is not None or interval is not None)
    overrides = {name: getattr(given, name) for name in OVERRIDABLE if getattr(given, name) is not None}
    options = definition.options
    if overrides:
        options = dataclasses.replace(options, **validate.task_options(**overrides))
    return _request(
        name=definition.name,
        args=args,
        kwargs=kwargs,
        delay=delay,
        at=at,
        cron=cron,
        timezone=given.timezone,
        interval=interval,
        key=given.key,
        options=options,
        misfire_grace=misfire_grace if options.misfire_grace is None else options.misfire_grace,
        until=until,
        max_runs=max_runs,
        lock=limits.lock(given.lock),
        encoded=encoded,
    )


def _ends(given: ScheduleArgs, *, recurring: bool) -> tuple[datetime | None, int | None]:
    """``until`` and ``max_runs``, which only a recurring schedule has."""
    until = None if given.until is None else validate.moment("until", given.until)
    max_runs = None
    if given.max_runs is not None:
        max_runs = validate.count("max_runs", given.max_runs, "must be a whole number, 1 or more")
        if max_runs > validate.MAX_INT32:
            raise InvalidInput("max_runs", max_runs, f"must be at most {validate.MAX_INT32}")
    if not recurring:
        if given.until is not None:
            raise InvalidInput("until", given.until, "only applies to recurring schedules (cron or every)")
        if given.max_runs is not None:
            raise InvalidInput("max_runs", given.max_runs, "only applies to recurring schedules (cron or every)")
    return until, max_runs


def check_items(
    registry: Registry, items: Iterable[Mapping[str, Any]], *, max_payload: int, misfire_grace: float
) -> list[Request]:
    """Each item of ``schedule_many()`` (``task`` plus ``schedule()``'s keyword
    arguments) checked like a ``schedule()`` call; a refusal names the item, as in
    ``items[3].cron``, so one bad item in thousands can be found."""
    requests: list[Request] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidInput(f"items[{index}]", item, "must be a mapping of schedule() arguments")
        fields = dict(item)
        if "task" not in fields:
            raise InvalidInput(f"items[{index}].task", None, "missing")
        task = fields.pop("task")
        if not _KNOWN_FIELDS.issuperset(fields):
            unknown = sorted(str(k) for k in fields if k not in _KNOWN_FIELDS)
            raise InvalidInput(
                f"items[{index}].{unknown[0]}",
                fields[unknown[0]],
                f"unknown field (known: task, {', '.join(SCHEDULE_FIELDS)})",
            )
        try:
            given = _schedule_args(**fields)
            definition = registry.resolve(task)
            requests.append(check(definition, given, max_payload=max_payload, misfire_grace=misfire_grace))
        except InvalidInput as exc:
            raise type(exc)(f"items[{index}].{exc.field}", exc.value, exc.reason) from exc
    return requests


_new_task = frozen.constructor(NewTask)
"""``NewTask(...)`` at a fraction of its cost (tickwork/frozen.py): one per item of a bulk schedule."""


def new_task(request: Request, now: datetime, *, seed: int | None = None) -> NewTask:
    """The task to insert for ``request`` when the store's clock reads ``now``.

    ``seed`` spreads the first slot's jitter (default: ``first_slot_seed`` of the key)."""
    kind, scheduled_at = first_slot(request, now)
    if request.until is not None and scheduled_at > request.until:
        raise InvalidInput("until", request.until, f"is before the first slot, {scheduled_at.isoformat()}")
    options = request.options
    jitter = timedelta(0)
    if options.jitter > 0:
        jitter = jitter_offset(first_slot_seed(request.key) if seed is None else seed, scheduled_at, options.jitter)
    # Positional, in NewTask's field order (by name took twice as long); the test of
    # every option (tests/test_planning.py) compares each field with the request's.
    return _new_task(
        request.name, request.args, request.kwargs, kind, scheduled_at, scheduled_at + jitter, request.key,
        request.cron.expression.strip() if request.cron is not None else None, request.timezone, request.interval,
        options.misfire or (Misfire.SINGLE_CATCHUP if kind is Kind.RECURRING else Misfire.CATCHUP),
        request.misfire_grace, options.jitter, options.timeout, options.max_retries, options.retry_backoff,
        options.priority, options.max_catchup, options.overlap,
        None, options.on_lost, options.max_runtime, request.until, request.max_runs,  # None: parent_id
        None, None, options.max_lost, options.queue, request.lock,  # None: origin, declared_at
        options.max_running, options.rate_limit, request.encoded,
    )  # fmt: skip


def first_slot(request: Request, now: datetime) -> tuple[Kind, datetime]:
    """The task's kind and its first slot (before jitter).

    A cron task's first slot is the first fire time at or after the start; an interval
    task's is the start if one was given, else one interval from now."""
    start = now if request.at is None else request.at
    if request.delay is not None:
        start = now + timedelta(seconds=request.delay)
    if request.cron is not None:
        return Kind.RECURRING, request.cron.next_after(start - timedelta(microseconds=1))
    if request.interval is not None:
        given_start = request.at is not None or request.delay is not None
        return Kind.RECURRING, start if given_start else now + timedelta(seconds=request.interval)
    return Kind.ONE_TIME, start


def payload(
    args: Iterable[Any] | None, kwargs: Mapping[str, Any] | None, max_payload: int
) -> tuple[list[Any], dict[str, Any], Encoded]:
    """The arguments as JSON-ready values, refused when a node could not receive them
    as given or when their encoding exceeds ``max_payload`` bytes."""
    if (
        args is not None
        and type(args) is not list
        and (isinstance(args, (str, bytes, Mapping)) or not isinstance(args, Iterable))
    ):
        raise InvalidInput("args", args, "must be a list of JSON values")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InvalidInput("kwargs", kwargs, "must be a mapping of names to JSON values")
    args_list = list(args or [])
    kwargs_dict = dict(kwargs or {})
    flat = check_arguments("args", args_list) & check_arguments("kwargs", kwargs_dict)  # both checked, args first
    text = dumps_checked(args_list), dumps_checked(kwargs_dict)
    args_size, kwargs_size = len(text[0]), len(text[1])  # dumps escapes all but ASCII: a byte a character
    if args_size + kwargs_size > max_payload:
        field = "kwargs" if kwargs_size >= args_size else "args"
        raise PayloadTooLarge(
            field, f"<{args_size + kwargs_size} bytes>", f"payload exceeds max_payload={max_payload} bytes"
        )
    return args_list, kwargs_dict, _encoded(args_list, kwargs_dict, text, flat)


def first_slot_seed(key: str | None) -> int:
    """Seeds the first slot's jitter before the task has an id (later slots use the id).

    Random per task, so a thousand tasks scheduled alike spread out; stable per key, so
    scheduling the same keyed task again lands on the same dispatch time.
    """
    return zlib.crc32(key.encode()) if key is not None else secrets.randbits(63)
