"""The store contract (tickwork/store/base.py): every store must pass this suite.

Only the ``store`` / ``store_url`` fixtures are used, so the same tests run against every
store kind the fixtures are parametrised over: the real stores, and the in-memory fake
(tests/fake_store.py) the node's unit tests use, so that it cannot drift from them. A
test that needs a URL (more store objects, other processes) does not apply to the fake
and says so with ``real_stores_only``. Time is the store's clock
(``store.now()``): due tasks are due 10 s in the past, not-due ones 1 h in the future,
and lease expiry is awaited by polling ``store.expired`` with a deadline.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import queue
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FAKE, STORE_KINDS, url_of, wait_for
from tests.fake_store import FakeStore
from tickwork.model import ErrorInfo, Execution, ExecutionStatus, Kind, Misfire, Node, OnLost, Status, Task
from tickwork.node.reconciler import reconcile
from tickwork.schedules import outcome_of
from tickwork.store import Claim, NewTask, Renewal, Store, open_store

NAME = "contract.job"
OTHER = "contract.other"
LEASE = 30.0
TINY_LEASE = 0.05


# -- the stores under contract --------------------------------------------------------------
# These override conftest's ``store_url`` / ``store`` for this module only: one parameter
# picks the kind, so a test asking for both gets one store and its URL, never a mix.


@pytest.fixture(params=[*STORE_KINDS, FAKE])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(store_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if store_kind == FAKE:
        raise AssertionError("the fake store has no URL: mark the test real_stores_only")
    return url_of(store_kind, request, tmp_path)


@pytest.fixture
def store(store_kind: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    s: Store = FakeStore() if store_kind == FAKE else open_store(request.getfixturevalue("store_url"))
    s.migrate()
    yield s
    s.close()


def real_stores_only(reason: str) -> pytest.MarkDecorator:
    """For a test that cannot apply to the in-memory fake: it still runs on every real
    store, and is reported skipped for the fake with ``reason``."""
    fake = pytest.param(FAKE, marks=pytest.mark.skip(reason=f"in-memory fake store: {reason}"))
    return pytest.mark.parametrize("store_kind", [*STORE_KINDS, fake], indirect=True)


# -- helpers --------------------------------------------------------------------------


def at(store: Store, seconds: float) -> datetime:
    """A time ``seconds`` from the store's now."""
    return store.now() + timedelta(seconds=seconds)


def one_time(store: Store, *, name: str = NAME, offset: float = -10.0, **fields: Any) -> NewTask:
    when = at(store, offset)
    return NewTask(
        name=name,
        args=fields.pop("args", []),
        kwargs=fields.pop("kwargs", {}),
        kind=Kind.ONE_TIME,
        scheduled_at=fields.pop("scheduled_at", when),
        next_run_at=fields.pop("next_run_at", when),
        **fields,
    )


def recurring(
    store: Store, *, name: str = NAME, offset: float = -10.0, interval: float = 60.0, **fields: Any
) -> NewTask:
    when = at(store, offset)
    return NewTask(
        name=name,
        args=fields.pop("args", []),
        kwargs=fields.pop("kwargs", {}),
        kind=Kind.RECURRING,
        scheduled_at=fields.pop("scheduled_at", when),
        next_run_at=fields.pop("next_run_at", when),
        interval=interval,
        **fields,
    )


def insert_one(store: Store, new: NewTask) -> Task:
    [task] = store.insert_tasks([new])
    return task


def claim_one(store: Store, node: str = "node-a", *, lease: float = LEASE, names: Sequence[str] = (NAME,)) -> Claim:
    claims = store.claim(node, list(names), 1, lease)
    assert len(claims) == 1, claims
    return claims[0]


def get(store: Store, task_id: int) -> Task:
    task = store.get_task(task_id)
    assert task is not None
    return task


def executions_of(store: Store, task_id: int) -> list[Execution]:
    return store.list_executions(task_id=task_id, limit=1000)


def execution(store: Store, execution_id: int) -> Execution:
    found = [e for e in store.list_executions(limit=10_000) if e.id == execution_id]
    assert len(found) == 1, found
    return found[0]


def all_tasks(store: Store) -> list[Task]:
    return store.list_tasks(limit=10_000)


def is_utc(value: datetime) -> bool:
    return value.utcoffset() == timedelta(0)


def expired_claim_for(store: Store, task_id: int) -> Claim:
    """Wait, with a deadline, until the store reports the run of ``task_id`` as expired."""
    found = wait_for(lambda: [c for c in store.expired(100) if c.task.id == task_id], timeout=10)
    assert isinstance(found, list)
    return found[0]


# -- migrate ----------------------------------------------------------------------------


def test_migrate_is_idempotent(store: Store) -> None:
    first = store.migrate()
    second = store.migrate()
    assert isinstance(first, int)
    assert first >= 1
    assert first == second
    # the schema still works after the repeated migration
    task = insert_one(store, one_time(store))
    assert get(store, task.id) == task


@real_stores_only("there is no URL to open more store objects on the same data by")
def test_concurrent_migrate_from_many_store_objects(store_url: str) -> None:
    n = 4
    stores = [open_store(store_url) for _ in range(n)]
    barrier = threading.Barrier(n)
    versions: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(s: Store) -> None:
        try:
            barrier.wait(timeout=10)
            version = s.migrate()
            with lock:
                versions.append(version)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert len(versions) == n
        assert len(set(versions)) == 1
        assert stores[0].migrate() == versions[0]
        task = insert_one(stores[1], one_time(stores[1]))
        assert get(stores[2], task.id) == task
    finally:
        for s in stores:
            s.close()


# -- insert_tasks ------------------------------------------------------------------------


def test_insert_tasks_round_trips_every_field(store: Store) -> None:
    ist = timezone(timedelta(hours=5, minutes=30))
    scheduled = datetime(2031, 5, 17, 13, 45, 12, 345678, tzinfo=ist)
    nested_kwargs = {
        "to": "zoë@例え.jp",
        "emoji": "🚀 ✓",
        "nested": {"list": [1, 2.5, None, True, False, {"deep": ["x", {"y": []}]}], "empty": {}},
        "big": 2**53 + 1,
        "neg": -7,
        "quote": 'he said "hi"\\n',
    }
    cron_task = NewTask(
        name=NAME,
        args=[1, "zwei", ["drei", {"vier": 4}], None, 3.25, "ünïcødé"],
        kwargs=nested_kwargs,
        kind=Kind.RECURRING,
        scheduled_at=scheduled,
        next_run_at=scheduled + timedelta(microseconds=1),
        key="round-trip-key",
        cron="30 9 * * 1-5",
        timezone="Europe/Berlin",
        misfire=Misfire.CATCHUP,
        misfire_grace=12.5,
        jitter=7.25,
        timeout=42.5,
        max_retries=3,
        retry_backoff=2.5,
        priority=-4,
    )
    interval_task = NewTask(
        name=OTHER,
        args=[],
        kwargs={},
        kind=Kind.RECURRING,
        scheduled_at=datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        next_run_at=datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        interval=0.25,
        misfire=Misfire.SKIP,
    )
    plain = one_time(store, name=NAME, offset=3600)
    before = store.now()
    inserted = store.insert_tasks([cron_task, interval_task, plain])
    after = store.now()

    assert [t.name for t in inserted] == [NAME, OTHER, NAME]
    assert len({t.id for t in inserted}) == 3
    for task in inserted:
        assert isinstance(task.id, int)
        assert task.status is Status.PENDING
        assert task.version == 0
        assert task.attempt == 0
        assert task.run_count == 0
        assert task.last_status is None
        assert task.lease_owner is None
        assert task.lease_expires_at is None
        assert task.cancel_requested is False
        assert task.triggered is False
        assert before <= task.created_at <= after
        assert before <= task.updated_at <= after
        assert get(store, task.id) == task  # what insert returns is what is stored

    c, i, p = inserted
    assert c.args == cron_task.args
    assert c.kwargs == nested_kwargs
    assert c.key == "round-trip-key"
    assert c.kind is Kind.RECURRING
    assert c.cron == "30 9 * * 1-5"
    assert c.timezone == "Europe/Berlin"
    assert c.interval is None
    assert c.scheduled_at == scheduled
    assert c.next_run_at == scheduled + timedelta(microseconds=1)
    assert c.scheduled_at.microsecond == 345678  # exact, no rounding
    assert is_utc(c.scheduled_at)
    assert is_utc(c.next_run_at)
    assert c.misfire is Misfire.CATCHUP
    assert c.misfire_grace == 12.5
    assert c.jitter == 7.25
    assert c.timeout == 42.5
    assert c.max_retries == 3
    assert c.retry_backoff == 2.5
    assert c.priority == -4

    assert i.args == []
    assert i.kwargs == {}
    assert i.key is None
    assert i.cron is None
    assert i.timezone == "UTC"
    assert i.interval == 0.25
    assert i.scheduled_at == datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert i.next_run_at == datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    assert i.misfire is Misfire.SKIP
    assert i.timeout is None

    assert p.kind is Kind.ONE_TIME
    assert p.scheduled_at == plain.scheduled_at
    assert p.misfire is Misfire.SINGLE_CATCHUP
    assert p.misfire_grace == 60.0
    assert p.jitter == 0.0
    assert p.max_retries == 0
    assert p.retry_backoff == 1.0
    assert p.priority == 0


