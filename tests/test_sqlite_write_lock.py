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
            other.close()
        with store.dialect.hot_path.session() as s:  # type: ignore[attr-defined]
            assert hot.write_outcomes(s, "node-a", staged[0], expired_only=False) == [True, True, True]
        for c in claims:
            [execution] = store.list_executions(task_id=c.task.id)
            assert (execution.status, execution.result) == (ExecutionStatus.COMPLETED, c.task.args)
            assert store.get_task(c.task.id).status is Status.COMPLETED  # type: ignore[union-attr]
    finally:
        store.close()


def test_a_hot_path_refuses_a_batch_of_another_kind(tmp_path: Path) -> None:
    """A batch another kind of hot path staged (PostgreSQL's JSON, say) carries no rows
    for this one's table: refused before anything is written."""
    store = open_store(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        store.migrate()
        with store.dialect.hot_path.session() as s, pytest.raises(TypeError, match="StagedOutcomes"):  # type: ignore[attr-defined]
            store.dialect.hot_path.write_outcomes(s, "node-a", StagedOutcomes([]), expired_only=False)  # type: ignore[attr-defined]
    finally:
        store.close()


def test_a_write_applies_its_own_batch_when_another_was_staged_since(tmp_path: Path) -> None:
    """The connection's table holds one batch, the last staged: an earlier one written
    after it is put back first, each run's outcome its own."""
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


def test_a_write_after_the_store_was_closed_and_opened_again_applies_its_batch(tmp_path: Path) -> None:
    """Closing the store between the staging and the write (another thread's ``close``)
    leaves the next write a new connection, its table empty: the batch goes in again."""
    store = open_store(f"sqlite:///{tmp_path / 'closed.db'}")
    try:
        claims = three_claimed(store)
        staged = store.dialect.hot_path.stage_outcomes(  # type: ignore[attr-defined]
            [outcome_of(c, ExecutionStatus.COMPLETED, store.now()) for c in claims]
        )
        store.dialect.close()  # type: ignore[attr-defined]
        with store.dialect.hot_path.session() as s:  # type: ignore[attr-defined]
            assert store.dialect.hot_path.write_outcomes(s, "node-a", staged, expired_only=False) == [True] * 3  # type: ignore[attr-defined]
        assert all(store.get_task(c.task.id).status is Status.COMPLETED for c in claims)  # type: ignore[union-attr]
    finally:
        store.close()


def test_a_refill_rolled_back_leaves_the_table_saying_which_batch_it_holds(tmp_path: Path) -> None:
    """A write that put its batch in the table and then failed rolls the table back to
    the batch it held before: a later write of either batch writes that batch's outcomes."""
    store = open_store(f"sqlite:///{tmp_path / 'rolled.db'}")
    try:
        claims = three_claimed(store)
        hot = store.dialect.hot_path  # type: ignore[attr-defined]
        first = hot.stage_outcomes([outcome_of(claims[0], ExecutionStatus.FAILED, store.now())])
        second = hot.stage_outcomes([outcome_of(claims[0], ExecutionStatus.COMPLETED, store.now())])
        with pytest.raises(RuntimeError, match="after the refill"), hot.session() as s:
            hot.write_outcomes(s, "node-a", first, expired_only=True)  # refilled; nothing applies (lease live)
            raise RuntimeError("after the refill")
        with hot.session() as s:
            assert hot.write_outcomes(s, "node-a", first, expired_only=False) == [True]
        [execution] = store.list_executions(task_id=claims[0].task.id)
        assert execution.status is ExecutionStatus.FAILED  # first's outcome, not second's
        with hot.session() as s:
            assert hot.write_outcomes(s, "node-a", second, expired_only=False) == [False]  # its fence is spent
    finally:
        store.close()


def test_a_scratch_transaction_holds_no_other_process_up(dialect: SQLiteDialect) -> None:
    """While a connection fills its outcome table, another process's write starts at
    once (busy timeout 0: it would fail, not wait, if the file were locked)."""
    other = sqlite3.connect(dialect.path, isolation_level=None, timeout=0)
    try:
        with dialect.scratch() as s:
            s.execute("clear_outcome_batch", {})
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
    finally:
        other.close()


def test_staging_waits_for_no_write_of_this_process(tmp_path: Path) -> None:
    """Another thread of this process inside a write transaction (holding the dialect's
    own lock as well as the file's) does not hold up a batch being staged."""
    store = open_store(f"sqlite:///{tmp_path / 'threads.db'}")
    try:
        claims = three_claimed(store)
        hot = store.dialect.hot_path  # type: ignore[attr-defined]
        inside, leave = threading.Event(), threading.Event()

        def writer() -> None:
            with store.dialect.transaction():  # type: ignore[attr-defined]
                inside.set()
                leave.wait(10)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            assert inside.wait(10)
            staged = hot.stage_outcomes([outcome_of(c, ExecutionStatus.COMPLETED, store.now()) for c in claims])
            assert thread.is_alive()  # staged while the other thread still held the write lock
        finally:
            leave.set()
            thread.join(10)
        with hot.session() as s:
            assert hot.write_outcomes(s, "node-a", staged, expired_only=False) == [True] * 3
    finally:
        store.close()
