"""A task row decodes to the very Task its values make, field by field: the decoder
builds tasks positionally through a faster path (store/rows.py), so a field added to
Task out of step with the decoder must fail here, not shift every value after it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickwork.model import ExecutionStatus, Kind, Misfire, OnLost, Overlap, Status, Task
from tickwork.store.rows import Decoder

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


class PlainDialect:
    """Values as PostgreSQL's driver hands them over: nothing left to convert."""

    def decode_time(self, value: Any) -> datetime | None:
        return value  # type: ignore[no-any-return]

    def decode_json(self, value: Any) -> Any:
        return value


# Every column a distinct value, and the Task field each one lands in.
ROW: dict[str, Any] = {
    "id": 11, "name": "n.task", "args": [1], "kwargs": {"k": 2}, "key": "the-key", "kind": "RECURRING",
    "cron": "*/5 * * * *", "timezone": "Europe/Berlin", "interval_seconds": 7.5, "scheduled_at": at(1),
    "next_run_at": at(2), "status": "RUNNING", "misfire": "CATCHUP", "misfire_grace": 3.5, "jitter": 4.5,
    "timeout": 5.5, "max_retries": 12, "retry_backoff": 6.5, "priority": 13, "version": 14,
    "lease_owner": "node-a", "lease_expires_at": at(3), "cancel_requested": True, "triggered": True,
    "attempt": 15, "run_count": 16, "last_status": "FAILED", "created_at": at(4), "updated_at": at(5),
    "max_catchup": 17, "overlap": "replace", "last_decision": "decided", "parent_id": 18, "on_lost": "fail",
    "cancel_run_only": True, "max_runtime": 8.5, "until_at": at(6), "max_runs": 19, "origin": "code",
    "declared_at": at(7), "removed_at": at(8), "revision": 20, "replan_at": at(9), "replan_run_at": at(10),
    "queue": "q1", "lock": "l1", "max_running": 21, "rate_limit": "5/s", "max_lost": 22, "lost_runs": 23,
}  # fmt: skip
FIELD_OF = {"interval_seconds": "interval", "until_at": "until"}
MEMBERS = {
    "kind": Kind, "status": Status, "misfire": Misfire, "last_status": ExecutionStatus, "overlap": Overlap,
    "on_lost": OnLost,
}  # fmt: skip


def test_every_column_lands_in_its_own_field() -> None:
    task = Decoder(PlainDialect()).task(ROW)  # type: ignore[arg-type]
    assert type(task) is Task
    for column, value in ROW.items():
        field = FIELD_OF.get(column, column)
        expected = MEMBERS[column](value) if column in MEMBERS else value
        assert getattr(task, field) == expected, field
    assert task.existed is False
    assert {f.name for f in dataclasses.fields(Task)} == {FIELD_OF.get(c, c) for c in ROW} | {"existed"}


def test_a_decoded_task_is_a_task_like_any_other() -> None:
    task = Decoder(PlainDialect()).task(ROW)  # type: ignore[arg-type]
    built = Task(**{f.name: getattr(task, f.name) for f in dataclasses.fields(Task)})
    assert task == built
    assert dataclasses.replace(task, version=99).version == 99
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.version = 1  # type: ignore[misc]


def test_an_outcome_and_a_new_task_built_cheaply_are_like_any_other() -> None:
    """tickwork/frozen.py's constructor for the other classes built once per row or run:
    the same object as the class's own ``__init__`` makes, frozen, defaults filled."""
    from datetime import UTC, datetime

    from tickwork import frozen
    from tickwork.model import ExecutionStatus, Kind, NewTask, Outcome, Status

    at = datetime(2030, 1, 1, tzinfo=UTC)
    values = dict(
        task_id=1, fence=2, execution_id=3, status=ExecutionStatus.COMPLETED, task_status=Status.COMPLETED,
        scheduled_at=at, next_run_at=at, attempt=0, triggered=False, finished_at=at, result={"x": 1},
    )  # fmt: skip
    outcome = frozen.constructor(Outcome)(**values)
    assert type(outcome) is Outcome and outcome == Outcome(**values)  # type: ignore[arg-type]
    assert outcome.counts is True and outcome.lost_runs == 0 and outcome.error is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.fence = 9  # type: ignore[misc]
    new = frozen.constructor(NewTask)("job", [], {}, Kind.ONE_TIME, at, at, key="k")
    assert type(new) is NewTask and new == NewTask("job", [], {}, Kind.ONE_TIME, at, at, key="k")
    assert dataclasses.replace(new, key="other").key == "other"