def test_insert_empty_batch(store: Store) -> None:
    assert store.insert_tasks([]) == []
    assert all_tasks(store) == []


def test_idempotency_key_returns_the_live_task(store: Store) -> None:
    first = insert_one(store, one_time(store, key="daily", args=[1]))
    again = insert_one(store, one_time(store, key="daily", args=[2], offset=3600))
    assert again.id == first.id
    assert again.args == [1]
    assert again == get(store, first.id)
    assert [t.id for t in all_tasks(store)] == [first.id]

    # a key held by a PAUSED task and by a RUNNING task is still held
    store.pause(first.id)
    assert insert_one(store, one_time(store, key="daily")).id == first.id
    store.resume(first.id)
    claim_one(store)
    assert get(store, first.id).status is Status.RUNNING
    assert insert_one(store, one_time(store, key="daily")).id == first.id
    assert len(all_tasks(store)) == 1

    # a different key is a different task
    other = insert_one(store, one_time(store, key="weekly"))
    assert other.id != first.id
    assert len(all_tasks(store)) == 2


def test_idempotency_key_within_one_batch(store: Store) -> None:
    a, b, c = store.insert_tasks(
        [one_time(store, key="k", args=["a"]), one_time(store), one_time(store, key="k", args=["c"])]
    )
    assert c.id == a.id
    assert c.args == ["a"]
    assert b.id != a.id
    assert sorted(t.id for t in all_tasks(store)) == sorted({a.id, b.id})


@pytest.mark.parametrize("end", ["cancelled", "completed", "failed"])
def test_idempotency_key_is_reusable_after_the_task_is_terminal(store: Store, end: str) -> None:
    first = insert_one(store, one_time(store, key="once"))
    if end == "cancelled":
        assert store.cancel(first.id) is not None
    else:
        c = claim_one(store)
        status = ExecutionStatus.COMPLETED if end == "completed" else ExecutionStatus.FAILED
        assert store.finish("node-a", [outcome_of(c, status, store.now())]) == [True]
    assert get(store, first.id).status.is_terminal

    second = insert_one(store, one_time(store, key="once", args=["new"]))
    assert second.id != first.id
    assert second.status is Status.PENDING
    assert second.args == ["new"]
    assert second.key == "once"
    # and the new live task now holds the key
    assert insert_one(store, one_time(store, key="once")).id == second.id
    assert len(all_tasks(store)) == 2


# -- next_due_at ---------------------------------------------------------------------------


def test_next_due_at_is_none_without_pending_tasks(store: Store) -> None:
    assert store.next_due_at([NAME]) is None
    insert_one(store, one_time(store, name=OTHER))
    assert store.next_due_at([NAME]) is None


def test_next_due_at_earliest_pending_among_given_names(store: Store) -> None:
    later = insert_one(store, one_time(store, offset=100))
    soon = insert_one(store, one_time(store, offset=50))
    paused = insert_one(store, one_time(store, offset=-500))
    cancelled = insert_one(store, one_time(store, offset=-600))
    running = insert_one(store, one_time(store, offset=-700))
    other = insert_one(store, one_time(store, name=OTHER, offset=-1000))
    store.pause(paused.id)
    store.cancel(cancelled.id)
    c = claim_one(store)
    assert c.task.id == running.id

    assert store.next_due_at([NAME]) == soon.next_run_at
    assert store.next_due_at([NAME, OTHER]) == other.next_run_at
    assert store.next_due_at([OTHER]) == other.next_run_at
    assert store.next_due_at(["nobody.registered"]) is None

    store.cancel(soon.id)
    assert store.next_due_at([NAME]) == later.next_run_at
    store.resume(paused.id)
    assert store.next_due_at([NAME]) == paused.next_run_at


# -- claim ------------------------------------------------------------------------------------


def test_claim_sets_lease_and_logs_a_running_execution(store: Store) -> None:
    scheduled = at(store, -10)
    new = one_time(store, scheduled_at=scheduled, next_run_at=scheduled + timedelta(seconds=3), args=["x"])
    task = insert_one(store, new)
    before = store.now()
    claims = store.claim("node-a", [NAME], 5, LEASE)
    after = store.now()

    assert len(claims) == 1
    c = claims[0]
    assert c.task.id == task.id
    assert c.task.version == task.version + 1
    assert c.fence == c.task.version
    assert c.task.status is Status.RUNNING
    assert c.task.lease_owner == "node-a"
    assert c.task.lease_expires_at is not None
    assert before + timedelta(seconds=LEASE) <= c.task.lease_expires_at <= after + timedelta(seconds=LEASE)
    assert c.task.attempt == 1
    assert c.task.args == ["x"]
    assert c.scheduled_for == scheduled  # the nominal slot, not next_run_at
    assert get(store, task.id) == c.task

    [e] = executions_of(store, task.id)
    assert e.id == c.execution_id
    assert e.task_id == task.id
    assert e.status is ExecutionStatus.RUNNING
    assert e.fence == c.task.version
    assert e.node == "node-a"
    assert e.attempt == 1
    assert e.scheduled_for == scheduled
    assert e.started_at is not None
    assert before <= e.started_at <= after
    assert e.finished_at is None
    assert e.error is None
    assert e.result is None

    # claimed once: nothing left to claim, and the claim changed nothing more
    assert store.claim("node-a", [NAME], 5, LEASE) == []
    assert store.claim("node-b", [NAME], 5, LEASE) == []
    assert get(store, task.id) == c.task
    assert len(executions_of(store, task.id)) == 1


def test_claim_only_due_tasks_with_given_names(store: Store) -> None:
    due = insert_one(store, one_time(store))
    future = insert_one(store, one_time(store, offset=3600))
    other = insert_one(store, one_time(store, name=OTHER))

    assert store.claim("node-a", [NAME], 0, LEASE) == []
    assert store.claim("node-a", [], 10, LEASE) == []
    assert store.claim("node-a", ["nobody.registered"], 10, LEASE) == []

    claims = store.claim("node-a", [NAME], 10, LEASE)
    assert [c.task.id for c in claims] == [due.id]
    claims = store.claim("node-a", [NAME, OTHER], 10, LEASE)
    assert [c.task.id for c in claims] == [other.id]
    assert store.claim("node-a", [NAME, OTHER], 10, LEASE) == []
    assert [t.id for t in store.list_tasks(status=Status.PENDING)] == [future.id]


def test_claim_respects_limit(store: Store) -> None:
    tasks = store.insert_tasks([one_time(store) for _ in range(7)])
    first = store.claim("node-a", [NAME], 3, LEASE)
    assert len(first) == 3
    second = store.claim("node-a", [NAME], 3, LEASE)
    assert len(second) == 3
    third = store.claim("node-a", [NAME], 3, LEASE)
    assert len(third) == 1
    assert store.claim("node-a", [NAME], 3, LEASE) == []
    claimed = [c.task.id for c in first + second + third]
    assert sorted(claimed) == sorted(t.id for t in tasks)


