"""SQLite's write lock between processes: a node waits for another process's write in
short steps of its own (tickwork/store/sqlite.py), never longer than the busy timeout,
and leaves the connection's busy timeout as it found it. The other process is a second
connection to the file, which takes the same file lock a process would."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from tickwork.store import sqlite as sqlite_store
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
