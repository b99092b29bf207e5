"""Stored rows to the model's values (the reverse of ``encoding``).

A row this code cannot read (written by another program or another version of
tickwork) raises ``UndecodableRow``, which names the table, the column and the row.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

from tickwork import frozen
from tickwork.errors import StoreError
from tickwork.model import (
    Claim,
    ErrorInfo,
    Execution,
    ExecutionStatus,
    Kind,
    Misfire,
    Node,
    OnLost,
    Overlap,
    Status,
    StuckRun,
    Task,
    TaskHeader,
)
from tickwork.store.dialect import Dialect, Row

E = TypeVar("E")

# Stored enum values to members: a dict lookup per field instead of an Enum call, on the
# path that decodes every claimed row.
_KINDS = {m.value: m for m in Kind}
_STATUSES = {m.value: m for m in Status}
_MISFIRES = {m.value: m for m in Misfire}
_EXECUTION_STATUSES = {m.value: m for m in ExecutionStatus}
_OVERLAPS = {m.value: m for m in Overlap}
_ON_LOST = {m.value: m for m in OnLost}

SHOWN = 40
"""Characters of an undecodable value an error shows, at most."""
REASON = 160
"""Characters of the decoder's own words an error shows, at most."""
TASK_DATA = frozenset({"args", "kwargs", "result", "error_message", "error_traceback", "note"})
"""Columns that hold what tasks were given or gave back: never quoted in an error."""


TASK_COLUMNS = (
    "id", "name", "args", "kwargs", "key", "kind", "cron", "timezone", "interval_seconds", "scheduled_at",
    "next_run_at", "status", "misfire", "misfire_grace", "jitter", "timeout", "max_retries", "retry_backoff",
    "priority", "version", "lease_owner", "lease_expires_at", "cancel_requested", "triggered", "attempt",
    "run_count", "last_status", "created_at", "updated_at", "max_catchup", "overlap", "last_decision",
    "parent_id", "on_lost", "cancel_run_only", "max_runtime", "until_at", "max_runs", "origin", "declared_at",
    "removed_at", "revision", "replan_at", "replan_run_at", "queue", "lock", "max_running", "rate_limit",
    "max_lost", "lost_runs",
)  # fmt: skip
"""The columns ``Decoder._task`` reads, in Task's field order (all but ``existed``): what
a claim decoded by position takes from its row (claim_rows.py; tests/test_claim_rows.py
holds the two to the same order)."""
ENUM_COLUMNS: dict[str, Mapping[str, Any]] = {
    "kind": _KINDS, "status": _STATUSES, "misfire": _MISFIRES, "last_status": _EXECUTION_STATUSES,
    "overlap": _OVERLAPS, "on_lost": _ON_LOST,
}  # fmt: skip
"""The columns that hold an enum's stored word, and its members by word."""


class UndecodableRow(StoreError, ValueError):
    """A stored row this code cannot read: a value written by another program, or by a
    version of tickwork that knows a value this one does not."""

    def __init__(self, table: str, column: str | None, row_id: Any, reason: str) -> None:
        self.table, self.column, self.row_id, self.reason = table, column, row_id, reason
        where = f"{table}.{column}" if column else table
        super().__init__(f"{where} of row id={row_id}: cannot be decoded: {reason}")