def test_claim_order_higher_priority_first_then_oldest_due(store: Store) -> None:
    slot = store.now() - timedelta(seconds=20)
    low_tie = insert_one(store, one_time(store, scheduled_at=slot, next_run_at=slot, priority=0))
    high_tie = insert_one(store, one_time(store, scheduled_at=slot, next_run_at=slot, priority=5))
    oldest = insert_one(store, one_time(store, offset=-1000, priority=-1))
    older = insert_one(store, one_time(store, offset=-500, priority=0))
    newest = insert_one(store, one_time(store, offset=-5, priority=50))
    insert_one(store, one_time(store, offset=3600, priority=100))  # not due, whatever its priority
    insert_one(store, one_time(store, name=OTHER, priority=1000))  # another name

    two = store.claim("node-a", [NAME], 2, LEASE)
    assert [c.task.id for c in two] == [newest.id, high_tie.id]
    order = [claim_one(store).task.id for _ in range(3)]
    assert order == [older.id, low_tie.id, oldest.id]  # below 0: after every other due task
    assert store.claim("node-a", [NAME], 10, LEASE) == []


def copy_first_task(url: str, times: int) -> None:
    """A backlog written in one statement (schedule_many would take seconds per store)."""
    columns = (
        "name, args, kwargs, kind, timezone, scheduled_at, next_run_at, status, misfire, misfire_grace, jitter, "
        "max_retries, retry_backoff, priority, version, cancel_requested, triggered, attempt, run_count, "
        "created_at, updated_at"
    )
    sql = (
        f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {int(times)}) "
        f"INSERT INTO tickwork_tasks ({columns}) SELECT {columns} FROM tickwork_tasks, n WHERE id = 1"
    )
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("///", 1)[1]) as conn:
            conn.execute(sql)
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.encode())


@real_stores_only("the claim's cost behind a backlog is the SQL stores' (the order is pinned above)")
def test_a_high_priority_task_overtakes_a_backlog_of_100000_due_tasks(store: Store, store_url: str) -> None:
    """Issue 17: one claim round takes it first, however many are due before it."""
    slot = store.now() - timedelta(seconds=60)
    [first] = store.insert_tasks([one_time(store, scheduled_at=slot, next_run_at=slot)])
    assert first.id == 1
    copy_first_task(store_url, 100_000)
    assert len(store.list_tasks(limit=200_000)) == 100_001
    urgent = insert_one(store, one_time(store, offset=-1, priority=10))
    first = store.claim("node-a", [NAME], 8, LEASE)
    assert first[0].task.id == urgent.id and len(first) == 8


def test_each_claim_bumps_version_by_exactly_one(store: Store) -> None:
    task = insert_one(store, one_time(store))
    assert store.pause(task.id) is not None
    resumed = store.resume(task.id)
    assert resumed is not None
    assert resumed.status is Status.PENDING
    base = resumed.version

    c1 = claim_one(store, "node-a")
    assert c1.task.version == base + 1
    assert store.release("node-a", [c1]) == 1
    c2 = claim_one(store, "node-b")
    assert c2.task.version == base + 2
    assert c2.task.attempt == 1
    assert c2.task.lease_owner == "node-b"
    [e] = executions_of(store, task.id)
    assert e.fence == c2.fence
    assert e.node == "node-b"


# -- claim races ---------------------------------------------------------------------------------

RACE_TASKS = 300


def _claim_until_empty(s: Store, node: str, deadline: float, batch: int = 5) -> list[int]:
    ids: list[int] = []
    while time.monotonic() < deadline:
        claims = s.claim(node, [NAME], batch, 60.0)
        ids.extend(c.task.id for c in claims)
        if not claims and not s.list_tasks(status=Status.PENDING, name=NAME, limit=1):
            return ids
    raise AssertionError(f"{node}: still claiming at the deadline")


def _assert_claimed_exactly_once(store: Store, task_ids: list[int], claimed: list[int]) -> None:
    counts = Counter(claimed)
    duplicates = {tid: n for tid, n in counts.items() if n > 1}
    assert duplicates == {}
    assert sorted(counts) == sorted(task_ids)
    tasks = all_tasks(store)
    assert all(t.status is Status.RUNNING and t.version == 1 and t.attempt == 1 for t in tasks)
    per_task = Counter(e.task_id for e in store.list_executions(limit=10_000))
    assert per_task == Counter(task_ids)


@real_stores_only("there is no URL to open a store object per thread by")
def test_claim_race_threads_each_task_claimed_once(store: Store, store_url: str) -> None:
    tasks = store.insert_tasks([one_time(store) for _ in range(RACE_TASKS)])
    n = 8
    stores = []
    try:
        for _ in range(n):
            s = open_store(store_url)
            s.migrate()
            stores.append(s)
        barrier = threading.Barrier(n)
        results: dict[str, list[int]] = {}
        errors: list[BaseException] = []
        deadline = time.monotonic() + 30

        def run(s: Store, node: str) -> None:
            try:
                barrier.wait(timeout=10)
                results[node] = _claim_until_empty(s, node, deadline)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s, f"thread-node-{i}")) for i, s in enumerate(stores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=40)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert len(results) == n
        claimed = [tid for ids in results.values() for tid in ids]
        _assert_claimed_exactly_once(store, [t.id for t in tasks], claimed)
        owners = {t.id: t.lease_owner for t in all_tasks(store)}
        for node, ids in results.items():
            assert all(owners[tid] == node for tid in ids)
    finally:
        for s in stores:
            s.close()


def _claim_in_process(url: str, node: str, barrier: Any, results: Any) -> None:
    """Runs in a spawned process: its own store, claims until none are left."""
    try:
        s = open_store(url)
        s.migrate()
        barrier.wait(timeout=30)
        ids = _claim_until_empty(s, node, time.monotonic() + 30)
        s.close()
        results.put((node, ids, None))
    except BaseException as exc:
        results.put((node, [], repr(exc)))


@real_stores_only("its data lives in this process: other processes cannot open it")
@pytest.mark.timeout(90)
def test_claim_race_processes_each_task_claimed_once(store: Store, store_url: str) -> None:
    tasks = store.insert_tasks([one_time(store) for _ in range(RACE_TASKS)])
    ctx = multiprocessing.get_context("spawn")
    n = 4
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_claim_in_process, args=(store_url, f"proc-node-{i}", barrier, results), daemon=True)
        for i in range(n)
    ]
    reported: dict[str, list[int]] = {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + 60
        while len(reported) < n:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"only {len(reported)} of {n} processes reported in time"
            try:
                node, ids, error = results.get(timeout=remaining)
            except queue.Empty:
                continue
            assert error is None, f"{node}: {error}"
            reported[node] = ids
        for p in procs:
            p.join(timeout=10)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    claimed = [tid for ids in reported.values() for tid in ids]
    _assert_claimed_exactly_once(store, [t.id for t in tasks], claimed)
    owners = {t.id: t.lease_owner for t in all_tasks(store)}
    for node, ids in reported.items():
        assert all(owners[tid] == node for tid in ids)


# -- renew ------------------------------------------------------------------------------------------


def test_renew_extends_owned_leases_only(store: Store) -> None:
    t1, t2 = store.insert_tasks([one_time(store), one_time(store)])
    c1, c2 = sorted(store.claim("node-a", [NAME], 2, LEASE), key=lambda c: c.task.id)
    assert store.renew("node-a", [], 100) == []

    before = store.now()
    renewed = store.renew("node-a", [(t1.id, c1.fence)], 300)
    after = store.now()
    assert renewed == [Renewal(t1.id, c1.fence, False)]
    lease = get(store, t1.id).lease_expires_at
    assert lease is not None
    assert before + timedelta(seconds=300) <= lease <= after + timedelta(seconds=300)

    snapshot = get(store, t2.id)
    assert store.renew("node-a", [(t2.id, c2.fence - 1)], 300) == []  # stale fence
    assert store.renew("node-a", [(t2.id, c2.fence + 1)], 300) == []  # future fence
    assert store.renew("node-b", [(t2.id, c2.fence)], 300) == []  # not the owner
    assert store.renew("node-a", [(999_999, 1)], 300) == []  # unknown task
    assert get(store, t2.id) == snapshot

    mixed = store.renew("node-a", [(t1.id, c1.fence), (t2.id, c2.fence - 1), (t2.id, c2.fence)], 60)
    assert sorted(r.task_id for r in mixed) == [t1.id, t2.id]
    assert [r.task_id for r in mixed].count(t2.id) == 1


def test_renew_reports_cancel_requested(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store)
    assert store.renew("node-a", [(task.id, c.fence)], LEASE) == [Renewal(task.id, c.fence, False)]
    cancelled = store.cancel(task.id)
    assert cancelled is not None
    assert cancelled.status is Status.RUNNING
    assert cancelled.cancel_requested is True
    assert store.renew("node-a", [(task.id, c.fence)], LEASE) == [Renewal(task.id, c.fence, True)]


def test_renew_of_a_finished_run_returns_nothing(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store)
    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [True]
    snapshot = get(store, task.id)
    assert store.renew("node-a", [(task.id, c.fence)], LEASE) == []
    assert get(store, task.id) == snapshot


# -- finish ----------------------------------------------------------------------------------------------


def test_finish_one_time_completed(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store)
    result = {"sent": ["zoë@例え.jp"], "n": 2, "nested": {"ok": True, "v": None}}
    before = store.now()
    outcome = outcome_of(c, ExecutionStatus.COMPLETED, store.now(), result=result, note="fine")
    assert store.finish("node-a", [outcome]) == [True]
    after = store.now()

    done = get(store, task.id)
    assert done.status is Status.COMPLETED
    assert done.lease_owner is None
    assert done.lease_expires_at is None
    assert done.run_count == 1
    assert done.last_status is ExecutionStatus.COMPLETED
    assert done.attempt == 1
    assert done.version == c.fence

    e = execution(store, c.execution_id)
    assert e.status is ExecutionStatus.COMPLETED
    assert e.result == result
    assert e.error is None
    assert e.note == "fine"
    assert e.finished_at is not None
    assert before <= e.finished_at <= after
    assert e.finished_at == outcome.finished_at  # when the run ended, not when it was written
    assert e.fence == c.fence
    assert e.node == "node-a"

    # a second finish of the same claim is stale and changes nothing
    again = outcome_of(c, ExecutionStatus.FAILED, store.now(), error=ErrorInfo("Late", "late"))
    assert store.finish("node-a", [again]) == [False]
    assert get(store, task.id) == done
    assert execution(store, c.execution_id) == e
    assert store.claim("node-a", [NAME], 5, LEASE) == []


def test_finish_one_time_failed_without_retries(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store)
    error = ErrorInfo("ValueError", "bad input: ünïcødé", "Traceback (most recent call last):\n  ...\nValueError")
    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.FAILED, store.now(), error=error)]) == [True]
    failed = get(store, task.id)
    assert failed.status is Status.FAILED
    assert failed.last_status is ExecutionStatus.FAILED
    assert failed.run_count == 1
    assert failed.lease_owner is None
    e = execution(store, c.execution_id)
    assert e.status is ExecutionStatus.FAILED
    assert e.error == error
    assert e.result is None
    assert store.claim("node-a", [NAME], 5, LEASE) == []


