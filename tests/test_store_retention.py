"""Store.prune's contract (tickwork/store/base.py), on every store and the in-memory fake.

Ages are judged against ``older_than``: a cutoff an hour after the store's now makes
every ended row old, one an hour before it makes every row young. Where both must
meet in one store, the SQLite file and the fake run on a driven clock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests import test_store_contract as contract
from tests.fake_store import FakeStore
from tests.test_store_contract import NAME, claim_one, executions_of, insert_one, one_time, real_stores_only, recurring
from tickwork.errors import InvalidInput
from tickwork.model import ExecutionStatus, PruneCounts, Status, Task
from tickwork.schedules import outcome_of
from tickwork.store import Store, open_store, retention
from tickwork.store.dialect import Dialect, Row, Session
from tickwork.store.postgres import translate
from tickwork.store.sql import SQLStore

HOUR = timedelta(hours=1)

# The contract's store fixtures: every store kind and the in-memory fake.
store_kind = contract.store_kind
store_url = contract.store_url
store = contract.store


def later(store: Store) -> datetime:
    """A cutoff that makes everything ended so far old."""
    return store.now() + HOUR


def run(store: Store, task: Task, status: ExecutionStatus = ExecutionStatus.COMPLETED) -> None:
    """One run of ``task`` (alone due under its name), ended with ``status``."""
    c = claim_one(store, names=[task.name])
    assert c.task.id == task.id
    assert store.finish("node-a", [outcome_of(c, status, store.now())]) == [True]


def runs_of_recurring(store: Store, task: Task, n: int) -> None:
    for _ in range(n):
        store.trigger(task.id)
        run(store, task)


def ended_one_time(store: Store, name: str, status: ExecutionStatus = ExecutionStatus.COMPLETED) -> Task:
    task = insert_one(store, one_time(store, name=name))
    run(store, task, status)
    return task


def prune_all(store: Store, older_than: datetime, keep_last: int = 20, limit: int = 1000) -> PruneCounts:
    total = PruneCounts()
    while (counts := store.prune(older_than, keep_last, limit)).rows:
        total += counts
    return total


def test_ended_one_time_tasks_go_with_their_executions(store: Store) -> None:
    done = ended_one_time(store, "t.done")
    failed = ended_one_time(store, "t.failed", ExecutionStatus.FAILED)
    cancelled = insert_one(store, one_time(store, name="t.cancelled"))
    store.cancel(cancelled.id)
    assert prune_all(store, later(store)) == PruneCounts(executions=2, tasks=3)
    for task in (done, failed, cancelled):
        assert store.get_task(task.id) is None
        assert executions_of(store, task.id) == []


def test_live_tasks_are_kept(store: Store) -> None:
    pending = insert_one(store, one_time(store, name="t.pending", offset=3600))
    paused = insert_one(store, one_time(store, name="t.paused", offset=3600))
    store.pause(paused.id)
    running = insert_one(store, one_time(store, name="t.running"))
    claim_one(store, names=["t.running"])
    retrying = insert_one(store, one_time(store, name="t.retrying", max_retries=3))
    run(store, retrying, ExecutionStatus.FAILED)  # PENDING again, its failed attempt old
    assert store.get_task(retrying.id).status is Status.PENDING  # type: ignore[union-attr]
    counts = prune_all(store, later(store))
    assert counts == PruneCounts(executions=1, tasks=0)  # only the old attempt's row
    for task in (pending, paused, running, retrying):
        assert store.get_task(task.id) is not None
    [live_run] = executions_of(store, running.id)
    assert live_run.status is ExecutionStatus.RUNNING


def test_a_recurring_task_keeps_its_newest_keep_last(store: Store) -> None:
    task = insert_one(store, recurring(store, offset=3600))
    runs_of_recurring(store, task, 5)
    before = [e.id for e in executions_of(store, task.id)]  # newest first
    assert prune_all(store, later(store), keep_last=2) == PruneCounts(executions=3, tasks=0)
    assert [e.id for e in executions_of(store, task.id)] == before[:2]
    assert store.get_task(task.id) is not None
    assert prune_all(store, later(store), keep_last=0) == PruneCounts(executions=2, tasks=0)
    assert store.get_task(task.id) is not None  # a recurring task itself is never pruned


def test_no_execution_of_a_running_task_is_deleted(store: Store) -> None:
    task = insert_one(store, recurring(store, offset=3600))
    runs_of_recurring(store, task, 3)
    store.trigger(task.id)
    claim_one(store)
    assert store.prune(later(store), 0, 100) == PruneCounts()
    assert len(executions_of(store, task.id)) == 4


def test_young_history_is_kept(store: Store) -> None:
    done = ended_one_time(store, "t.done")
    task = insert_one(store, recurring(store, offset=3600))
    runs_of_recurring(store, task, 3)
    assert store.prune(store.now() - HOUR, 0, 100) == PruneCounts()
    assert store.get_task(done.id) is not None
    assert len(executions_of(store, task.id)) == 3


class Wall:
    def __init__(self) -> None:
        self.at = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at


@pytest.fixture(params=["sqlite", "fake"])
def driven(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Wall]]:
    wall = Wall()
    s: Store = (
        FakeStore(wall.now) if request.param == "fake" else open_store(f"sqlite:///{tmp_path}/t.db", clock=wall.now)
    )
    s.migrate()
    yield s, wall
    s.close()


def test_the_cutoff_divides_old_from_young(driven: tuple[Store, Wall]) -> None:
    store, wall = driven
    old = ended_one_time(store, "t.old")
    task = insert_one(store, recurring(store, offset=3600))
    runs_of_recurring(store, task, 3)
    wall.at += timedelta(days=2)
    young = ended_one_time(store, "t.young")
    runs_of_recurring(store, task, 2)
    assert prune_all(store, wall.at - timedelta(days=1), keep_last=1) == PruneCounts(executions=4, tasks=1)
    assert store.get_task(old.id) is None
    assert store.get_task(young.id) is not None
    assert len(executions_of(store, task.id)) == 2


def test_batches_are_bounded_by_limit(store: Store) -> None:
    for i in range(5):
        ended_one_time(store, f"t.{i}")
    task = insert_one(store, recurring(store, offset=3600))
    runs_of_recurring(store, task, 5)
    cutoff = later(store)
    # Tasks first (with their executions), then the oldest remaining executions.
    batches = [store.prune(cutoff, 0, 2) for _ in range(5)]
    assert batches == [
        PruneCounts(executions=4, tasks=2),
        PruneCounts(executions=2, tasks=2),
        PruneCounts(executions=2, tasks=1),
        PruneCounts(executions=2, tasks=0),
        PruneCounts(),
    ]


def test_dry_run_counts_and_changes_nothing(store: Store) -> None:
    for i in range(3):
        ended_one_time(store, f"t.{i}")
    task = insert_one(store, recurring(store, offset=3600))
    runs_of_recurring(store, task, 4)
    cutoff = later(store)
    before = (len(store.list_tasks(limit=100)), len(store.list_executions(limit=100)))
    assert store.prune(cutoff, 1, 1000, dry_run=True) == PruneCounts(executions=6, tasks=3)
    assert store.prune(cutoff, 1, 2, dry_run=True) == PruneCounts(executions=4, tasks=2)
    assert (len(store.list_tasks(limit=100)), len(store.list_executions(limit=100))) == before
    assert store.prune(cutoff, 1, 1000) == PruneCounts(executions=6, tasks=3)


@pytest.mark.parametrize(("field", "keep_last", "limit"), [("keep_last", -1, 10), ("limit", 0, 0), ("limit", 1, -5)])
def test_bad_arguments_name_the_field(store: Store, field: str, keep_last: int, limit: int) -> None:
    with pytest.raises(InvalidInput) as e:
        store.prune(later(store), keep_last, limit)
    assert e.value.field == field


@real_stores_only("needs two store objects on one database")
def test_two_pruners_at_once_neither_deadlock_nor_double_count(store: Store, store_url: str) -> None:
    for i in range(40):
        ended_one_time(store, f"t.{i}")
    cutoff = later(store)
    others = [open_store(store_url) for _ in range(2)]
    totals: list[PruneCounts] = []
    errors: list[BaseException] = []

    def prune(s: Store) -> None:
        try:
            total = PruneCounts()
            for _ in range(200):
                counts = s.prune(cutoff, 0, 3)
                total += counts
                if not counts.rows and not counts.busy:
                    break
            totals.append(total)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=prune, args=(s,)) for s in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for s in others:
        s.close()
    assert not errors and not any(t.is_alive() for t in threads)
    assert sum(t.tasks for t in totals) == 40 and sum(t.executions for t in totals) == 40
    assert store.list_tasks(limit=100) == []


def test_only_ended_names_matter_not_other_tasks(store: Store) -> None:
    """A task under another name with a live run does not protect old rows of others."""
    done = ended_one_time(store, "t.done")
    insert_one(store, one_time(store, name=NAME))
    claim_one(store)
    assert prune_all(store, later(store)).tasks == 1
    assert store.get_task(done.id) is None


# -- a task changed between the pick and the delete ---------------------------------------

# A retry of the task that already ran again: the task written after the cutoff, and a
# new attempt (RUNNING, or ended after the cutoff).
RETRIED = {
    "test_retry_task": "UPDATE tickwork_tasks SET status = :status, updated_at = :at WHERE id = :id",
    "test_retry_run": "INSERT INTO tickwork_executions"
    " (task_id, attempt, scheduled_for, started_at, finished_at, status)"
    " VALUES (:id, 2, :at, :at, :finished_at, :run_status)",
}


class RetriedAfterPick:
    """A session of ``retention.prune``'s transaction that, right after the pick, retries
    a picked task in that same transaction (no other writer can get in between: SQLite's
    file lock and PostgreSQL's row locks see to that), as if the retry came first."""

    def __init__(self, session: Session, retry: Mapping[str, Any]) -> None:
        self.session, self.retry = session, retry

    def fetch_all(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        rows = self.session.fetch_all(query, params)
        if query == "prune_pick_tasks":
            assert self.retry["id"] in [int(r["id"]) for r in rows]
            assert self.session.execute("test_retry_task", self.retry) == 1
            assert self.session.execute("test_retry_run", self.retry) == 1
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


class Meddling:
    """The store's dialect, its write transactions' sessions wrapped in RetriedAfterPick."""

    def __init__(self, d: Dialect, retry: Mapping[str, Any]) -> None:
        self.d, self.retry = d, retry
        texts = RETRIED if "sqlite" in type(d).__name__.lower() else {k: translate(v) for k, v in RETRIED.items()}
        d.texts = {**d.texts, **texts}  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def transaction(self) -> Iterator[RetriedAfterPick]:
        with self.d.transaction() as s:
            yield RetriedAfterPick(s, self.retry)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.d, name)


@real_stores_only("runs the SQL stores' statements one by one")
@pytest.mark.parametrize("again", [ExecutionStatus.RUNNING, ExecutionStatus.FAILED])
def test_a_task_retried_after_the_pick_keeps_its_executions(store: Store, again: ExecutionStatus) -> None:
    assert isinstance(store, SQLStore)
    retried = ended_one_time(store, "t.retried", ExecutionStatus.FAILED)
    gone = ended_one_time(store, "t.gone")
    cutoff = later(store)
    d, at = store.dialect, cutoff + HOUR
    retry = {
        "id": retried.id,
        "status": "RUNNING" if again is ExecutionStatus.RUNNING else "FAILED",
        "at": d.encode_time(at),
        "finished_at": None if again is ExecutionStatus.RUNNING else d.encode_time(at),
        "run_status": again.value,
    }
    counts = retention.prune(Meddling(d, retry), cutoff, 20, 100)  # type: ignore[arg-type]
    assert store.get_task(gone.id) is None
    assert store.get_task(retried.id) is not None
    runs = [(e.attempt, e.status) for e in executions_of(store, retried.id)]
    if again is ExecutionStatus.RUNNING:  # a running task's executions are all kept
        assert counts == PruneCounts(executions=1, tasks=1)
        assert runs == [(2, ExecutionStatus.RUNNING), (1, ExecutionStatus.FAILED)]
    else:  # its first attempt is old by itself, its second is young
        assert counts == PruneCounts(executions=2, tasks=1)
        assert runs == [(2, ExecutionStatus.FAILED)]


def test_a_pass_with_nothing_old_walks_an_index_not_the_table(tmp_path: Path) -> None:
    """On SQLite's plan (PostgreSQL's depends on its statistics: bench/retention.py's store)."""
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    store.migrate()
    assert isinstance(store, SQLStore)
    d = store.dialect
    queries = ("prune_executions", "prune_count")
    d.texts = {**d.texts, **{f"plan_{q}": "EXPLAIN QUERY PLAN " + d.texts[q] for q in queries}}  # type: ignore[attr-defined]
    params = {"cutoff": d.encode_time(later(store)), "keep_last": 20, "limit": 500}
    with d.reader() as s:
        for query in queries:
            plan = [str(r["detail"]) for r in s.fetch_all(f"plan_{query}", params)]
            assert any("USING INDEX tickwork_executions_slot" in step for step in plan), plan
            assert not any(step.startswith("SCAN e") for step in plan), plan
    store.close()
