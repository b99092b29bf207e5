"""Rules the store's SQL repeats from tickwork.schedules, each held to one table.

A rule that a set-based statement must apply inside the database (no round trip, no
row read back into Python) is written twice: once in Python, once in SQL. Each table
below is the truth; the Python function is checked against it directly, and every SQL
copy through the store, on every store kind and claim strategy (and the in-memory fake
store's copies too):

* ``run_slot`` (a triggered run is for the moment it was made due, any other for its
  task's nominal slot): in SQL by SQLite's ``log_claimed_runs`` and PostgreSQL's
  ``claim_skip_locked`` and ``claim_cas_batch``.
* ``cancel_wins`` (a cancel requested while a run went on decides the task's end
  state over the run's outcome): in SQL in ``settled_task`` (the SET list of both
  stores' ``write_outcomes_batch``) and ``release_task`` (queries.sql).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import FAKE, STORE_KINDS, url_of
from tests.fake_store import FakeStore
from tickwork.model import ExecutionStatus, Kind, Status, Task
from tickwork.schedules import cancel_wins, outcome_of, run_slot
from tickwork.store import Claim, NewTask, Store, open_store

NODE = "rules-node"
LEASE = 30.0

# -- the tables -------------------------------------------------------------------------

RUN_SLOT = [
    # triggered, the task field the run's scheduled_for is
    (False, "scheduled_at"),
    (True, "next_run_at"),
]

P, C, F, X = Status.PENDING, Status.COMPLETED, Status.FAILED, Status.CANCELLED
CANCEL_WINS = [
    # cancel_requested, cancel_run_only, decided -> status written, cancel_requested after
    (False, False, P, P, False),
    (False, False, C, C, False),
    (False, False, F, F, False),
    (False, False, X, X, False),
    (True, False, P, X, True),
    (True, False, C, C, False),  # a completed one-time run: the cancel came too late
    (True, False, F, X, True),
    (True, False, X, X, True),
    (True, True, P, P, False),  # a cancel of the run only is spent by the run
    (True, True, C, C, False),
    (True, True, F, F, False),
    (True, True, X, X, False),
]


# -- the Python copies ----------------------------------------------------------------------


@pytest.mark.parametrize(("triggered", "field"), RUN_SLOT)
def test_run_slot_follows_the_table(triggered: bool, field: str) -> None:
    times = {"scheduled_at": datetime(2030, 1, 1, tzinfo=UTC), "next_run_at": datetime(2029, 6, 1, tzinfo=UTC)}
    assert run_slot(triggered, times["scheduled_at"], times["next_run_at"]) == times[field]


@pytest.mark.parametrize(("requested", "run_only", "decided", "status", "after"), CANCEL_WINS)
def test_cancel_wins_follows_the_table(
    requested: bool, run_only: bool, decided: Status, status: Status, after: bool
) -> None:
    assert cancel_wins(decided, requested, run_only) == (status, after)


# -- the SQL copies, through each store and claim strategy ------------------------------------


@pytest.fixture(params=[*STORE_KINDS, FAKE])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[tuple[str, Store]]]:
    """A store per claim strategy of each kind (and the in-memory fake, which has copies
    of its own), each with task names of its own: those of one kind share a database."""
    if request.param == FAKE:
        opened: list[tuple[str, Store]] = [("rules.fake", FakeStore())]
    else:
        url = url_of(request.param, request, tmp_path)
        probe = open_store(url)
        probe.migrate()
        strategies = probe.dialect.strategies  # type: ignore[attr-defined]
        probe.close()
        opened = [(f"rules.{strategy}", open_store(url, claim=strategy)) for strategy in strategies]
    yield opened
    for _, store in opened:
        store.close()


def recurring(store: Store, name: str, *, offset: float, shift: float = 0.0) -> NewTask:
    """A task of an hourly schedule whose slot is ``offset`` s from now, dispatched
    ``shift`` s after it (as jitter would)."""
    slot = store.now() + timedelta(seconds=offset)
    return NewTask(
        name=name,
        args=[],
        kwargs={},
        kind=Kind.RECURRING,
        scheduled_at=slot,
        next_run_at=slot + timedelta(seconds=shift),
        interval=3600.0,
    )


def claim_all(store: Store, name: str, tasks: list[Task]) -> dict[int, Claim]:
    claims = {c.task.id: c for c in store.claim(NODE, [name], len(tasks) + 1, LEASE)}
    assert sorted(claims) == sorted(t.id for t in tasks)
    return claims


def test_each_claim_logs_its_run_for_the_rule_s_slot(stores: list[tuple[str, Store]]) -> None:
    for name, store in stores:
        late = recurring(store, name, offset=-50.0, shift=20.0)
        one_time = dataclasses.replace(late, kind=Kind.ONE_TIME, interval=None)
        untriggered = store.insert_tasks([recurring(store, name, offset=-60.0, shift=30.0), one_time])
        ahead = store.insert_tasks([recurring(store, name, offset=3600.0)])[0]
        triggered = store.trigger(ahead.id)
        assert triggered is not None and triggered.triggered and triggered.next_run_at < triggered.scheduled_at
        before = [*untriggered, triggered]
        claims = claim_all(store, name, before)
        for task in before:
            field = dict(RUN_SLOT)[task.triggered]
            claim = claims[task.id]
            assert (
                claim.scheduled_for
                == getattr(task, field)
                == run_slot(task.triggered, task.scheduled_at, task.next_run_at)
            ), (name, field)
            [execution] = store.list_executions(task_id=task.id)
            assert execution.scheduled_for == claim.scheduled_for


def flag(store: Store, task: Task, requested: bool, run_only: bool) -> None:
    """Request a cancel of a running task as a client would: of the task, or of its run."""
    if requested:
        after = store.cancel(task.id, run_only=run_only)
        assert after is not None and (after.cancel_requested, after.cancel_run_only) == (True, run_only)


@pytest.mark.parametrize("write", ["finish", "reap"])
def test_the_write_of_a_decision_lets_cancel_win_by_the_table(stores: list[tuple[str, Store]], write: str) -> None:
    """Every row of the table in one batch (the set-based statement sees them all at
    once), after the cancels were requested: the decisions were made from snapshots
    taken before them, as a node's are."""
    for name, store in stores:
        tasks = store.insert_tasks([recurring(store, name, offset=-10.0) for _ in CANCEL_WINS])
        claims = claim_all(store, name, tasks)
        outcomes = []
        for task, (requested, run_only, decided, _, _) in zip(tasks, CANCEL_WINS, strict=True):
            flag(store, task, requested, run_only)
            ended = outcome_of(claims[task.id], ExecutionStatus.COMPLETED, store.now())
            outcomes.append(dataclasses.replace(ended, task_status=decided))
        applied = store.finish(NODE, outcomes) if write == "finish" else store.reap(NODE, outcomes, expired_only=False)
        assert applied == [True] * len(outcomes)
        for task, (requested, run_only, decided, status, after) in zip(tasks, CANCEL_WINS, strict=True):
            written = store.get_task(task.id)
            assert written is not None
            row = (requested, run_only, decided)
            assert (written.status, written.cancel_requested, written.cancel_run_only) == (status, after, False), row


def test_a_claim_given_back_lets_cancel_win_by_the_table(stores: list[tuple[str, Store]]) -> None:
    """Giving back a claim that never started is the decision PENDING."""
    rows = [r for r in CANCEL_WINS if r[2] is Status.PENDING]
    for name, store in stores:
        tasks = store.insert_tasks([recurring(store, name, offset=-10.0) for _ in rows])
        claims = claim_all(store, name, tasks)
        for task, (requested, run_only, _, _, _) in zip(tasks, rows, strict=True):
            flag(store, task, requested, run_only)
        assert store.release(NODE, list(claims.values())) == len(rows)
        for task, (requested, run_only, _, status, after) in zip(tasks, rows, strict=True):
            given_back = store.get_task(task.id)
            assert given_back is not None
            state = (given_back.status, given_back.cancel_requested, given_back.cancel_run_only)
            assert state == (status, after, False), (requested, run_only)