def test_finish_failed_with_retries_left_goes_back_to_pending(store: Store) -> None:
    task = insert_one(store, one_time(store, max_retries=2, retry_backoff=60.0))
    c = claim_one(store)
    now = store.now()
    outcome = outcome_of(c, ExecutionStatus.FAILED, now, error=ErrorInfo("E", "boom"))
    assert store.finish("node-a", [outcome]) == [True]
    retry = get(store, task.id)
    assert retry.status is Status.PENDING
    assert retry.next_run_at == now + timedelta(seconds=60)
    assert retry.scheduled_at == task.scheduled_at
    assert retry.attempt == 1
    assert retry.run_count == 1
    assert retry.last_status is ExecutionStatus.FAILED
    assert retry.lease_owner is None
    assert retry.lease_expires_at is None
    assert store.claim("node-a", [NAME], 5, LEASE) == []  # not due until the backoff passed
    assert store.next_due_at([NAME]) == now + timedelta(seconds=60)


def test_finish_recurring_interval_moves_to_next_slot(store: Store) -> None:
    task = insert_one(store, recurring(store, interval=60.0))
    c = claim_one(store)
    assert c.scheduled_for == task.scheduled_at
    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now(), result=[1])]) == [True]
    nxt = get(store, task.id)
    assert nxt.status is Status.PENDING
    assert nxt.scheduled_at == task.scheduled_at + timedelta(seconds=60)
    assert nxt.next_run_at == nxt.scheduled_at
    assert nxt.attempt == 0
    assert nxt.run_count == 1
    assert nxt.last_status is ExecutionStatus.COMPLETED
    assert nxt.lease_owner is None
    assert nxt.lease_expires_at is None
    assert nxt.triggered is False
    e = execution(store, c.execution_id)
    assert e.status is ExecutionStatus.COMPLETED
    assert e.result == [1]
    assert store.next_due_at([NAME]) == nxt.next_run_at
    assert store.claim("node-a", [NAME], 5, LEASE) == []  # next slot is in the future

    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [False]
    assert get(store, task.id) == nxt


def test_finish_with_wrong_node_or_stale_fence_is_rejected(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store)
    snapshot = get(store, task.id)
    outcome = outcome_of(c, ExecutionStatus.COMPLETED, store.now())

    assert store.finish("node-b", [outcome]) == [False]
    assert store.finish("node-a", [dataclasses.replace(outcome, fence=c.fence - 1)]) == [False]
    assert store.finish("node-a", [dataclasses.replace(outcome, fence=c.fence + 1)]) == [False]
    assert get(store, task.id) == snapshot
    assert execution(store, c.execution_id).status is ExecutionStatus.RUNNING

    assert store.finish("node-a", [outcome]) == [True]
    assert get(store, task.id).status is Status.COMPLETED


def test_finish_batch_reports_each_outcome(store: Store) -> None:
    store.insert_tasks([one_time(store), one_time(store)])
    c1, c2 = sorted(store.claim("node-a", [NAME], 2, LEASE), key=lambda c: c.task.id)
    now = store.now()
    good = outcome_of(c1, ExecutionStatus.COMPLETED, now)
    stale = dataclasses.replace(outcome_of(c2, ExecutionStatus.COMPLETED, now), fence=c2.fence - 1)
    assert store.finish("node-a", [stale, good]) == [False, True]
    assert get(store, c1.task.id).status is Status.COMPLETED
    assert get(store, c2.task.id).status is Status.RUNNING
    assert store.finish("node-a", []) == []


def test_finish_of_an_old_claim_does_not_touch_the_next_run(store: Store) -> None:
    task = insert_one(store, recurring(store, interval=0.001, misfire_grace=3600.0))
    c1 = claim_one(store)
    assert store.finish("node-a", [outcome_of(c1, ExecutionStatus.COMPLETED, store.now())]) == [True]
    c2 = claim_one(store)  # the next slot is already due; same node claims it again
    assert c2.fence == c1.fence + 1
    snapshot = get(store, task.id)
    old = outcome_of(c1, ExecutionStatus.FAILED, store.now(), error=ErrorInfo("Late", "late"))
    assert store.finish("node-a", [old]) == [False]
    assert get(store, task.id) == snapshot
    assert execution(store, c2.execution_id).status is ExecutionStatus.RUNNING
    assert execution(store, c1.execution_id).status is ExecutionStatus.COMPLETED


def test_a_batch_with_an_old_and_a_current_outcome_of_one_task_applies_only_the_current(store: Store) -> None:
    """A recorder batch can hold the late result of a run taken over and the result of
    the same task's next run: each is judged by its own fence, and the stale one is
    reported stale and writes nothing (PostgreSQL once counted both as applied)."""
    task = insert_one(store, recurring(store, interval=0.001, misfire_grace=3600.0))
    c1 = claim_one(store)
    assert store.finish("node-a", [outcome_of(c1, ExecutionStatus.COMPLETED, store.now())]) == [True]
    c2 = claim_one(store)
    now = store.now()
    old = outcome_of(c1, ExecutionStatus.FAILED, now, error=ErrorInfo("Late", "late"), result="stale")
    current = outcome_of(c2, ExecutionStatus.COMPLETED, now, result="current")
    assert store.finish("node-a", [old, current]) == [False, True]
    assert execution(store, c1.execution_id).status is ExecutionStatus.COMPLETED  # untouched
    assert execution(store, c1.execution_id).result is None
    assert (execution(store, c2.execution_id).status, execution(store, c2.execution_id).result) == (
        ExecutionStatus.COMPLETED,
        "current",
    )
    assert get(store, task.id).last_status is ExecutionStatus.COMPLETED


