"""The client API: scheduling forms, idempotency, state changes and bad input."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickwork import (
    App,
    Context,
    InvalidCron,
    InvalidInput,
    InvalidState,
    InvalidTimezone,
    Kind,
    Misfire,
    PayloadTooLarge,
    Status,
    TaskNotFound,
    TickworkError,
    UnknownTask,
)


@pytest.fixture
def app(sqlite_url: str) -> Iterator[App]:
    app = App(sqlite_url)

    @app.task
    def greet(ctx: Context, who: str = "world") -> str:
        return f"hello {who}"

    @app.task(name="reports.daily", max_retries=3, retry_backoff=2.0, timeout=60, jitter=5)
    async def daily(ctx: Context, day: str = "") -> None:
        return None

    app.greet = greet  # type: ignore[attr-defined]
    yield app
    app.close()


def test_registration_keeps_the_function_callable_and_names_it_module_qualname(app: App) -> None:
    greet = app.greet  # type: ignore[attr-defined]
    assert greet(None, "you") == "hello you"
    assert "tests.test_app.app.<locals>.greet" in app.registry.names()
    assert "reports.daily" in app.registry.names()


def test_schedule_now_delay_at_cron_and_every(app: App) -> None:
    before = app.store.now()
    now_task = app.schedule(app.greet, kwargs={"who": "a"})  # type: ignore[attr-defined]
    assert now_task.kind is Kind.ONE_TIME and now_task.status is Status.PENDING
    assert before <= now_task.scheduled_at <= app.store.now()
    assert now_task.misfire is Misfire.CATCHUP  # one-time tasks run however late

    delayed = app.schedule(app.greet, delay=30)  # type: ignore[attr-defined]
    assert delayed.scheduled_at - before >= timedelta(seconds=30)

    when = datetime(2031, 5, 4, 9, 30, tzinfo=UTC)
    at_task = app.schedule(app.greet, at=when)  # type: ignore[attr-defined]
    assert at_task.scheduled_at == when == at_task.next_run_at

    cron_task = app.schedule("reports.daily", cron="0 9 * * 1-5", timezone="Europe/Berlin")
    assert cron_task.kind is Kind.RECURRING and cron_task.misfire is Misfire.SINGLE_CATCHUP
    local = cron_task.scheduled_at.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute) == (9, 0) and local.weekday() < 5
    # registration defaults carried onto the stored task; jitter only moves next_run_at
    assert (cron_task.max_retries, cron_task.retry_backoff, cron_task.timeout) == (3, 2.0, 60.0)
    assert timedelta(0) <= cron_task.next_run_at - cron_task.scheduled_at < timedelta(seconds=5)

    every = app.schedule(app.greet, every=timedelta(minutes=5))  # type: ignore[attr-defined]
    assert every.interval == 300.0
    assert every.scheduled_at - before >= timedelta(minutes=5)


def test_idempotency_key_returns_the_live_task(app: App) -> None:
    first = app.schedule("reports.daily", cron="@daily", key="daily-report")
    again = app.schedule("reports.daily", cron="@hourly", key="daily-report")
    assert again.id == first.id and again.cron == "@daily"
    assert len(app.tasks()) == 1
    app.cancel(first.id)
    fresh = app.schedule("reports.daily", cron="@hourly", key="daily-report")
    assert fresh.id != first.id


def test_schedule_many_stores_all_in_order(app: App) -> None:
    when = datetime(2030, 1, 1, tzinfo=UTC)
    tasks = app.schedule_many([dict(task="reports.daily", kwargs={"day": str(i)}, at=when) for i in range(50)])
    assert [t.kwargs["day"] for t in tasks] == [str(i) for i in range(50)]
    assert len(app.tasks(limit=100)) == 50


def test_schedule_many_rejects_everything_when_one_item_is_bad(app: App) -> None:
    items: list[dict[str, Any]] = [dict(task="reports.daily"), dict(task="reports.daily", delay=-1)]
    with pytest.raises(InvalidInput, match="delay"):
        app.schedule_many(items)
    assert app.tasks() == []


def test_cancel_pause_resume_trigger(app: App) -> None:
    task = app.schedule(app.greet, delay=3600)  # type: ignore[attr-defined]
    paused = app.pause(task.id)
    assert paused.status is Status.PAUSED and paused.version == task.version + 1
    with pytest.raises(InvalidState, match="trigger"):
        app.trigger(task.id)
    resumed = app.resume(task.id)
    assert resumed.status is Status.PENDING
    triggered = app.trigger(task.id)
    assert triggered.next_run_at <= app.store.now()
    cancelled = app.cancel(task.id)
    assert cancelled.status is Status.CANCELLED
    assert app.cancel(task.id).status is Status.CANCELLED  # idempotent
    with pytest.raises(InvalidState, match="pause"):
        app.pause(task.id)
    with pytest.raises(InvalidState, match="resume"):
        app.resume(task.id)


def test_unknown_ids_raise_task_not_found(app: App) -> None:
    for call in (app.get, app.cancel, app.pause, app.resume, app.trigger, app.executions):
        with pytest.raises(TaskNotFound, match="task_id=999"):
            call(999)


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


BAD_INPUTS: list[tuple[str, dict[str, Any], type[TickworkError], str]] = [
    ("cron-minute", dict(cron="61 * * * *"), InvalidCron, "cron='61 \\* \\* \\* \\*'"),
    ("cron-step-zero", dict(cron="*/0 * * * *"), InvalidCron, "cron='\\*/0"),
    ("cron-never", dict(cron="0 0 31 2 *"), InvalidCron, "never fires"),
    ("cron-fields", dict(cron="* * * *"), InvalidCron, "5 fields"),
    ("cron-long-number", dict(cron="1" * 5000 + " * * * *"), InvalidCron, "minute field .*number too long"),
    ("cron-long-step", dict(cron="*/" + "9" * 40 + " * * * *"), InvalidCron, "minute field .*number too long"),
    ("cron-month-13", dict(cron="* * * 13 *"), InvalidCron, "month field '13' is invalid"),
    ("cron-month-0", dict(cron="* * * 0 *"), InvalidCron, "month field '0' is invalid"),
    ("cron-month-name", dict(cron="* * * FOO *"), InvalidCron, "month field 'FOO' is invalid"),
    ("cron-month-range", dict(cron="* * * JAN-FOO *"), InvalidCron, "month field 'JAN-FOO' is invalid"),
    ("cron-non-ascii", dict(cron="\u0661 * * * *"), InvalidCron, "printable ASCII"),
    ("cron-not-str", dict(cron=5), InvalidCron, "must be a string"),
    ("timezone", dict(cron="0 9 * * *", timezone="Mars/Olympus"), InvalidTimezone, "timezone='Mars/Olympus'"),
    ("kwargs-not-json", dict(kwargs={"when": datetime(2030, 1, 1)}), InvalidInput, r"kwargs\['when'\]=.*not JSON"),
    ("kwargs-int-key", dict(kwargs={"m": {1: "a"}}), InvalidInput, r"kwargs\['m'\]=1: .*keys must be strings"),
    ("kwargs-mixed-keys", dict(args=[{1: "a", "b": 2}]), InvalidInput, r"args\[0\]=1: .*keys must be strings"),
    ("args-nested-nan", dict(args=[[1.0, float("inf")]]), InvalidInput, r"args\[0\]\[1\]=inf"),
    ("kwargs-nul", dict(kwargs={"s": "a\x00b"}), InvalidInput, r"kwargs\['s'\]=.*NUL characters"),
    ("delay-overflow", dict(delay=1e12), InvalidInput, "delay=1000000000000.0"),
    ("every-overflow", dict(every=1e20), InvalidInput, r"every=1e\+20"),
    ("kwargs-not-mapping", dict(kwargs=[1, 2]), InvalidInput, "kwargs="),
    ("args-not-json", dict(args=[object()]), InvalidInput, r"args\[0\]=<object.*not JSON-serializable"),
    ("args-nan", dict(args=[float("nan")]), InvalidInput, r"args\[0\]=nan"),
    ("negative-delay", dict(delay=-5), InvalidInput, "delay=-5"),
    ("naive-at", dict(at=datetime(2030, 1, 1, 9, 0)), InvalidInput, "at='2030-01-01T09:00:00'.*timezone-aware"),
    ("every-zero", dict(every=0), InvalidInput, "every=0"),
    ("every-negative", dict(every=timedelta(seconds=-1)), InvalidInput, "every="),
    ("cron-and-every", dict(cron="* * * * *", every=5), InvalidInput, "every=5: give either cron or every"),
    ("delay-and-at", dict(delay=1, at=datetime(2030, 1, 1, tzinfo=UTC)), InvalidInput, "at="),
    ("payload", dict(kwargs={"blob": "x" * 70_000}), PayloadTooLarge, "max_payload=65536"),
    ("max-retries", dict(max_retries=-1), InvalidInput, "max_retries=-1"),
    ("jitter", dict(jitter=-0.5), InvalidInput, "jitter=-0.5"),
    ("misfire", dict(misfire="SOMETIMES"), InvalidInput, "misfire='SOMETIMES'"),
    ("key", dict(key=""), InvalidInput, "key=''"),
    ("jitter-huge", dict(jitter=1e15), InvalidInput, r"jitter=1000000000000000.0: must be at most"),
    ("grace-huge", dict(misfire_grace=1e300), InvalidInput, r"misfire_grace=1e\+300"),
    ("priority-huge", dict(priority=2**40), InvalidInput, "priority=1099511627776"),
    ("at-ancient", dict(cron="* * * * *", at=datetime(1, 1, 1, tzinfo=UTC)), InvalidInput, "at=.*between 1970"),
    ("deep-args", dict(args=[_deep(3000)]), InvalidInput, "nested deeper than 100"),
    ("mapping-proxy", dict(kwargs={"m": __import__("types").MappingProxyType({})}), InvalidInput, "mappingproxy"),
    ("args-payload", dict(args=["x" * 70_000]), PayloadTooLarge, "^args="),
]


@pytest.mark.parametrize(("label", "kwargs", "error", "message"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_names_field_and_value_and_stores_nothing(
    app: App, label: str, kwargs: dict[str, Any], error: type[TickworkError], message: str
) -> None:
    existing = app.schedule("reports.daily", cron="@daily", key="keep-me")
    with pytest.raises(error, match=message):
        app.schedule("reports.daily", **kwargs)
    assert [t.id for t in app.tasks()] == [existing.id]
    assert app.get(existing.id) == existing


def test_unknown_task_name_and_unregistered_function(app: App) -> None:
    with pytest.raises(UnknownTask, match=r"name='nope\.task'"):
        app.schedule("nope.task")

    def stranger(ctx: Context) -> None: ...

    with pytest.raises(UnknownTask, match="stranger"):
        app.schedule(stranger)
    assert app.tasks() == []


def test_bad_app_settings_are_rejected(sqlite_url: str) -> None:
    with pytest.raises(InvalidInput, match="heartbeat=30"):
        App(sqlite_url, lease=10, heartbeat=30)
    with pytest.raises(InvalidInput, match="claim='skip_locked'"):
        App(sqlite_url, claim="skip_locked")
    with pytest.raises(InvalidInput, match="poll_interval=0"):
        App(sqlite_url, poll_interval=0)


def test_app_reads_tickwork_db_and_defaults_to_local_file(
    monkeypatch: pytest.MonkeyPatch, sqlite_url: str, tmp_path: Any
) -> None:
    monkeypatch.setenv("TICKWORK_DB", sqlite_url)
    assert App().url == sqlite_url
    monkeypatch.delenv("TICKWORK_DB")
    assert App().url == "sqlite:///tickwork.db"


def test_same_name_for_two_functions_is_refused(app: App) -> None:
    def other(ctx: Context) -> None: ...

    with pytest.raises(InvalidInput, match=r"name='reports\.daily'"):
        app.task(name="reports.daily")(other)


def test_first_slot_jitter_spreads_tasks_scheduled_alike(app: App) -> None:
    tasks = app.schedule_many([dict(task="reports.daily", cron="0 9 * * *", jitter=300) for _ in range(50)])
    offsets = {t.next_run_at - t.scheduled_at for t in tasks}
    assert len(offsets) > 40  # not one herd
    assert all(timedelta(0) <= o < timedelta(seconds=300) for o in offsets)


@pytest.mark.parametrize(
    ("cron", "zone", "at", "first"),
    [
        # From inside the second pass of a repeated hour, a fixed-hour entry waits for the next day.
        ("0-59 2 * * *", "Europe/Berlin", datetime(2025, 10, 26, 1, 10, tzinfo=UTC), datetime(2025, 10, 27, 1, 0)),
        # A wildcard-minute entry fires in both passes: 01:00 EST comes after 01:55 EDT.
        ("*/5 1 * * *", "America/New_York", datetime(2025, 11, 2, 5, 56, tzinfo=UTC), datetime(2025, 11, 2, 6, 0)),
        # Half-hour and 45-minute offsets: 02:00 at +10:30, 03:45 at +13:45.
        ("* 2 * * *", "Australia/Lord_Howe", datetime(2023, 4, 1, 14, 0, tzinfo=UTC), datetime(2023, 4, 1, 15, 30)),
        ("* 3 * * *", "Pacific/Chatham", datetime(2024, 9, 28, 12, 45, tzinfo=UTC), datetime(2024, 9, 28, 14, 0)),
    ],
)
def test_first_slot_of_a_cron_schedule_across_dst(
    app: App, cron: str, zone: str, at: datetime, first: datetime
) -> None:
    task = app.schedule("reports.daily", cron=cron, timezone=zone, at=at, jitter=0)
    assert task.scheduled_at == first.replace(tzinfo=UTC)
    assert task.next_fire_times(2)[0] == task.scheduled_at


def test_cron_with_at_starts_no_earlier_than_at(app: App) -> None:
    start = datetime(2031, 1, 1, 12, 7, tzinfo=UTC)
    task = app.schedule("reports.daily", cron="*/15 * * * *", at=start, jitter=0)
    assert task.scheduled_at == datetime(2031, 1, 1, 12, 15, tzinfo=UTC)
    on_slot = app.schedule("reports.daily", cron="*/15 * * * *", at=datetime(2031, 1, 1, 12, 30, tzinfo=UTC), jitter=0)
    assert on_slot.scheduled_at == datetime(2031, 1, 1, 12, 30, tzinfo=UTC)


def test_ids_offsets_items_names_and_urls_are_checked(app: App, sqlite_url: str) -> None:
    for bad in (2**70, 0, "7", True):
        with pytest.raises(InvalidInput, match="task_id="):
            app.get(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="offset="):
        app.tasks(offset=-3)
    with pytest.raises(InvalidInput, match=r"items\[1\]="):
        app.schedule_many([dict(task="reports.daily"), "oops"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match=r"items\[0\]\.cron="):
        app.schedule_many([dict(task="reports.daily", cron="bad")])
    with pytest.raises(InvalidInput, match="name=''"):
        app.task(name="")(lambda ctx: None)
    with pytest.raises(InvalidInput, match="__qualname__"):
        app.task(__import__("functools").partial(print))
    with pytest.raises(InvalidInput, match="url=123"):
        App(123)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="max_payload=True"):
        App(sqlite_url, max_payload=True)
    assert app.tasks() == []


def test_a_refused_schedule_creates_no_database(tmp_path: Any) -> None:
    path = tmp_path / "typo.db"
    app = App(f"sqlite:///{path}")

    @app.task(name="f")
    def f(ctx: Context) -> None: ...

    with pytest.raises(InvalidInput, match="cron="):
        app.schedule("f", cron="bad")
    assert not path.exists()


def test_max_pending_refuses_the_task_that_would_pass_it_and_harms_nothing(store_url: str) -> None:
    from tickwork import QueueFull

    app = App(store_url, max_pending=1000)

    @app.task(name="job")
    def job(ctx: Context) -> None: ...

    try:
        app.schedule_many([{"task": "job", "key": f"k{i}"} for i in range(1000)])
        before = [(t.id, t.status, t.version) for t in app.tasks(limit=10_000)]
        with pytest.raises(QueueFull, match=r"max_pending=1000: 1000 tasks are due and unclaimed") as raised:
            app.schedule("job")
        assert (raised.value.field, raised.value.limit, raised.value.depth) == ("max_pending", 1000, 1000)
        again = app.schedule("job", key="k7")  # an idempotent retry adds nothing: not refused
        assert again.id == before[7][0]
        with pytest.raises(QueueFull):
            app.schedule_many([{"task": "job", "delay": 3600}, {"task": "job"}])  # all or nothing
        assert [(t.id, t.status, t.version) for t in app.tasks(limit=10_000)] == before
        later = app.schedule("job", delay=3600)  # not due: it adds nothing to the queue now
        assert later.status is Status.PENDING
        claims = app.store.claim("node", ["job"], 10, 30.0)  # the nodes catch up a little
        assert len(claims) == 10
        assert app.schedule("job").status is Status.PENDING
        assert app.stats().depth == 991
    finally:
        app.close()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_max_pending_must_be_a_positive_count(sqlite_url: str, bad: Any) -> None:
    with pytest.raises(InvalidInput, match=r"^max_pending="):
        App(sqlite_url, max_pending=bad)
