"""The embedded SQLite dialect: one file, WAL, one connection per thread.

Every read-then-write runs in ``BEGIN IMMEDIATE`` so the write lock is taken before
the read: two processes can never both read the same PENDING row and both claim it.
The store's clock is the host clock (every process sharing the file is on this host).
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from tickwork.clock import utcnow
from tickwork.codec import decode_json_text, dumps
from tickwork.errors import StoreError
from tickwork.store import queries
from tickwork.store.dialect import Election, HotPath, Row, iter_statements
from tickwork.store.hot import RowByRow

BUSY_TIMEOUT_S = 30.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")


# While another process holds the write lock, ask again this often (seconds), then less
# often up to the cap: SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20, 25 ms…, so
# a process that asks while the other writes waits far longer than the write takes, and
# one writing in a tight loop keeps the file to itself.
_LOCK_RETRY_S = 0.0001
_LOCK_RETRY_CAP_S = 0.001


def _begin_immediate(conn: sqlite3.Connection) -> None:
    """BEGIN IMMEDIATE, waiting for another process's write to end in short steps of our
    own rather than SQLite's long ones, for as long as the busy timeout."""
    conn.execute("PRAGMA busy_timeout=0")
    try:
        deadline, pause = time.monotonic() + BUSY_TIMEOUT_S, _LOCK_RETRY_S
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(2 * pause, _LOCK_RETRY_CAP_S)
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")


class _Session:
    def __init__(self, conn: sqlite3.Connection, texts: Mapping[str, str]) -> None:
        self._conn = conn
        self._texts = texts

    def fetch_all(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        return self._conn.execute(self._texts[query], params).fetchall()

    def fetch_one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        rows = self._conn.execute(self._texts[query], params).fetchall()
        return rows[0] if rows else None

    def fetch_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[list[Row]]:
        # In-process: a loop costs no round trips.
        text = self._texts[query]
        return [self._conn.execute(text, p).fetchall() for p in params]

    def execute(self, query: str, params: Mapping[str, Any]) -> int:
        return self._conn.execute(self._texts[query], params).rowcount

    def insert_rows(self, query: str, rows: Sequence[Mapping[str, Any]]) -> int:
        return self._conn.executemany(self._texts[query], rows).rowcount

    def copy_rows(self, query: str, rows: Iterable[Sequence[Any]]) -> None:
        self._conn.executemany(self._texts[query], rows)


class SQLiteDialect:
    notifies = False
    strategies: tuple[str, ...] = ("optimistic",)

    def __init__(self, path: str, clock: Callable[[], datetime] = utcnow) -> None:
        if path == ":memory:":
            raise StoreError("url='sqlite:///:memory:': workers and clients need a shared file")
        self.path = path
        self.clock = clock
        self.texts = queries.load(
            "queries.sql", "retention.sql", "edits.sql", "insights.sql", "queues.sql", "limits.sql", "sqlite.sql"
        )
        # One statement per row inside one write transaction: in-process statements cost
        # no round trip, and the file lock taken at BEGIN makes read-then-write safe.
        self.hot_path: HotPath = RowByRow(self, self.scratch)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            parent = Path(self.path).parent
            if not parent.exists():
                raise StoreError(f"url='sqlite:///{self.path}': directory {str(parent)!r} does not exist")
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            self._enable_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(self.texts["create_outcome_batch"])  # this connection's own
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @staticmethod
    def _enable_wal(conn: sqlite3.Connection) -> None:
        """WAL is a property of the file, set once. Setting it needs the file to itself and
        SQLite answers "locked" at once, without its busy handler, while another connection
        opens the new file: retry within the busy timeout."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_Session]:
        # Threads of one process queue on a Python lock: SQLite's own busy handler
        # sleeps in growing steps (up to 100 ms) while another connection writes, which
        # would serialise this process's threads at a fraction of the file's speed.
        with self._write_lock, self._within(_begin_immediate) as s:
            yield s

    single = transaction  # one statement or several: the file lock is taken either way

    @contextlib.contextmanager
    def scratch(self) -> Iterator[_Session]:
        """A transaction of this thread's connection for its TEMP tables alone (the
        outcome batch): a deferred BEGIN that touches no table of the file takes none of
        its locks, so it waits for no other process's write, nor holds one up."""
        with self._within(lambda conn: conn.execute("BEGIN")) as s:
            yield s

    @contextlib.contextmanager
    def _within(self, begin: Callable[[sqlite3.Connection], object]) -> Iterator[_Session]:
        """A transaction of this thread's connection, opened by ``begin``."""
        conn = self._conn()
        begin(conn)
        try:
            yield _Session(conn, self.texts)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # (a failed COMMIT too: the connection must not stay in it)
                conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def reader(self) -> Iterator[_Session]:
        yield _Session(self._conn(), self.texts)

    single_read = reader  # a read takes no lock of the file's writers

    def migrate(self) -> int:
        migrations = sorted(
            (int(m.group(1)), entry.name)
            for entry in resources.files("tickwork.store").joinpath("migrations/sqlite").iterdir()
            if (m := _MIGRATION.match(entry.name))
        )
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS tickwork_schema (version INTEGER NOT NULL)")
            row = conn.execute("SELECT MAX(version) FROM tickwork_schema").fetchone()
            current = row[0] or 0
            latest = migrations[-1][0] if migrations else 0
            if current > latest:
                raise StoreError(
                    f"schema version {current} is newer than this tickwork knows ({latest}): upgrade tickwork"
                )
            for number, name in migrations:
                if number <= current:
                    continue
                script = resources.files("tickwork.store").joinpath(f"migrations/sqlite/{name}").read_text("utf-8")
                for statement in iter_statements(script):
                    conn.execute(statement)
                conn.execute("INSERT INTO tickwork_schema (version) VALUES (?)", (number,))
                current = number
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return current

    def now(self) -> datetime:
        return self.clock()

    approximate_now = now

    def encode_time(self, value: datetime | None) -> int | None:
        if value is None:
            return None
        return (value - _EPOCH) // _MICROSECOND

    def decode_time(self, value: Any) -> datetime | None:
        if value is None:
            return None
        # a timedelta times an int: less than half the cost of timedelta(microseconds=...)
        return _EPOCH + _MICROSECOND * (value if type(value) is int else int(value))

    def encode_json(self, value: Any) -> str:
        return dumps(value)

    def decode_json(self, value: Any) -> Any:
        return decode_json_text(value) if type(value) is str else json.loads(value)

    def encode_names(self, names: Sequence[str]) -> str:
        return json.dumps(list(names))

    def encode_ids(self, ids: Sequence[int]) -> str:
        return json.dumps([int(i) for i in ids])

    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError)

    def listen(self, on_notify: Callable[[str], None], stop: threading.Event, elect: Election | None = None) -> None:
        """No notifications on an embedded file: nodes find work by their timed polls,
        and each watches the due times itself (no keeper)."""

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()