@pytest.mark.parametrize("kind", ["recurring-completed", "one-time-failed-with-retries"])
def test_cancel_requested_during_a_run_is_not_lost_by_finish(store: Store, kind: str) -> None:
    """cancel() on a RUNNING task promises the run ends CANCELLED. The node builds its
    outcome from the claim (it may not have seen the request yet: it arrives with the
    next renewal); finishing that outcome must not put the task back in the queue."""
    if kind == "recurring-completed":
        task = insert_one(store, recurring(store, interval=0.001, misfire_grace=3600.0))
        status = ExecutionStatus.COMPLETED
    else:
        task = insert_one(store, one_time(store, max_retries=3, retry_backoff=0.001))
        status = ExecutionStatus.FAILED
    c = claim_one(store)
    requested = store.cancel(task.id)
    assert requested is not None
    assert requested.cancel_requested is True
    assert store.finish("node-a", [outcome_of(c, status, store.now(), error=None)]) == [True]
    after = get(store, task.id)
    assert after.status is Status.CANCELLED
    assert store.claim("node-a", [NAME], 5, LEASE) == []


def test_a_cancel_too_late_for_a_completed_one_time_run_leaves_it_completed(store: Store) -> None:
    """The run did its work before the node heard of the cancel: the task is COMPLETED,
    matching its one COMPLETED execution, never CANCELLED over a completed run."""
    task = insert_one(store, one_time(store))
    c = claim_one(store)
    requested = store.cancel(task.id)
    assert requested is not None and requested.cancel_requested
    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now(), error=None)]) == [True]
    after = get(store, task.id)
    assert (after.status, after.cancel_requested) == (Status.COMPLETED, False)
    assert execution(store, c.execution_id).status is ExecutionStatus.COMPLETED


# -- fencing race: lost lease, reap, late result ------------------------------------------------------


def test_lost_lease_is_reaped_and_the_late_result_is_dropped(store: Store) -> None:
    """By default a lost run runs again: the same attempt, not counted, no retry used."""
    task = insert_one(store, one_time(store, retry_backoff=0.01))
    c = claim_one(store, "node-a", lease=TINY_LEASE)

    lost = expired_claim_for(store, task.id)
    assert lost.execution_id == c.execution_id
    assert lost.fence == c.fence
    assert lost.task.lease_owner == "node-a"
    assert lost.scheduled_for == c.scheduled_for

    reap_start = store.now()
    assert reconcile(store) == 1
    reap_end = store.now()
    assert reconcile(store) == 0  # idempotent
    assert store.expired(100) == []

    reaped = get(store, task.id)
    assert reaped.status is Status.PENDING  # run again (lost run 1 of at most 3)
    assert reaped.attempt == 0
    assert reaped.run_count == 0
    assert reaped.lost_runs == 1
    assert reaped.last_status is ExecutionStatus.FAILED
    assert reaped.lease_owner is None
    assert reaped.lease_expires_at is None
    assert reap_start + timedelta(seconds=0.01) <= reaped.next_run_at <= reap_end + timedelta(seconds=0.01)
    e = execution(store, c.execution_id)
    assert e.status is ExecutionStatus.FAILED
    assert e.note is not None
    assert "lost" in e.note.lower() and "run again (lost run 1 of at most 3 in a row)" in e.note
    assert e.error is not None
    assert "lost" in e.error.message.lower()
    assert e.finished_at is not None

    # the original node comes back: its renewal and its result are stale
    assert store.renew("node-a", [(task.id, c.fence)], LEASE) == []
    late = outcome_of(c, ExecutionStatus.COMPLETED, store.now(), result="late")
    assert store.finish("node-a", [late]) == [False]
    assert get(store, task.id) == reaped
    assert execution(store, c.execution_id) == e

    # another node takes the retry over under a new fence
    found = wait_for(lambda: store.claim("node-b", [NAME], 1, LEASE), timeout=10)
    assert isinstance(found, list)
    [c2] = found
    assert c2.task.id == task.id
    assert c2.fence == c.fence + 1
    assert c2.task.attempt == 1
    assert c2.task.lease_owner == "node-b"
    assert store.finish("node-a", [late]) == [False]
    assert store.finish("node-b", [outcome_of(c2, ExecutionStatus.COMPLETED, store.now(), result="ok")]) == [True]
    done = get(store, task.id)
    assert done.status is Status.COMPLETED
    assert done.run_count == 1
    assert done.lost_runs == 0
    assert execution(store, c2.execution_id).result == "ok"
    assert execution(store, c.execution_id) == e


def lose(store: Store, task_id: int) -> Claim:
    """Claim ``task_id`` on a tiny lease and let the reconciler find it lost; the claim."""
    c = wait_for(lambda: store.claim("node-a", [NAME], 1, TINY_LEASE), timeout=10)
    assert isinstance(c, list) and c[0].task.id == task_id
    expired_claim_for(store, task_id)
    assert reconcile(store) == 1
    return c[0]


def test_lost_runs_run_again_max_lost_times_in_a_row_then_count_as_a_failure(store: Store) -> None:
    task = insert_one(store, one_time(store, max_lost=2, max_retries=1, retry_backoff=0.01))
    for lost in (1, 2):
        c = lose(store, task.id)
        assert c.task.attempt == 1  # a lost run's rerun is the same attempt
        now = get(store, task.id)
        assert (now.status, now.attempt, now.lost_runs, now.run_count) == (Status.PENDING, 0, lost, 0)
    c = lose(store, task.id)  # the third in a row: a failure, which max_retries=1 retries
    assert c.task.attempt == 1
    now = get(store, task.id)
    assert (now.status, now.attempt, now.lost_runs, now.run_count) == (Status.PENDING, 1, 2, 1)
    assert "counted as a failure" in (execution(store, c.execution_id).note or "")
    c = lose(store, task.id)  # lost again, still in a row, no retry left: FAILED
    assert c.task.attempt == 2
    now = get(store, task.id)
    assert (now.status, now.lost_runs, now.run_count) == (Status.FAILED, 0, 2)


def test_a_run_that_ends_on_its_node_resets_the_lost_runs(store: Store) -> None:
    task = insert_one(store, recurring(store, max_lost=1, retry_backoff=0.01, interval=3600.0))
    lose(store, task.id)
    assert get(store, task.id).lost_runs == 1
    [c] = wait_for(lambda: store.claim("node-a", [NAME], 1, LEASE), timeout=10)  # type: ignore[misc]
    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.FAILED, store.now())]) == [True]
    after = get(store, task.id)
    assert (after.lost_runs, after.run_count, after.scheduled_at > task.scheduled_at) == (0, 1, True)


def test_a_recurring_tasks_lost_runs_past_max_lost_move_it_to_its_next_slot(store: Store) -> None:
    task = insert_one(store, recurring(store, max_lost=0, interval=3600.0))
    lose(store, task.id)
    after = get(store, task.id)
    assert after.status is Status.PENDING and after.scheduled_at > task.scheduled_at
    assert (after.lost_runs, after.attempt, after.run_count) == (0, 0, 1)


def test_a_lost_run_whose_task_was_asked_to_cancel_is_not_run_again(store: Store) -> None:
    cancelled = insert_one(store, one_time(store))
    [c] = wait_for(lambda: store.claim("node-a", [NAME], 1, TINY_LEASE), timeout=10)  # type: ignore[misc]
    store.cancel(cancelled.id)
    expired_claim_for(store, cancelled.id)
    assert reconcile(store) == 1
    assert get(store, cancelled.id).status is Status.CANCELLED
    assert c.task.id == cancelled.id


def test_lost_lease_with_max_lost_0_fails_the_one_time_task(store: Store) -> None:
    task = insert_one(store, one_time(store, max_lost=0))
    c = claim_one(store, "node-a", lease=TINY_LEASE)
    expired_claim_for(store, task.id)
    assert reconcile(store) == 1
    assert get(store, task.id).status is Status.FAILED
    assert execution(store, c.execution_id).status is ExecutionStatus.FAILED
    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [False]
    assert get(store, task.id).status is Status.FAILED


def test_a_run_past_max_runtime_is_ended_by_any_reconciler_while_its_lease_is_renewed(store: Store) -> None:
    """A node that renews the lease but never records the run (its thread and monitor
    stuck): past max_runtime and the grace, a reconciler ends it TIMED_OUT, fenced."""
    task = insert_one(store, one_time(store, max_runtime=0.05))
    c = claim_one(store, "node-a", lease=LEASE)
    assert store.renew("node-a", [(task.id, c.fence)], LEASE) != []  # alive
    assert reconcile(store, overrun_grace=10.0) == 0  # within the grace: its node's own business
    wait_for(lambda: reconcile(store, overrun_grace=0.0) == 1, timeout=10)
    ended = execution(store, c.execution_id)
    assert ended.status is ExecutionStatus.TIMED_OUT and ended.error is not None
    assert ended.error.type == "MaxRuntimeExceeded" and (ended.note or "").startswith("max_runtime exceeded on node-a")
    assert get(store, task.id).status is Status.FAILED
    late = outcome_of(c, ExecutionStatus.COMPLETED, store.now())
    assert store.finish("node-a", [late]) == [False]  # its own late end changes nothing
    assert execution(store, c.execution_id) == ended