class Decoder:
    """Decodes rows with one dialect's value decoders."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect  # called as d.decode_x(...): faster than a stored bound method

    def time(self, value: Any) -> datetime:
        decoded = self.dialect.decode_time(value)
        if decoded is None:
            raise ValueError("unexpected NULL time")
        return decoded

    def task(self, r: Row) -> Task:
        try:
            return self._task(r)
        except Exception as exc:
            raise undecodable("tickwork_tasks", r, self._task, exc) from exc

    def claim(self, r: Row) -> Claim:
        """A task row with its run's ``execution_id`` and ``execution_scheduled_for``."""
        try:
            return Claim(self._task(r), int(r["execution_id"]), self.time(r["execution_scheduled_for"]))
        except Exception as exc:
            raise self._claim_error(r, exc) from exc

    def _claim_error(self, r: Row, exc: Exception) -> UndecodableRow:
        try:
            self._task(r)
        except Exception:
            return undecodable("tickwork_tasks", r, self._task, exc)
        return undecodable("tickwork_executions", r, self._claimed_run, exc, id_column="execution_id")

    def execution(self, r: Row) -> Execution:
        try:
            return self._execution(r)
        except Exception as exc:
            raise undecodable("tickwork_executions", r, self._execution, exc) from exc

    def node(self, r: Row) -> Node:
        try:
            return self._node(r)
        except Exception as exc:
            raise undecodable("tickwork_nodes", r, self._node, exc) from exc

    def _node(self, r: Row) -> Node:
        return Node(
            id=r["id"],
            host=r["host"],
            pid=int(r["pid"]),
            started_at=self.time(r["started_at"]),
            heartbeat_at=self.time(r["heartbeat_at"]),
            capacity=int(r["capacity"]),
            running=int(r["running"]),
            stuck=self._stuck(r["stuck"]),
        )

    def _stuck(self, text: str | None) -> tuple[StuckRun, ...]:
        if not text:
            return ()
        runs = json.loads(text)
        return tuple(
            StuckRun(int(s["task_id"]), int(s["execution_id"]), str(s["task_name"]), str(s["reason"]),
                     datetime.fromisoformat(s["since"]))
            for s in runs
        )  # fmt: skip

    def _claimed_run(self, r: Row) -> None:
        int(r["execution_id"])
        self.time(r["execution_scheduled_for"])

    def _task(self, r: Row) -> Task:
        d = self.dialect
        time = self.time
        optional_time = d.decode_time
        # Positional, in Task's field order (tests/test_task_decoding.py pins it).
        return build_task(
            int(r["id"]),
            r["name"],
            d.decode_json(r["args"]),
            d.decode_json(r["kwargs"]),
            r["key"],
            _member(_KINDS, r["kind"]),
            r["cron"],
            r["timezone"],
            _optional_float(r["interval_seconds"]),
            time(r["scheduled_at"]),
            time(r["next_run_at"]),
            _member(_STATUSES, r["status"]),
            _member(_MISFIRES, r["misfire"]),
            float(r["misfire_grace"]),
            float(r["jitter"]),
            _optional_float(r["timeout"]),
            int(r["max_retries"]),
            float(r["retry_backoff"]),
            int(r["priority"]),
            int(r["version"]),
            r["lease_owner"],
            optional_time(r["lease_expires_at"]),
            bool(r["cancel_requested"]),
            bool(r["triggered"]),
            int(r["attempt"]),
            int(r["run_count"]),
            _member(_EXECUTION_STATUSES, r["last_status"]) if r["last_status"] else None,
            time(r["created_at"]),
            time(r["updated_at"]),
            r["max_catchup"],
            _member(_OVERLAPS, r["overlap"]),
            r["last_decision"],
            r["parent_id"],
            _member(_ON_LOST, r["on_lost"]),
            bool(r["cancel_run_only"]),
            _optional_float(r["max_runtime"]),
            optional_time(r["until_at"]),
            None if r["max_runs"] is None else int(r["max_runs"]),
            r["origin"],
            optional_time(r["declared_at"]),
            optional_time(r["removed_at"]),
            int(r["revision"]),
            optional_time(r["replan_at"]),
            optional_time(r["replan_run_at"]),
            str(r["queue"]),
            r["lock"],
            None if r["max_running"] is None else int(r["max_running"]),
            r["rate_limit"],
            int(r["max_lost"]),
            int(r["lost_runs"]),
            False,  # existed: only schedule() says so
        )

    def _execution(self, r: Row) -> Execution:
        d = self.dialect
        error = None
        if r["error_type"] is not None:
            error = ErrorInfo(r["error_type"], r["error_message"] or "", r["error_traceback"] or "")
        return Execution(
            id=int(r["id"]),
            task_id=int(r["task_id"]),
            attempt=int(r["attempt"]),
            scheduled_for=self.time(r["scheduled_for"]),
            started_at=d.decode_time(r["started_at"]),
            finished_at=d.decode_time(r["finished_at"]),
            status=_member(_EXECUTION_STATUSES, r["status"]),
            node=r["node"],
            fence=r["fence"],
            error=error,
            result=None if r["result"] is None else d.decode_json(r["result"]),
            note=r["note"],
            skipped=r["skipped_count"],
            skipped_last=d.decode_time(r["skipped_last"]),
        )


build_task = frozen.constructor(Task)
"""``Task(...)``, by position or by name, for the paths that make a Task per row
(tickwork/frozen.py)."""


def header(r: Row) -> TaskHeader:
    return TaskHeader(
        int(r["id"]), None if r["name"] is None else str(r["name"]), None if r["status"] is None else str(r["status"])
    )


