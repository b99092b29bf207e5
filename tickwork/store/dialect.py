"""What the store's operations ask of a SQL database: a ``Dialect`` and the ``HotPath``
it supplies.

The dialect owns connections, transactions, value encoding and the query texts. Its
hot path is how it runs the operations a node calls thousands of times a second (the
compare-and-set of a claim, lease renewals, writing ended runs' outcomes): PostgreSQL as one
set-based statement each, SQLite as one statement per row inside a write transaction
(``tickwork.store.hot``). Everything else is written once, in ``tickwork.store.sql``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from tickwork.model import Outcome, Renewal

Row = Mapping[str, Any]

_UNIQUE_VIOLATION = "23505"
"""PostgreSQL's SQLSTATE for a duplicate key."""


class Session(Protocol):
    """One connection inside one transaction (or autocommit, for reads)."""

    def fetch_all(self, query: str, params: Mapping[str, Any]) -> list[Row]: ...

    def fetch_one(self, query: str, params: Mapping[str, Any]) -> Row | None: ...

    def fetch_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[list[Row]]:
        """Run ``query`` once per parameter set, in one round trip where the driver can."""
        ...

    def execute(self, query: str, params: Mapping[str, Any]) -> int: ...

    def insert_rows(self, query: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert ``rows`` (JSON-ready values keyed by column) with ``query``, the cheapest
        way the store takes many: PostgreSQL as one statement over one JSON array (the
        server unpacks it faster than a driver sends a statement per row), SQLite one
        statement per row (in-process: a loop costs no round trips). Returns how many
        rows went in (a conflict's ``DO NOTHING`` inserts none)."""
        ...

    def copy_rows(self, query: str, rows: Iterable[Sequence[Any]]) -> None:
        """Write ``rows`` (values in ``query``'s column order, as the store's own types)
        that cannot conflict with any stored row: PostgreSQL streams them with ``COPY``
        (no statement to plan, and the server parses while the client still encodes),
        SQLite runs ``query`` once per row."""
        ...


@dataclasses.dataclass(frozen=True)
class StagedOutcomes:
    """A batch of outcomes as ``HotPath.stage_outcomes`` made it ready: each hot path
    adds what it made of them, and refuses a batch of another hot path's kind."""

    outcomes: Sequence[Outcome]


class HotPath(Protocol):
    """How a dialect writes claims, renewals and outcomes (db-scheduler's
    "customization" objects are the model). Every write is fenced by id, version and
    lease owner; callers pass runs and outcomes in task id order (every transaction
    locks task rows in id order, so two nodes never wait on each other in a cycle)."""

    def session(self) -> contextlib.AbstractContextManager[Session]:
        """Where a claim, a renewal or a write of outcomes runs: a self-committing statement, or
        a write transaction that makes read-then-write safe."""
        ...

    def compare_and_set(self, s: Session, candidates: Sequence[Row], params: Mapping[str, Any]) -> list[Row]:
        """Claim the ``candidates`` (``id`` and ``version`` read without locks) whose
        version is unchanged, and log their runs: the claimed task rows, each with its
        ``execution_id`` and ``execution_scheduled_for``."""
        ...

    def renew(self, s: Session, node: str, runs: Sequence[tuple[int, int]], lease: float) -> list[Renewal]:
        """Extend the leases of the ``(task_id, fence)`` runs ``node`` still holds."""
        ...

    def stage_outcomes(self, outcomes: Sequence[Outcome]) -> StagedOutcomes:
        """The batch made ready to write, before the write's session opens: what takes no
        lock of the database's is done here (on SQLite the session holds the file's write
        lock, which every other process waits for)."""
        ...

    def write_outcomes(
        self, s: Session, node: str, staged: StagedOutcomes, *, expired_only: bool, fresh: bool = False
    ) -> list[bool]:
        """Write each staged outcome's task state and execution row (the batch this hot
        path's ``stage_outcomes`` made); per outcome, whether its
        fence held (with ``expired_only``, also whether the lease was still expired).
        ``fresh``: the runs' execution rows are most likely not written yet (a node's own
        runs, not a reconciler's), which a dialect may write more cheaply; one that is
        there after all must still be kept as it is, or ended if RUNNING."""
        ...


class Dialect(Protocol):
    hot_path: HotPath
    notifies: bool
    """Has a ``notify`` query and ``listen`` delivers what it sends."""
    strategies: tuple[str, ...]
    """Claim strategies it supports; the first is its default."""

    def transaction(self) -> contextlib.AbstractContextManager[Session]:
        """A write transaction that holds whatever lock makes read-then-write safe."""
        ...

    def single(self) -> contextlib.AbstractContextManager[Session]:
        """For statements each atomic by itself; may commit each one on its own."""
        ...

    def reader(self) -> contextlib.AbstractContextManager[Session]: ...

    def single_read(self) -> contextlib.AbstractContextManager[Session]:
        """For one read statement, which reads one snapshot by itself: no transaction of
        its own where the dialect can spare one (on PostgreSQL, the due-time read's BEGIN
        and COMMIT were two more round trips, each a wake-up of an idle node's poll loop,
        every second)."""
        ...

    def migrate(self) -> int: ...

    def now(self) -> datetime: ...

    def approximate_now(self) -> datetime: ...

    def encode_time(self, value: datetime | None) -> Any: ...

    def decode_time(self, value: Any) -> datetime | None: ...

    def encode_json(self, value: Any) -> Any: ...

    def decode_json(self, value: Any) -> Any: ...

    def encode_names(self, names: Sequence[str]) -> Any: ...

    def encode_ids(self, ids: Sequence[int]) -> Any: ...

    def listen(
        self, on_notify: Callable[[str], None], stop: threading.Event, elect: Election | None = None
    ) -> None: ...

    def is_transient(self, exc: BaseException) -> bool: ...

    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class Election:
    """A node's part in electing its group's keeper: the one node of those claiming the
    same tasks that wakes for each due time (tickwork/node/worker.py). ``on_role`` hears
    True (this node is keeper), False (another is) or None (unknown: the listening
    connection is down, so the node watches due times itself)."""

    group: str
    on_role: Callable[[bool | None], None]


def unique_violation(exc: BaseException) -> bool:
    """Whether ``exc`` is a duplicate key refused by either database. (sqlite3 is not
    imported for it: a process that never loaded it holds none of its errors.)"""
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None and isinstance(exc, sqlite3.IntegrityError):
        return "UNIQUE" in str(exc)
    return getattr(exc, "sqlstate", None) == _UNIQUE_VIOLATION


def notify(dialect: Dialect, s: Session, payload: str) -> None:
    """Announce a change to listening nodes, when the dialect can (at commit)."""
    if dialect.notifies:
        s.execute("notify", {"payload": payload})


def iter_statements(script: str) -> Iterator[str]:
    """Split a migration script into statements on ``;`` at line ends."""
    current: list[str] = []
    for line in script.splitlines():
        current.append(line)
        if line.rstrip().endswith(";"):
            statement = "\n".join(current).strip()
            current = []
            if statement and not _only_comments(statement):
                yield statement
    tail = "\n".join(current).strip()
    if tail and not _only_comments(tail):
        yield tail


def _only_comments(statement: str) -> bool:
    return all(x.strip().startswith("--") or not x.strip() for x in statement.splitlines())
