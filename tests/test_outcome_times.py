"""An outcome's times land in the store to the microsecond, in every year a datetime
holds: PostgreSQL's batch carries them as whole microseconds since 1970, exact from 1684
to 2255, and an outcome with a time outside those years goes in a second statement with
its times as text (store/hot.py); both kinds in one batch are reported and written."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from tickwork import App
from tickwork.model import ExecutionStatus, Status
from tickwork.schedules import outcome_of

NODE = "node-times"


def test_times_near_and_far_are_written_exactly_in_one_batch(store_url: str) -> None:
    app = App(store_url)
    try:
        app.task(name="times.noop")(lambda ctx: None)
        due = app.store.now() - timedelta(seconds=1)
        ids = [app.schedule("times.noop", at=due + timedelta(microseconds=i)).id for i in range(4)]
        claims = sorted(app.store.claim(NODE, ["times.noop"], 4, 30.0), key=lambda c: c.task.id)
        assert [c.task.id for c in claims] == ids
        far_future = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
        edges = [
            datetime(2026, 12, 5, 1, 2, 3, 456_789, tzinfo=UTC),  # inside the exact years
            datetime(2255, 6, 5, 23, 47, 34, 740_991, tzinfo=UTC),  # the last microsecond inside
            datetime(2255, 6, 5, 23, 47, 34, 740_992, tzinfo=UTC),  # the first one past it
            far_future,
        ]
        now = app.store.now()
        outcomes = [
            dataclasses.replace(
                outcome_of(claim, ExecutionStatus.FAILED, now, started_at=now - timedelta(microseconds=7)),
                task_status=Status.PENDING,
                next_run_at=when,
                scheduled_at=when - timedelta(microseconds=1),
            )
            for claim, when in zip(claims, edges, strict=True)
        ]
        assert app.store.finish(NODE, outcomes) == [True] * 4
        for claim, when in zip(claims, edges, strict=True):
            task = app.get(claim.task.id)
            assert (task.status, task.next_run_at, task.scheduled_at) == (
                Status.PENDING, when, when - timedelta(microseconds=1),
            )  # fmt: skip
            [run] = app.store.list_executions(task_id=claim.task.id)
            assert (run.status, run.started_at, run.finished_at) == (
                ExecutionStatus.FAILED, now - timedelta(microseconds=7), now,
            )  # fmt: skip
        # written once: the same outcomes again are stale
        assert app.store.finish(NODE, outcomes) == [False] * 4
    finally:
        app.close()