def undecodable(
    table: str, r: Row, decode: Callable[[Row], object], exc: Exception, *, id_column: str = "id"
) -> UndecodableRow:
    """Why ``decode(r)`` failed, naming the column: found by decoding the row once more
    through a mapping that remembers the column read last (a decoder reads each
    column just before it decodes it). Only ever on this slow path."""
    if isinstance(exc, UndecodableRow):
        return exc
    watched = _Watched(r)
    with contextlib.suppress(Exception):
        decode(watched)
    column = watched.last
    try:
        row_id: Any = r[id_column]
    except Exception:
        row_id = None
    reason = _reason(exc, column)
    if column is not None:
        reason = f"{reason} (stored: {_shown(column, r[column])})"
    return UndecodableRow(table, column, row_id, reason)


class _Watched(Mapping[str, Any]):
    def __init__(self, row: Row) -> None:
        self._row = row
        self.last: str | None = None

    def __getitem__(self, key: str) -> Any:
        self.last = key
        return self._row[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._row.keys())

    def __len__(self) -> int:
        return len(self._row.keys())


def _reason(exc: Exception, column: str | None) -> str:
    """What went wrong, in words that never quote task data."""
    if column in TASK_DATA:
        if isinstance(exc, json.JSONDecodeError):
            return f"JSONDecodeError: {exc.msg} at character {exc.pos}"  # says where, not what
        return type(exc).__name__
    text = _clip(" ".join(str(exc).split()), REASON)
    if not text:
        return type(exc).__name__
    return text if type(exc) is ValueError else f"{type(exc).__name__}: {text}"


def _shown(column: str, value: Any) -> str:
    if value is None:
        return "NULL"
    if column in TASK_DATA:
        return f"{len(str(value))} characters, not shown"
    return _clip(repr(value) if isinstance(value, str | bytes) else str(value))


def _clip(text: str, limit: int = SHOWN) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _member(members: dict[str, E], value: str) -> E:
    try:
        return members[value]
    except KeyError:
        raise ValueError(f"unknown stored value {_clip(repr(value))}") from None


def _optional_float(value: Any) -> float | None:
    """SQLite hands back a REAL that holds a whole number as an int."""
    return None if value is None else float(value)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def stored_converters(d: Dialect) -> list[tuple[int, Callable[[Any], Any]]]:
    """``Decoder._task``'s conversion of each column that it converts, by the column's
    place in TASK_COLUMNS (the others are taken as they are): for a claimed row read by
    position as a driver hands it over unconverted (SQLite's: times as integer
    microseconds, JSON as text, booleans as 0/1; claim_rows.StoredLayout). Kept in step
    with ``_task`` by tests/test_sqlite_claim_rows.py, which decodes rows both ways."""

    def time(value: Any) -> datetime:
        decoded = d.decode_time(value)
        if decoded is None:
            raise ValueError("unexpected NULL time")
        return decoded

    def member(members: dict[str, Any]) -> Callable[[Any], Any]:
        return lambda value: _member(members, value)

    def last_status(value: Any) -> ExecutionStatus | None:
        return _member(_EXECUTION_STATUSES, value) if value else None

    optional_time = d.decode_time
    by_column: dict[str, Callable[[Any], Any]] = {
        "id": int, "args": d.decode_json, "kwargs": d.decode_json, "kind": member(_KINDS),
        "interval_seconds": _optional_float, "scheduled_at": time, "next_run_at": time,
        "status": member(_STATUSES), "misfire": member(_MISFIRES), "misfire_grace": float, "jitter": float,
        "timeout": _optional_float, "max_retries": int, "retry_backoff": float, "priority": int, "version": int,
        "lease_expires_at": optional_time, "cancel_requested": bool, "triggered": bool, "attempt": int,
        "run_count": int, "last_status": last_status, "created_at": time, "updated_at": time,
        "overlap": member(_OVERLAPS), "on_lost": member(_ON_LOST), "cancel_run_only": bool,
        "max_runtime": _optional_float, "until_at": optional_time, "max_runs": _optional_int,
        "declared_at": optional_time, "removed_at": optional_time, "revision": int, "replan_at": optional_time,
        "replan_run_at": optional_time, "queue": str, "max_running": _optional_int, "max_lost": int,
        "lost_runs": int,
    }  # fmt: skip
    return [(i, by_column[column]) for i, column in enumerate(TASK_COLUMNS) if column in by_column]