@pytest.mark.parametrize("kind", ["one_time", "recurring"])
def test_on_lost_fail_ends_the_task_whatever_its_retries(store: Store, kind: str) -> None:
    make = one_time if kind == "one_time" else recurring
    task = insert_one(store, make(store, max_retries=5, on_lost=OnLost.FAIL))
    assert task.on_lost is OnLost.FAIL
    c = claim_one(store, "node-a", lease=TINY_LEASE)
    expired_claim_for(store, task.id)
    assert reconcile(store) == 1
    assert get(store, task.id).status is Status.FAILED
    lost = execution(store, c.execution_id)
    assert lost.status is ExecutionStatus.FAILED and lost.note is not None and "on_lost=fail" in lost.note


def test_renewal_before_the_reap_wins(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store, "node-a", lease=TINY_LEASE)
    stale = expired_claim_for(store, task.id)
    # the slow node renews just before the reconciler writes
    assert store.renew("node-a", [(task.id, c.fence)], LEASE) == [Renewal(task.id, c.fence, False)]
    snapshot = get(store, task.id)
    outcome = outcome_of(stale, ExecutionStatus.FAILED, store.now(), error=ErrorInfo("LeaseExpired", "lost"))
    assert store.reap("node-a", [outcome]) == [False]
    assert get(store, task.id) == snapshot
    assert execution(store, c.execution_id).status is ExecutionStatus.RUNNING
    assert store.expired(100) == []
    assert reconcile(store) == 0
    # the owner still holds the run and finishes it
    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [True]
    assert get(store, task.id).status is Status.COMPLETED


def test_reap_is_fenced(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store, "node-a", lease=LEASE)
    outcome = outcome_of(c, ExecutionStatus.FAILED, store.now(), error=ErrorInfo("LeaseExpired", "lost"))
    snapshot = get(store, task.id)
    assert store.expired(100) == []
    assert store.reap("node-a", [outcome]) == [False]  # lease not expired
    assert get(store, task.id) == snapshot
    assert execution(store, c.execution_id).status is ExecutionStatus.RUNNING


def test_reap_with_wrong_owner_or_fence_is_rejected(store: Store) -> None:
    task = insert_one(store, one_time(store))
    claim_one(store, "node-a", lease=TINY_LEASE)
    stale = expired_claim_for(store, task.id)
    outcome = outcome_of(stale, ExecutionStatus.FAILED, store.now(), error=ErrorInfo("LeaseExpired", "lost"))
    snapshot = get(store, task.id)
    assert store.reap("node-b", [outcome]) == [False]
    assert store.reap("node-a", [dataclasses.replace(outcome, fence=stale.fence - 1)]) == [False]
    assert get(store, task.id) == snapshot
    assert store.reap("node-a", [outcome]) == [True]
    assert get(store, task.id).status is Status.FAILED
    assert store.reap("node-a", [outcome]) == [False]


def test_late_finish_of_an_expired_but_unreaped_run_is_applied(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store, "node-a", lease=TINY_LEASE)
    expired_claim_for(store, task.id)
    # nobody took the run over: the fence still matches, so the owner's result counts
    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [True]
    assert get(store, task.id).status is Status.COMPLETED
    assert store.expired(100) == []
    assert reconcile(store) == 0
    assert execution(store, c.execution_id).status is ExecutionStatus.COMPLETED


# -- release -------------------------------------------------------------------------------------------------


def test_release_gives_unstarted_claims_back(store: Store) -> None:
    t1, t2 = store.insert_tasks([one_time(store), one_time(store)])
    claims = sorted(store.claim("node-a", [NAME], 2, LEASE), key=lambda c: c.task.id)
    assert store.release("node-a", []) == 0
    assert store.release("node-a", claims) == 2
    for c in claims:
        back = get(store, c.task.id)
        assert back.status is Status.PENDING
        assert back.attempt == 0
        assert back.lease_owner is None
        assert back.lease_expires_at is None
        assert back.run_count == 0
        assert executions_of(store, c.task.id) == []
    assert store.next_due_at([NAME]) == min(t1.next_run_at, t2.next_run_at)
    again = store.claim("node-b", [NAME], 2, LEASE)
    assert sorted(c.task.id for c in again) == [t1.id, t2.id]
    assert all(c.task.attempt == 1 for c in again)
    # the old claims are stale now
    assert store.release("node-a", claims) == 0
    assert all(get(store, c.task.id).lease_owner == "node-b" for c in again)


def test_release_is_fenced(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store)
    snapshot = get(store, task.id)
    stale = dataclasses.replace(c, task=dataclasses.replace(c.task, version=c.fence - 1))
    assert store.release("node-a", [stale]) == 0
    assert store.release("node-b", [c]) == 0
    assert get(store, task.id) == snapshot
    assert [e.id for e in executions_of(store, task.id)] == [c.execution_id]

    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [True]
    assert store.release("node-a", [c]) == 0
    assert get(store, task.id).status is Status.COMPLETED
    assert execution(store, c.execution_id).status is ExecutionStatus.COMPLETED


def test_release_after_cancel_request_cancels(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store)
    assert store.cancel(task.id) is not None
    assert store.release("node-a", [c]) == 1
    gone = get(store, task.id)
    assert gone.status is Status.CANCELLED
    assert gone.lease_owner is None
    assert executions_of(store, task.id) == []
    assert store.claim("node-a", [NAME], 5, LEASE) == []


# -- cancel / pause / resume / trigger -------------------------------------------------------------------------


def test_unknown_ids_return_none(store: Store) -> None:
    assert store.get_task(424242) is None
    assert store.cancel(424242) is None
    assert store.pause(424242) is None
    assert store.resume(424242) is None
    assert store.trigger(424242) is None


def test_cancel_pending_task(store: Store) -> None:
    task = insert_one(store, one_time(store))
    cancelled = store.cancel(task.id)
    assert cancelled is not None
    assert cancelled.status is Status.CANCELLED
    assert cancelled.version == task.version + 1
    assert get(store, task.id) == cancelled
    assert store.claim("node-a", [NAME], 5, LEASE) == []
    assert store.next_due_at([NAME]) is None
    # terminal: cancel, pause, resume and trigger return it unchanged
    assert store.cancel(task.id) == cancelled
    assert store.pause(task.id) == cancelled
    assert store.resume(task.id) == cancelled
    assert store.trigger(task.id) == cancelled
    assert get(store, task.id) == cancelled


def test_cancel_paused_task(store: Store) -> None:
    task = insert_one(store, one_time(store))
    paused = store.pause(task.id)
    assert paused is not None
    cancelled = store.cancel(task.id)
    assert cancelled is not None
    assert cancelled.status is Status.CANCELLED
    assert cancelled.version > paused.version
    assert store.resume(task.id) == cancelled
    assert store.claim("node-a", [NAME], 5, LEASE) == []


def test_cancel_running_task_requests_cancellation(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store)
    requested = store.cancel(task.id)
    assert requested is not None
    assert requested.status is Status.RUNNING
    assert requested.cancel_requested is True
    assert requested.version == c.fence  # the running node's fence stays valid
    assert requested.lease_owner == "node-a"
    assert get(store, task.id) == requested
    assert execution(store, c.execution_id).status is ExecutionStatus.RUNNING
    # the node sees it and ends the run CANCELLED
    assert store.renew("node-a", [(task.id, c.fence)], LEASE) == [Renewal(task.id, c.fence, True)]
    outcome = outcome_of(c, ExecutionStatus.CANCELLED, store.now(), note="cancelled")
    assert store.finish("node-a", [outcome]) == [True]
    assert get(store, task.id).status is Status.CANCELLED
    assert execution(store, c.execution_id).status is ExecutionStatus.CANCELLED


