"""Unit tests of ``tickwork.planning``: a ``schedule()`` call's arguments and a task's
registered options in, the ``NewTask`` to insert out. No store, no clock: "now" is given."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickwork import validate
from tickwork.errors import InvalidInput, PayloadTooLarge, UnknownTask
from tickwork.model import Kind, Misfire, OnLost, Overlap
from tickwork.planning import (
    OVERRIDABLE,
    Request,
    ScheduleArgs,
    check,
    check_items,
    first_slot,
    first_slot_seed,
    new_task,
    payload,
)
from tickwork.registry import Registry, TaskDef, TaskOptions

NOW = datetime(2024, 5, 1, 12, 0, 30, tzinfo=UTC)
JOB = TaskDef("job", lambda ctx: None, TaskOptions())


def plan(definition: TaskDef = JOB, *, grace: float = 60.0, seed: int | None = 0, **given: Any) -> Any:
    request = check(definition, ScheduleArgs(**given), max_payload=1024, misfire_grace=grace)
    return new_task(request, NOW, seed=seed)


def test_a_one_time_task_is_due_now_or_after_its_delay_or_at_its_time() -> None:
    now = plan()
    assert (now.kind, now.scheduled_at, now.next_run_at) == (Kind.ONE_TIME, NOW, NOW)
    assert plan(delay=timedelta(minutes=5)).scheduled_at == NOW + timedelta(minutes=5)
    at = datetime(2030, 1, 1, 9, tzinfo=UTC)
    assert plan(at=at).scheduled_at == at
    assert now.misfire is Misfire.CATCHUP


def test_recurring_first_slots() -> None:
    cron = plan(cron=" */15 * * * * ")
    assert (cron.kind, cron.scheduled_at) == (Kind.RECURRING, datetime(2024, 5, 1, 12, 15, tzinfo=UTC))
    assert cron.cron == "*/15 * * * *" and cron.misfire is Misfire.SINGLE_CATCHUP
    on_slot = plan(cron="*/15 * * * *", at=datetime(2024, 5, 1, 13, 0, tzinfo=UTC))
    assert on_slot.scheduled_at == datetime(2024, 5, 1, 13, 0, tzinfo=UTC)  # a start on a slot is that slot
    # An interval starts one interval from now, unless a start is given.
    assert plan(every=60).scheduled_at == NOW + timedelta(seconds=60)
    assert plan(every=60, delay=0).scheduled_at == NOW
    assert plan(every=60, at=NOW - timedelta(hours=1)).scheduled_at == NOW - timedelta(hours=1)


def test_first_slot_of_a_cron_schedule_is_read_in_its_zone() -> None:
    request = check(JOB, ScheduleArgs(cron="0 9 * * *", timezone="Europe/Berlin"), max_payload=1024, misfire_grace=1)
    assert first_slot(request, NOW) == (Kind.RECURRING, datetime(2024, 5, 2, 7, 0, tzinfo=UTC))


def test_options_come_from_the_registration_unless_the_call_overrides_them() -> None:
    registered = TaskDef(
        "job",
        lambda ctx: None,
        TaskOptions(timeout=30.0, max_retries=2, misfire=Misfire.SKIP, overlap=Overlap.REPLACE, on_lost=OnLost.FAIL),
    )
    inherited = plan(registered)
    assert (inherited.timeout, inherited.max_retries, inherited.misfire) == (30.0, 2, Misfire.SKIP)
    assert (inherited.overlap, inherited.on_lost) == (Overlap.REPLACE, OnLost.FAIL)
    overridden = plan(registered, timeout=5, max_retries=0, misfire="catchup", overlap="skip", priority=-3)
    assert (overridden.timeout, overridden.max_retries, overridden.misfire) == (5.0, 0, Misfire.CATCHUP)
    assert (overridden.overlap, overridden.priority, overridden.on_lost) == (Overlap.SKIP, -3, OnLost.FAIL)


def test_every_field_of_the_new_task_is_the_requests_own() -> None:
    # Each option a value no other field holds, so a field filled from the wrong one shows.
    options = TaskOptions(
        timeout=11.0, max_retries=12, retry_backoff=13.0, misfire=Misfire.SKIP, misfire_grace=14.0, jitter=0.0,
        priority=15, max_catchup=16, overlap=Overlap.REPLACE, on_lost=OnLost.FAIL, max_lost=17, queue="q18",
        max_running=19, rate_limit="20/m", max_runtime=21.0,
    )  # fmt: skip
    given = ScheduleArgs(
        args=[1], kwargs={"k": 2}, cron="0 9 * * *", timezone="Europe/Berlin", key="key",
        until=NOW + timedelta(days=30), max_runs=22, lock="lock",
    )  # fmt: skip
    request = check(TaskDef("job", lambda ctx, a, k: None, options), given, max_payload=1024, misfire_grace=1.0)
    new = new_task(request, NOW)
    assert (new.name, new.kind, new.next_run_at) == ("job", Kind.RECURRING, new.scheduled_at)
    assert (new.parent_id, new.origin, new.declared_at) == (None, None, None)  # set only by their own paths
    for field in dataclasses.fields(new):
        if hasattr(request, field.name) and field.name not in ("cron", "misfire_grace"):
            assert getattr(new, field.name) == getattr(request, field.name), field.name
        elif hasattr(options, field.name) and field.name != "misfire_grace":
            assert getattr(new, field.name) == getattr(options, field.name), field.name
    assert (new.cron, new.misfire_grace) == ("0 9 * * *", 14.0)


def test_misfire_grace_is_the_calls_else_the_registrations_else_the_apps() -> None:
    graced = TaskDef("job", lambda ctx: None, TaskOptions(misfire_grace=5.0))
    assert plan(JOB, grace=60).misfire_grace == 60.0
    assert plan(graced, grace=60).misfire_grace == 5.0
    assert plan(graced, grace=60, misfire_grace=0).misfire_grace == 0.0


def test_jitter_spreads_the_first_slot_by_key_or_at_random() -> None:
    keyed = plan(every=60, jitter=300, key="k", seed=None)
    assert keyed == plan(every=60, jitter=300, key="k", seed=first_slot_seed("k"))  # stable per key
    assert timedelta(0) <= keyed.next_run_at - keyed.scheduled_at < timedelta(seconds=300)
    assert first_slot_seed(None) != first_slot_seed(None)
    assert plan(every=60, jitter=0, seed=12345).next_run_at == NOW + timedelta(seconds=60)


@pytest.mark.parametrize(
    ("given", "field"),
    [
        (dict(cron="* * * * *", every=5), "every"),
        (dict(delay=1, at=NOW), "at"),
        (dict(timezone="Europe/Berlin"), "timezone"),
        (dict(delay=-1), "delay"),
        (dict(at=datetime(2030, 1, 1)), "at"),
        (dict(every=0), "every"),
        (dict(key=""), "key"),
        (dict(jitter=-1), "jitter"),
        (dict(misfire="SOMETIMES"), "misfire"),
        (dict(misfire_grace=-1), "misfire_grace"),
        (dict(timeout=0), "timeout"),
        (dict(max_retries=-1), "max_retries"),
        (dict(retry_backoff=0), "retry_backoff"),
        (dict(priority=2**40), "priority"),
        (dict(max_catchup=0), "max_catchup"),
        (dict(overlap="sometimes"), "overlap"),
        (dict(args="abc"), "args"),
        (dict(kwargs=[1]), "kwargs"),
    ],
)
def test_a_bad_argument_is_refused_by_name(given: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check(JOB, ScheduleArgs(**given), max_payload=1024, misfire_grace=60)
    assert refused.value.field == field


def test_the_payload_limit_names_the_larger_part() -> None:
    assert payload((1, 2), {"a": None}, 100)[:2] == ([1, 2], {"a": None})
    assert payload((1, 2), {"a": None}, 100)[2].text == ("[1,2]", '{"a":null}')
    with pytest.raises(PayloadTooLarge) as refused:
        payload(["x" * 50], {"a": "y" * 60}, 100)
    assert refused.value.field == "kwargs" and "max_payload=100" in refused.value.reason
    with pytest.raises(PayloadTooLarge, match=r"^args="):
        payload(["x" * 200], None, 100)


def test_items_are_checked_each_and_named_by_their_index() -> None:
    registry = Registry()
    registry.add("job", JOB.func, TaskOptions())
    requests = check_items(registry, [{"task": "job"}, {"task": "job", "every": 5}], max_payload=1024, misfire_grace=1)
    assert [isinstance(r, Request) and r.interval for r in requests] == [None, 5.0]
    refusals = {
        "items[1]": [{"task": "job"}, "oops"],
        "items[0].task": [{"every": 5}],
        "items[0].cron": [{"task": "job", "cron": "bad"}],
        "items[0].name": [{"task": "nope"}],
    }
    for field, items in refusals.items():
        with pytest.raises(InvalidInput) as refused:
            check_items(registry, items, max_payload=1024, misfire_grace=1)  # type: ignore[arg-type]
        assert refused.value.field == field
    with pytest.raises(UnknownTask):
        check_items(registry, [{"task": "nope"}], max_payload=1024, misfire_grace=1)
    with pytest.raises(InvalidInput, match="unknown field") as unknown:
        check_items(registry, [{"task": "job", "colour": "red"}], max_payload=1024, misfire_grace=1)
    assert unknown.value.field == "items[0].colour" and unknown.value.value == "red"
    assert "ScheduleArgs" not in str(unknown.value)  # no internal name reaches the user


def test_every_option_has_one_rule_shared_by_registration_and_schedule() -> None:
    option_names = {f.name for f in dataclasses.fields(TaskOptions)}
    assert set(validate.OPTION_CHECKS) == option_names
    assert set(OVERRIDABLE) <= option_names & {f.name for f in dataclasses.fields(ScheduleArgs)}
    assert validate.task_options(timeout=None, kill_grace=1, isolation="PROCESS") == {
        "timeout": None,
        "kill_grace": 1.0,
        "isolation": "process",
    }
