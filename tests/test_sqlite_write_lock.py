"""SQLite's write lock between processes: a node waits for another process's write in
short steps of its own (tickwork/store/sqlite.py), never longer than the busy timeout,
and leaves the connection's busy timeout as it found it. The other process is a second
connection to the file, which takes the same file lock a process would."""

from __future__ import annotations

import sqlite3
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from tickwork.model import Claim, ExecutionStatus, Kind, Status
from tickwork.schedules import outcome_of
from tickwork.store import NewTask, Store, open_store
from tickwork.store import sqlite as sqlite_store
from tickwork.store.dialect import StagedOutcomes
from tickwork.store.sqlite import SQLiteDialect


@pytest.fixture
def dialect(tmp_path: Path) -> SQLiteDialect:
    d = SQLiteDialect(str(tmp_path / "lock.db"))
    d.migrate()
    return d


def holder(dialect: SQLiteDialect) -> sqlite3.Connection:
    """Another process's connection holding the write lock."""
    conn = sqlite3.connect(dialect.path, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_a_write_waits_for_another_processs_write_to_end(dialect: SQLiteDialect) -> None:
    other = holder(dialect)
    entered = threading.Event()

    def write() -> None:
        with dialect.transaction() as s:
            s.execute("delete_execution", {"execution_id": 0})
            entered.set()

    writer = threading.Thread(target=write)
    writer.start()
    assert not entered.wait(0.2)  # held elsewhere: it waits
    other.execute("COMMIT")
    assert entered.wait(10)
    writer.join(10)
    conn = dialect._conn()
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == int(sqlite_store.BUSY_TIMEOUT_S * 1000)
    assert not conn.in_transaction


def test_a_write_gives_up_after_the_busy_timeout(dialect: SQLiteDialect, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_S", 0.3)
    other = holder(dialect)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"), dialect.transaction():
            pass
        conn = dialect._conn()
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 300  # the busy timeout, back in place
        assert not conn.in_transaction
    finally:
        other.execute("ROLLBACK")
    with dialect.transaction() as s:  # free again: the next write goes through
        s.execute("delete_execution", {"execution_id": 0})


def three_claimed(store: Store) -> list[Claim]:
    """Three due one-time tasks in a fresh store, claimed by node-a, in task id order."""
    store.migrate()
    due = store.now() - timedelta(seconds=1)
    new = [
        NewTask(name="t", args=[i], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=due, next_run_at=due) for i in range(3)
    ]
    store.insert_tasks(new)
    claims = sorted(store.claim("node-a", ["t"], 10, 30.0), key=lambda c: c.task.id)
    assert len(claims) == 3
    return claims


def test_an_outcome_batch_is_staged_while_another_process_writes(tmp_path: Path) -> None:
    """What a write of outcomes does before it takes the file's lock (encoding the batch,
    filling the connection's own TEMP table) waits for no other process's write: the
    other processes' claims do not queue behind it. Its write, here on another thread
    (whose connection's table does not hold it), applies the batch all the same."""
    store = open_store(f"sqlite:///{tmp_path / 'staged.db'}")
    try:
        claims = three_claimed(store)
        outcomes = [outcome_of(c, ExecutionStatus.COMPLETED, store.now(), result=c.task.args) for c in claims]
        hot = store.dialect.hot_path  # type: ignore[attr-defined]
        staged: list[StagedOutcomes] = []
        other = holder(store.dialect)  # type: ignore[attr-defined]
        try:
            stager = threading.Thread(target=lambda: staged.append(hot.stage_outcomes(outcomes)))
            stager.start()
            stager.join(10)  # with the file's lock, it would wait for the busy timeout (30 s)
            assert not stager.is_alive() and len(staged) == 1
        finally:
            other.execute("COMMIT")
        with store.dialect.hot_path.session() as s:  # type: ignore[attr-defined]
            assert hot.write_outcomes(s, "node-a", staged[0], expired_only=False) == [True, True, True]
        for c in claims:
            [execution] = store.list_executions(task_id=c.task.id)
            assert (execution.status, execution.result) == (ExecutionStatus.COMPLETED, c.task.args)
            assert store.get_task(c.task.id).status is Status.COMPLETED  # type: ignore[union-attr]
    finally:
        store.close()


def test_a_hot_path_writes_only_a_batch_it_staged(tmp_path: Path) -> None:
    """A batch staged by another hot path is refused before anything is written: its
    rows are not in this connection's outcome table."""
    store = open_store(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        store.migrate()
        with store.dialect.hot_path.session() as s, pytest.raises(TypeError, match="StagedOutcomes"):  # type: ignore[attr-defined]
            store.dialect.hot_path.write_outcomes(s, "node-a", StagedOutcomes([]), expired_only=False)  # type: ignore[attr-defined]
    finally:
        store.close()


def test_a_write_applies_its_own_batch_when_another_was_staged_since(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'twice.db'}")
    try:
        claims = three_claimed(store)
        hot = store.dialect.hot_path  # type: ignore[attr-defined]
        first = hot.stage_outcomes([outcome_of(c, ExecutionStatus.COMPLETED, store.now()) for c in claims[:2]])
        second = hot.stage_outcomes([outcome_of(claims[2], ExecutionStatus.FAILED, store.now())])
        with hot.session() as s:
            assert hot.write_outcomes(s, "node-a", first, expired_only=False) == [True, True]
        statuses = [store.get_task(c.task.id).status for c in claims]  # type: ignore[union-attr]
        assert statuses == [Status.COMPLETED, Status.COMPLETED, Status.RUNNING]
        with hot.session() as s:
            assert hot.write_outcomes(s, "node-a", second, expired_only=False) == [True]
        assert store.get_task(claims[2].task.id).status is Status.FAILED  # type: ignore[union-attr]
    finally:
        store.close()