def test_pause_and_resume(store: Store) -> None:
    task = insert_one(store, one_time(store))
    paused = store.pause(task.id)
    assert paused is not None
    assert paused.status is Status.PAUSED
    assert paused.version == task.version + 1
    assert store.claim("node-a", [NAME], 5, LEASE) == []
    assert store.next_due_at([NAME]) is None
    assert store.pause(task.id) == paused  # already paused: unchanged
    assert store.trigger(task.id) == paused  # only PENDING tasks are triggered

    resumed = store.resume(task.id)
    assert resumed is not None
    assert resumed.status is Status.PENDING
    assert resumed.version == paused.version + 1
    assert resumed.next_run_at == task.next_run_at
    assert store.resume(task.id) == resumed  # not paused: unchanged
    c = claim_one(store)
    assert c.task.id == task.id
    assert c.task.version == resumed.version + 1


def test_guards_leave_running_and_completed_tasks_unchanged(store: Store) -> None:
    task = insert_one(store, one_time(store))
    c = claim_one(store)
    running = get(store, task.id)
    assert store.pause(task.id) == running
    assert store.resume(task.id) == running
    assert store.trigger(task.id) == running
    assert get(store, task.id) == running

    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [True]
    completed = get(store, task.id)
    assert completed.status is Status.COMPLETED
    assert store.pause(task.id) == completed
    assert store.resume(task.id) == completed
    assert store.cancel(task.id) == completed
    assert store.trigger(task.id) == completed
    assert get(store, task.id) == completed


def test_trigger_one_time_task_makes_it_due_now(store: Store) -> None:
    task = insert_one(store, one_time(store, offset=3600))
    assert store.claim("node-a", [NAME], 5, LEASE) == []
    before = store.now()
    triggered = store.trigger(task.id)
    after = store.now()
    assert triggered is not None
    assert triggered.status is Status.PENDING
    assert triggered.version == task.version + 1
    assert before <= triggered.next_run_at <= after
    assert triggered.scheduled_at == triggered.next_run_at  # its one slot moves to now
    assert store.next_due_at([NAME]) == triggered.next_run_at
    c = claim_one(store)
    assert c.task.id == task.id
    assert c.scheduled_for == triggered.next_run_at
    assert execution(store, c.execution_id).scheduled_for == triggered.next_run_at


def test_trigger_recurring_task_adds_a_run_without_consuming_the_slot(store: Store) -> None:
    task = insert_one(store, recurring(store, offset=3600, interval=7200.0))
    before = store.now()
    triggered = store.trigger(task.id)
    after = store.now()
    assert triggered is not None
    assert triggered.status is Status.PENDING
    assert triggered.scheduled_at == task.scheduled_at
    assert before <= triggered.next_run_at <= after
    assert triggered.triggered is True

    c = claim_one(store)
    assert c.task.id == task.id
    assert c.scheduled_for == triggered.next_run_at
    assert execution(store, c.execution_id).scheduled_for == triggered.next_run_at
    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [True]
    back = get(store, task.id)
    assert back.status is Status.PENDING
    assert back.scheduled_at == task.scheduled_at  # the nominal slot is still to come
    assert back.next_run_at == task.next_run_at
    assert back.triggered is False
    assert back.run_count == 1
    assert store.claim("node-a", [NAME], 5, LEASE) == []


# -- listing ---------------------------------------------------------------------------------------------------------


def test_list_tasks_filters_and_pages(store: Store) -> None:
    a1, a2, a3 = store.insert_tasks([one_time(store), one_time(store, offset=3600), one_time(store, offset=3600)])
    b1, b2 = store.insert_tasks([one_time(store, name=OTHER, offset=3600), one_time(store, name=OTHER, offset=3600)])
    store.pause(a2.id)
    store.cancel(b2.id)
    claim_one(store)  # a1 is the only due task

    def ids(tasks: list[Task]) -> set[int]:
        return {t.id for t in tasks}

    assert ids(store.list_tasks()) == {a1.id, a2.id, a3.id, b1.id, b2.id}
    assert ids(store.list_tasks(name=NAME)) == {a1.id, a2.id, a3.id}
    assert ids(store.list_tasks(name=OTHER)) == {b1.id, b2.id}
    assert ids(store.list_tasks(status=Status.PENDING)) == {a3.id, b1.id}
    assert ids(store.list_tasks(status=Status.RUNNING)) == {a1.id}
    assert ids(store.list_tasks(status=Status.PAUSED)) == {a2.id}
    assert ids(store.list_tasks(status=Status.CANCELLED)) == {b2.id}
    assert ids(store.list_tasks(status=Status.PENDING, name=OTHER)) == {b1.id}
    assert store.list_tasks(status=Status.COMPLETED) == []
    assert store.list_tasks(name="nobody") == []

    pages = [store.list_tasks(limit=2, offset=o) for o in (0, 2, 4, 6)]
    assert [len(p) for p in pages] == [2, 2, 1, 0]
    paged = [t.id for p in pages for t in p]
    assert len(paged) == len(set(paged)) == 5
    assert set(paged) == {a1.id, a2.id, a3.id, b1.id, b2.id}
    assert len(store.list_tasks(name=NAME, limit=1)) == 1
    assert {t.id for t in store.list_tasks(name=NAME, limit=2, offset=1)} < {a1.id, a2.id, a3.id}


def test_list_executions_filters_newest_first(store: Store) -> None:
    t1, t2, t3 = store.insert_tasks([one_time(store, offset=-30), one_time(store, offset=-20), one_time(store)])
    c1 = claim_one(store)
    assert store.finish("node-a", [outcome_of(c1, ExecutionStatus.COMPLETED, store.now())]) == [True]
    c2 = claim_one(store)
    error = ErrorInfo("E", "boom")
    assert store.finish("node-a", [outcome_of(c2, ExecutionStatus.FAILED, store.now(), error=error)]) == [True]
    c3 = claim_one(store)
    assert [c.task.id for c in (c1, c2, c3)] == [t1.id, t2.id, t3.id]

    everything = store.list_executions()
    assert [e.id for e in everything] == [c3.execution_id, c2.execution_id, c1.execution_id]
    assert [e.status for e in everything] == [
        ExecutionStatus.RUNNING,
        ExecutionStatus.FAILED,
        ExecutionStatus.COMPLETED,
    ]
    assert [e.id for e in store.list_executions(limit=2)] == [c3.execution_id, c2.execution_id]
    assert [e.id for e in store.list_executions(task_id=t2.id)] == [c2.execution_id]
    assert [e.id for e in store.list_executions(status=ExecutionStatus.FAILED)] == [c2.execution_id]
    assert [e.id for e in store.list_executions(task_id=t1.id, status=ExecutionStatus.COMPLETED)] == [c1.execution_id]
    assert store.list_executions(task_id=t1.id, status=ExecutionStatus.FAILED) == []
    assert store.list_executions(task_id=999_999) == []
    assert store.list_executions(status=ExecutionStatus.SKIPPED) == []


def test_list_executions_of_one_task_newest_first(store: Store) -> None:
    task = insert_one(store, recurring(store, interval=0.001, misfire_grace=3600.0))
    ids = []
    for _ in range(3):
        c = claim_one(store)
        ids.append(c.execution_id)
        assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [True]
    assert [e.id for e in store.list_executions(task_id=task.id)] == ids[::-1]
    assert [e.fence for e in store.list_executions(task_id=task.id)] == [3, 2, 1]


# -- nodes -------------------------------------------------------------------------------------------------------------


def make_node(store: Store, node_id: str, **fields: Any) -> Node:
    now = store.now()
    values: dict[str, Any] = {
        "id": node_id,
        "host": "host-1",
        "pid": 4321,
        "started_at": now - timedelta(seconds=5, microseconds=123),
        "heartbeat_at": now,
        "capacity": 8,
        "running": 0,
    }
    values.update(fields)
    return Node(**values)


