"""The pure planners of edits and syncs (tickwork/editing.py, tickwork/declarations.py):
what update(), retry() and a sync decide from a task as read, without a store."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from tests.test_schedules import T0, make_task
from tickwork import Context, InvalidInput, InvalidState
from tickwork.changes import SyncView
from tickwork.declarations import REMOVED, Declarations, digest, periodic_args, plan, resolved
from tickwork.editing import retried, updated
from tickwork.model import ExecutionStatus, Kind, NewTask, Status, Task
from tickwork.registry import Registry, TaskDef, TaskOptions
from tickwork.schedules import settle

LIMITS: dict[str, Any] = {"max_payload": 65536, "misfire_grace": 60.0}
NOW = T0 + timedelta(minutes=30)


def pending(**fields: Any) -> Task:
    base = {"status": Status.PENDING, "lease_owner": None, "lease_expires_at": None, "attempt": 0}
    return make_task(**{**base, **fields})


def job(ctx: Context, to: str, subject: str = "") -> None: ...


def definition(**options: Any) -> TaskDef:
    return TaskDef("job", job, TaskOptions(**options))


# -- update -----------------------------------------------------------------------------


def test_update_refuses_an_unknown_field_by_name_and_an_empty_change() -> None:
    with pytest.raises(InvalidInput) as caught:
        updated(pending(), {"colour": "red"}, None, NOW, **LIMITS)
    assert caught.value.field == "colour" and "cannot be changed by update" in caught.value.reason
    with pytest.raises(InvalidInput, match="nothing to change"):
        updated(pending(), {}, None, NOW, **LIMITS)


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.FAILED, Status.CANCELLED])
def test_an_ended_task_cannot_be_updated(status: Status) -> None:
    with pytest.raises(InvalidState, match=f"cannot update a task that is {status.value}"):
        updated(pending(status=status), {"kwargs": {}}, None, NOW, **LIMITS)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "0 0 30 2 *"}, "cron"),  # never fires
        ({"every": -5}, "every"),
        ({"jitter": -1}, "jitter"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"max_retries": "three"}, "max_retries"),
        ({"max_runs": 0}, "max_runs"),
        ({"until": T0.replace(tzinfo=None)}, "until"),
        ({"kwargs": [1, 2]}, "kwargs"),
        ({"max_runtime": 0}, "max_runtime"),
        ({"cron": "* * * * *", "every": 60}, "every"),
    ],
)
def test_update_checks_values_as_schedule_does(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        updated(pending(), changes, None, NOW, **LIMITS)
    assert caught.value.field == field


def test_update_binds_the_arguments_against_the_registered_function_only() -> None:
    with pytest.raises(InvalidInput) as caught:
        updated(pending(kwargs={"to": "a"}), {"kwargs": {"too": "a"}}, definition(), NOW, **LIMITS)
    assert caught.value.field == "kwargs" and caught.value.value == "too"
    # Not registered here (a dashboard of another process): no signature to check against.
    edit = updated(pending(kwargs={"to": "a"}), {"kwargs": {"too": "a"}}, None, NOW, **LIMITS)
    assert edit.after.kwargs == {"too": "a"}


def test_a_one_time_task_has_no_schedule_to_edit() -> None:
    task = pending(kind=Kind.ONE_TIME, interval=None)
    for field, value in [("cron", "* * * * *"), ("every", 5), ("until", NOW), ("max_runs", 2)]:
        with pytest.raises(InvalidInput) as caught:
            updated(task, {field: value}, None, NOW, **LIMITS)
        assert caught.value.field == field
    assert updated(task, {"kwargs": {"to": "b"}}, None, NOW, **LIMITS).after.scheduled_at == task.scheduled_at


def test_options_not_changed_keep_the_stored_values_not_the_registrations() -> None:
    task = pending(timeout=None, max_retries=5, priority=3)
    edit = updated(task, {"kwargs": {"to": "x"}}, definition(timeout=60.0, max_retries=0), NOW, **LIMITS)
    assert (edit.after.timeout, edit.after.max_retries, edit.after.priority) == (None, 5, 3)
    assert edit.after.scheduled_at == task.scheduled_at and edit.after.next_run_at == task.next_run_at


def test_none_turns_off_an_optional_limit_and_keeps_the_others() -> None:
    task = pending(timeout=30.0, max_runtime=90.0, max_runs=4)
    after = updated(task, {"timeout": None, "max_runs": None}, None, NOW, **LIMITS).after
    assert (after.timeout, after.max_runtime, after.max_runs) == (None, 90.0, None)


def test_a_changed_schedule_places_the_next_slot_from_now() -> None:
    task = pending(interval=60.0, scheduled_at=T0, next_run_at=T0, attempt=2)
    after = updated(task, {"cron": "0 * * * *"}, None, NOW, **LIMITS).after
    assert (after.cron, after.interval) == ("0 * * * *", None)
    assert after.scheduled_at == T0 + timedelta(hours=1)  # the first fire time after NOW
    assert after.attempt == 0  # a pending retry of the old slot is dropped with it
    back = updated(after, {"every": 600}, None, NOW, **LIMITS).after
    assert (back.cron, back.interval, back.scheduled_at) == (None, 600.0, NOW + timedelta(seconds=600))


def test_a_running_task_keeps_its_slot_and_takes_the_new_one_when_its_run_ends() -> None:
    task = make_task(status=Status.RUNNING, scheduled_at=T0, next_run_at=T0)
    after = updated(task, {"every": 300}, None, NOW, **LIMITS).after
    assert (after.scheduled_at, after.next_run_at, after.status) == (T0, T0, Status.RUNNING)
    assert after.replan_at == NOW + timedelta(seconds=300) and after.replan_run_at == after.replan_at
    assert after.version == task.version  # the fence is not the edit's to change


def test_a_waiting_manual_run_survives_a_schedule_edit() -> None:
    task = pending(triggered=True, scheduled_at=T0 + timedelta(hours=2), next_run_at=NOW)
    after = updated(task, {"every": 120}, None, NOW, **LIMITS).after
    assert after.triggered and after.next_run_at == NOW
    assert after.scheduled_at == NOW + timedelta(seconds=120)


def test_ends_that_would_end_the_schedule_now_are_refused_by_name() -> None:
    task = pending(scheduled_at=NOW + timedelta(minutes=1), run_count=3)
    with pytest.raises(InvalidInput) as caught:
        updated(task, {"until": NOW - timedelta(seconds=1)}, None, NOW, **LIMITS)
    assert caught.value.field == "until" and "in the past" in caught.value.reason
    with pytest.raises(InvalidInput) as caught:
        updated(task, {"max_runs": 3}, None, NOW, **LIMITS)
    assert caught.value.field == "max_runs" and "run 3 times" in caught.value.reason
    assert updated(task, {"max_runs": 4}, None, NOW, **LIMITS).after.status is Status.PENDING


def test_an_until_before_the_next_slot_completes_a_waiting_task() -> None:
    task = pending(scheduled_at=NOW + timedelta(minutes=1))
    ended = updated(task, {"until": NOW + timedelta(seconds=30)}, None, NOW, **LIMITS).after
    assert ended.status is Status.COMPLETED


# -- retry ------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [Status.PENDING, Status.RUNNING, Status.PAUSED, Status.COMPLETED])
def test_only_failed_or_cancelled_tasks_are_retried(status: Status) -> None:
    with pytest.raises(InvalidState, match="cannot retry"):
        retried(make_task(status=status), NOW)


def test_retry_makes_a_one_time_task_due_now_and_a_recurring_one_run_extra() -> None:
    one = retried(pending(kind=Kind.ONE_TIME, status=Status.FAILED, attempt=3, cancel_requested=True), NOW)
    assert (one.after.status, one.after.attempt, one.after.scheduled_at, one.after.next_run_at) == (
        Status.PENDING, 0, NOW, NOW,
    )  # fmt: skip
    assert one.reset_cancel and not one.after.triggered
    rec = retried(pending(status=Status.CANCELLED, interval=60.0, scheduled_at=T0), NOW).after
    assert rec.triggered and rec.next_run_at == NOW and rec.scheduled_at == NOW + timedelta(seconds=60)


# -- sync plans -------------------------------------------------------------------------


def declared_set(**periodics: dict[str, Any]) -> tuple[Registry, list[tuple[str, NewTask]]]:
    registry = Registry()
    registry.add("job", job, TaskOptions())
    found = Declarations()
    for key, spec in periodics.items():
        options = {k: v for k, v in spec.items() if k not in ("cron", "every", "kwargs")}
        given = periodic_args(spec.get("cron"), spec.get("every"), "UTC", [], spec.get("kwargs"), options)
        found.add(registry, job, key, given)
    return registry, resolved(found, registry, NOW, **LIMITS)


def view(*stored: Task, seen: Any = NOW, holders: dict[str, Task] | None = None) -> SyncView:
    return SyncView(now=NOW, seen=seen, code={str(t.key): t for t in stored}, holders=holders or {})


def code_task(new: NewTask, task_id: int, **fields: Any) -> Task:
    base = pending(id=task_id)
    defined = {f.name: getattr(new, f.name) for f in dataclasses.fields(NewTask) if hasattr(base, f.name)}
    return dataclasses.replace(base, **{**defined, "origin": "code", "declared_at": T0, **fields})


def test_a_sync_plans_create_unchanged_update_and_remove() -> None:
    _, declared = declared_set(a={"every": 60, "kwargs": {"to": "x"}}, b={"cron": "0 * * * *", "kwargs": {"to": "y"}})
    (_, a), (_, b) = declared
    stored_b = code_task(b, 2, kwargs={"to": "old"})
    gone = code_task(a, 3, key="c")
    changes, writes = plan(declared, ["job"], view(code_task(a, 1), stored_b, gone))
    assert [(c.action, c.key) for c in changes] == [("unchanged", "a"), ("update", "b"), ("remove", "c")]
    assert changes[1].fields == {"kwargs": ({"to": "old"}, {"to": "y"})}
    assert [e.after.kwargs for e in writes.edit] == [{"to": "y"}] and writes.edit[0].after.declared_at == NOW
    assert [r.task.id for r in writes.remove] == [3] and writes.remove[0].note == REMOVED
    changes, writes = plan(declared, ["job"], view())
    assert [c.action for c in changes] == ["create", "create"] and len(writes.create) == 2
    assert all(new.origin == "code" and new.declared_at == NOW for new in writes.create)


def test_a_sync_leaves_runtime_tasks_and_other_apps_task_names_alone() -> None:
    _, declared = declared_set(a={"every": 60, "kwargs": {"to": "x"}})
    runtime = pending(id=9, key="a", origin=None)
    other_app = code_task(declared[0][1], 4, key="z", name="other.task")
    changes, writes = plan(declared, ["job"], view(other_app, holders={"a": runtime}))
    assert [(c.action, c.task_id) for c in changes] == [("conflict", 9)]
    assert not writes.create and not writes.edit and not writes.remove


def test_an_older_declaration_set_cannot_change_or_remove_what_a_newer_one_wrote() -> None:
    _, declared = declared_set(a={"every": 60, "kwargs": {"to": "old"}})
    newer = T0 + timedelta(minutes=5)
    stored = code_task(declared[0][1], 1, kwargs={"to": "new"}, declared_at=newer)
    extra = code_task(declared[0][1], 2, key="b", declared_at=newer)
    changes, writes = plan(declared, ["job"], view(stored, extra, seen=T0))
    assert [c.action for c in changes] == ["kept", "kept"]
    assert not writes.edit and not writes.remove
    changes, _ = plan(declared, ["job"], view(stored, extra, seen=newer + timedelta(seconds=1)))
    assert [c.action for c in changes] == ["update", "remove"]


def test_ended_code_schedules_stay_ended_unless_declared_again_or_anew() -> None:
    _, declared = declared_set(a={"every": 60, "kwargs": {"to": "x"}, "max_runs": 3})
    new = declared[0][1]
    done = code_task(new, 1, status=Status.COMPLETED)
    assert [c.action for c in plan(declared, ["job"], view(done))[0]] == ["unchanged"]
    removed = code_task(new, 1, status=Status.CANCELLED, removed_at=T0)
    assert [c.action for c in plan(declared, ["job"], view(removed))[0]] == ["create"]
    by_hand = code_task(new, 1, status=Status.CANCELLED, last_decision=REMOVED)  # the text alone proves nothing
    assert [c.action for c in plan(declared, ["job"], view(by_hand))[0]] == ["unchanged"]
    changed = code_task(new, 1, status=Status.CANCELLED, kwargs={"to": "before"})
    assert [c.action for c in plan(declared, ["job"], view(changed))[0]] == ["create"]


def test_declarations_are_refused_at_declaration_time_by_name() -> None:
    registry = Registry()
    registry.add("job", job, TaskOptions())
    found = Declarations()
    with pytest.raises(InvalidInput, match="needs cron or every"):
        found.add(registry, job, None, periodic_args(None, None, "UTC", [], None, {}))
    with pytest.raises(InvalidInput) as caught:
        periodic_args("* * * * *", None, "UTC", [], None, {"delay": 5})
    assert caught.value.field == "delay"
    found.add(registry, job, None, periodic_args("* * * * *", None, "UTC", [], {"to": "x"}, {}))
    with pytest.raises(InvalidInput, match="already declared"):
        found.add(registry, job, "job", periodic_args("0 * * * *", None, "UTC", [], {"to": "x"}, {}))
    with pytest.raises(InvalidInput, match=r"above @app\.task"):
        found.add(registry, lambda ctx: None, None, periodic_args("* * * * *", None, "UTC", [], None, {}))


def test_the_digest_names_a_declaration_set_exactly() -> None:
    _, one = declared_set(a={"every": 60, "kwargs": {"to": "x"}})
    _, same = declared_set(a={"every": 60, "kwargs": {"to": "x"}})
    _, other = declared_set(a={"every": 61, "kwargs": {"to": "x"}})
    assert digest(one, ["job"]) == digest(same, ["job"])
    assert digest(one, ["job"]) != digest(other, ["job"])
    assert digest(one, ["job"]) != digest(one, ["job", "more"])


def test_a_replaced_run_at_the_schedules_end_completes_the_task() -> None:
    last = make_task(status=Status.RUNNING, scheduled_at=T0, max_runs=2, run_count=1)
    assert settle(last, ExecutionStatus.CANCELLED, NOW, replaced=True).status is Status.COMPLETED
    ending = make_task(status=Status.RUNNING, scheduled_at=T0, until=T0 + timedelta(seconds=30))
    assert settle(ending, ExecutionStatus.CANCELLED, NOW, replaced=True).status is Status.COMPLETED
    going_on = make_task(status=Status.RUNNING, scheduled_at=T0, until=T0 + timedelta(seconds=60))
    assert settle(going_on, ExecutionStatus.CANCELLED, NOW, replaced=True).status is Status.PENDING


def test_a_declaration_whose_until_has_passed_creates_nothing() -> None:
    _, declared = declared_set(a={"every": 60, "kwargs": {"to": "x"}, "until": NOW - timedelta(days=1)})
    changes, writes = plan(declared, ["job"], view())
    assert [(c.action, c.note) for c in changes] == [("unchanged", "its until has passed: nothing to create")]
    assert not writes.create