def test_nodes_register_heartbeat_list_remove(store: Store) -> None:
    assert store.list_nodes() == []
    n1 = make_node(store, "node-1")
    n2 = make_node(store, "node-2", host="host-2", pid=99, capacity=2)
    store.register_node(n1)
    store.register_node(n2)
    nodes = {n.id: n for n in store.list_nodes()}
    assert set(nodes) == {"node-1", "node-2"}
    got = nodes["node-1"]
    assert got.host == "host-1"
    assert got.pid == 4321
    assert got.capacity == 8
    assert got.running == 0
    assert got.started_at == n1.started_at
    assert is_utc(got.heartbeat_at)
    assert nodes["node-2"].host == "host-2"
    assert nodes["node-2"].pid == 99
    assert nodes["node-2"].capacity == 2

    # registering the same node again does not duplicate it, and takes the new values
    store.register_node(dataclasses.replace(n1, host="host-1b", pid=4322))
    assert sorted(n.id for n in store.list_nodes()) == ["node-1", "node-2"]
    again = {n.id: n for n in store.list_nodes()}["node-1"]
    assert (again.host, again.pid) == ("host-1b", 4322)

    previous = got.heartbeat_at
    before = store.now()
    store.node_heartbeat("node-1", 3)
    after = store.now()
    beat = {n.id: n for n in store.list_nodes()}["node-1"]
    assert beat.running == 3
    assert before <= beat.heartbeat_at <= after
    assert beat.heartbeat_at >= previous
    assert {n.id: n for n in store.list_nodes()}["node-2"].running == 0

    store.node_heartbeat("unknown-node", 1)  # a heartbeat for a removed node is harmless
    assert sorted(n.id for n in store.list_nodes()) == ["node-1", "node-2"]

    store.remove_node("node-1")
    assert [n.id for n in store.list_nodes()] == ["node-2"]
    store.remove_node("node-1")  # idempotent
    assert [n.id for n in store.list_nodes()] == ["node-2"]


def test_prune_nodes_removes_only_silent_nodes(store: Store) -> None:
    store.register_node(make_node(store, "alive"))
    store.register_node(make_node(store, "dead"))
    assert store.prune_nodes(3600) == 0
    dead = next(n for n in store.list_nodes() if n.id == "dead")
    wait_for(lambda: store.now() - dead.heartbeat_at > timedelta(seconds=0.1))
    store.node_heartbeat("alive", 0)
    assert store.prune_nodes(0.05) == 1
    assert [n.id for n in store.list_nodes()] == ["alive"]


def test_claimed_since_finds_this_nodes_recent_claims_only(store: Store) -> None:
    insert_one(store, one_time(store))
    insert_one(store, one_time(store))
    [early] = store.claim("node-a", [NAME], 1, LEASE)
    wait_for(lambda: store.now() > early.task.updated_at + timedelta(milliseconds=50))
    since = store.now()
    [late] = store.claim("node-a", [NAME], 1, LEASE)
    assert [c.execution_id for c in store.claimed_since("node-a", since)] == [late.execution_id]
    assert store.claimed_since("node-b", since) == []
    assert {c.execution_id for c in store.claimed_since("node-a", since - timedelta(hours=1))} == {
        early.execution_id,
        late.execution_id,
    }


def test_cancel_run_only_is_spent_by_the_run_and_a_full_cancel_overrides_it(store: Store) -> None:
    task = insert_one(store, recurring(store, interval=3600.0, misfire_grace=1e6))
    assert store.cancel(task.id, run_only=True) == get(store, task.id)  # not running: unchanged
    c = claim_one(store)
    requested = store.cancel(task.id, run_only=True)
    assert requested is not None and requested.cancel_requested and requested.cancel_run_only
    assert store.renew("node-a", [(task.id, c.fence)], LEASE) == [Renewal(task.id, c.fence, True, True)]
    # the node finished before it saw the request: the run stands, the schedule goes on
    assert store.finish("node-a", [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [True]
    after = get(store, task.id)
    assert after.status is Status.PENDING and not after.cancel_requested and not after.cancel_run_only
    # a full cancel after a run-only one cancels the task
    assert store.trigger(task.id) is not None  # the next slot is an hour away: run it now
    c2 = claim_one(store)
    store.cancel(task.id, run_only=True)
    store.cancel(task.id)
    assert store.finish("node-a", [outcome_of(c2, ExecutionStatus.CANCELLED, store.now())]) == [True]
    assert get(store, task.id).status is Status.CANCELLED


# -- stats --------------------------------------------------------------------------------------


def test_stats_report_depth_oldest_age_statuses_and_recent_runs(store: Store) -> None:
    empty = store.stats()
    assert (empty.depth, empty.oldest_age, empty.running, empty.by_status) == (0, None, 0, {})
    store.insert_tasks([one_time(store, offset=-30.0), one_time(store, offset=-5.0), one_time(store, offset=-1.0)])
    store.insert_tasks([one_time(store, offset=3600.0)])  # not due: not in the queue
    claimed = claim_one(store)  # the oldest (30 s) leaves the queue
    stats = store.stats()
    assert stats.depth == 2
    assert stats.oldest_age is not None and 5.0 <= stats.oldest_age < 10.0
    assert store.queue_depth()[0] == 2
    assert stats.running == 1 and stats.by_status == {"PENDING": 3, "RUNNING": 1}
    assert stats.runs_last_minute == {} and not stats.window_full
    store.finish("node-a", [outcome_of(claimed, ExecutionStatus.FAILED, store.now(), error=ErrorInfo("E", "x"))])
    ok = claim_one(store)
    store.finish("node-a", [outcome_of(ok, ExecutionStatus.COMPLETED, store.now())])
    after = store.stats()
    assert after.runs_last_minute == {"FAILED": 1, "COMPLETED": 1} == after.runs_last_hour
    assert after.by_status == {"PENDING": 2, "FAILED": 1, "COMPLETED": 1} and after.depth == 1


def test_task_headers_follow_list_tasks_without_decoding(store: Store) -> None:
    tasks = store.insert_tasks([one_time(store) for _ in range(3)] + [one_time(store, name=OTHER)])
    headers = store.task_headers(name=NAME, limit=2, offset=1)
    assert [(h.id, h.name, h.status) for h in headers] == [(t.id, NAME, "PENDING") for t in tasks[1:3]]
    assert store.task_header(tasks[3].id) is not None and store.task_header(10**9) is None


def test_a_revoked_session_is_refused_and_others_are_not(store: Store) -> None:
    store.revoke_session("session-a", at(store, 3600))
    store.revoke_session("session-a", at(store, 3600))  # twice: one sign-out, no error
    store.revoke_session("session-old", at(store, -60))  # already expired: pruned by the next revoke
    store.revoke_session("session-b", at(store, 60))
    assert store.session_revoked("session-a") and store.session_revoked("session-b")
    assert not store.session_revoked("session-c") and not store.session_revoked("session-old")


def test_list_tasks_filters_by_kind_and_pages_newest_first(store: Store) -> None:
    once = store.insert_tasks([one_time(store) for _ in range(3)])
    [rec] = store.insert_tasks([recurring(store)])
    ids = [t.id for t in once]
    assert [t.id for t in store.list_tasks(newest_first=True, limit=2)] == [rec.id, ids[2]]
    assert [t.id for t in store.list_tasks(newest_first=True, limit=2, offset=2)] == [ids[1], ids[0]]
    assert [t.id for t in store.list_tasks(kind=Kind.ONE_TIME)] == ids
    assert [t.id for t in store.list_tasks(kind=Kind.RECURRING, newest_first=True)] == [rec.id]


def test_a_lost_run_with_an_edit_pending_runs_its_slot_again_and_keeps_the_edit(store: Store) -> None:
    """The edit (replan_at) waits for the slot that was lost to run; then it is taken."""
    from tickwork.changes import Edit

    task = insert_one(store, recurring(store, interval=3600.0, retry_backoff=0.01))
    c = claim_one(store, "node-a", lease=TINY_LEASE)
    slot = c.task.scheduled_at
    edited = slot + timedelta(hours=5)
    after = dataclasses.replace(c.task, replan_at=edited, replan_run_at=edited)
    assert store.edit_task(Edit(before=c.task, after=after, reset_cancel=False)) is not None
    expired_claim_for(store, task.id)
    assert reconcile(store) == 1
    rerun = get(store, task.id)
    assert (rerun.status, rerun.scheduled_at, rerun.lost_runs, rerun.replan_at) == (Status.PENDING, slot, 1, edited)
    [c2] = wait_for(lambda: store.claim("node-a", [NAME], 1, LEASE), timeout=10)  # type: ignore[misc]
    assert c2.scheduled_for == c.scheduled_for  # the lost slot, run again
    assert store.finish("node-a", [outcome_of(c2, ExecutionStatus.COMPLETED, store.now())]) == [True]
    moved = get(store, task.id)
    assert (moved.scheduled_at, moved.replan_at, moved.lost_runs) == (edited, None, 0)
