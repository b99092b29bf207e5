"""The two ways a dialect runs the hot path (``dialect.HotPath``): claims'
compare-and-set, lease renewals and the outcomes of ended runs.

``SetBased`` (PostgreSQL) writes a whole batch in one statement that commits itself:
one parse, one plan, one round trip, whatever the batch's size. ``RowByRow`` (SQLite)
writes inside one write transaction, which holds the file's write lock, so no other
process writes between a read and the write after it: claims and outcomes as two
statements per batch (each statement releases the GIL, and with a statement per row
the lock waited at each for the process's other threads), renewals (a few a heartbeat)
one per row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from tickwork.model import Outcome, Renewal
from tickwork.store import encoding
from tickwork.store.claim_rows import ClaimRow, Layouts, StoredLayout
from tickwork.store.dialect import Dialect, Row, Session, StagedOutcomes, unique_violation


class SetBased:
    """Set-based statements over arrays or a JSON batch (``claim_cas_batch``,
    ``renew_batch``, ``write_outcomes_batch``): the dialect's query file must have them."""

    def __init__(self, dialect: Dialect) -> None:
        self._d = dialect

    def session(self) -> contextlib.AbstractContextManager[Session]:
        # Each statement is atomic by itself: the optimistic read before a
        # compare-and-set needs no transaction either (the write re-checks each version).
        return self._d.single()

    def compare_and_set(self, s: Session, candidates: Sequence[Row], params: Mapping[str, Any]) -> list[Row]:
        ids = [int(c["id"]) for c in candidates]
        versions = [int(c["version"]) for c in candidates]
        return s.fetch_all("claim_cas_batch", {**params, "ids": ids, "versions": versions})

    def renew(self, s: Session, node: str, runs: Sequence[tuple[int, int]], lease: float) -> list[Renewal]:
        params = {"ids": [r[0] for r in runs], "fences": [r[1] for r in runs], "node": node, "lease": lease}
        return [
            Renewal(int(r["id"]), int(r["version"]), bool(r["cancel_requested"]), bool(r["cancel_run_only"]))
            for r in s.fetch_all("renew_batch", params)
        ]

    def stage_outcomes(self, outcomes: Sequence[Outcome]) -> StagedOutcomes:
        """Each outcome as JSON, its times as whole microseconds; one with a time those
        cannot carry exactly (before 1684 or after 2255: encoding.py) with its times as
        ISO text, for a statement of its own."""
        rows, far = [], []
        for o in outcomes:
            row = encoding.outcome_json(o)
            if row is not None:
                rows.append(row)
            else:
                far.append(encoding.outcome_text_json(o))
        return _JsonBatches(outcomes, rows, far)

    def write_outcomes(
        self, s: Session, node: str, staged: StagedOutcomes, *, expired_only: bool, fresh: bool = False
    ) -> list[bool]:
        """The batch in one statement (and its outcomes with far times in a second).
        ``fresh``: first as plain inserts of the execution rows (``write_fresh_outcomes``);
        if one is there after all, that statement changed nothing and the batch goes again
        as ``write_outcomes_batch``."""
        if not isinstance(staged, _JsonBatches):
            raise TypeError(f"not a batch this hot path staged: {type(staged).__name__}")
        outcomes = staged.outcomes
        written: set[tuple[int, int, int]] = set()
        for query, batch in (("write_outcomes_batch", staged.rows), ("write_outcomes_text", staged.far)):
            if batch:
                params = {"node": node, "expired_only": expired_only, "batch": "[" + ",".join(batch) + "]"}
                fast = "write_fresh_outcomes" if fresh and query == "write_outcomes_batch" else None
                written.update(
                    (int(r["id"]), int(r["fence"]), int(r["execution_id"])) for r in _written(s, query, fast, params)
                )
        return [(o.task_id, o.fence, o.execution_id) in written for o in outcomes]


def _written(s: Session, query: str, fast: str | None, params: Mapping[str, Any]) -> list[Row]:
    """``query``'s rows, or ``fast``'s where it has one and no row it inserts is there
    already. Only for a session whose statements commit themselves (``SetBased``): the
    one refused changed nothing, and left no transaction to abort. (A refusal before the
    statement's first success on a connection leaves the server, until that connection
    closes, a prepared statement psycopg forgot: as rare as the refusals.)"""
    if fast is not None:
        try:
            return s.fetch_all(fast, params)
        except Exception as exc:
            if not unique_violation(exc):
                raise
    return s.fetch_all(query, params)


class RowByRow:
    """In one write transaction: claims and outcomes as two statements for the batch each
    (sqlite.sql), renewals one statement per row (``renew_lease``)."""

    def __init__(self, dialect: Dialect, scratch: Callable[[], contextlib.AbstractContextManager[Session]]) -> None:
        self._d = dialect
        self._layouts = Layouts(lambda names: StoredLayout(names, dialect))
        self._scratch = scratch
        """A transaction of this thread's connection over its TEMP tables alone, which
        takes no lock of the file's (``SQLiteDialect.scratch``)."""
        self._tokens = itertools.count(1)
        """Each staged batch's token, unique among this store's (outcome_batch_token)."""

    def session(self) -> contextlib.AbstractContextManager[Session]:
        return self._d.transaction()

    def compare_and_set(self, s: Session, candidates: Sequence[Row], params: Mapping[str, Any]) -> list[Row]:
        """Two statements for the whole batch (``claim_batch``, ``log_claimed_runs``): one
        per row cost a claim 2.4 times as much."""
        if not candidates:
            return []
        pairs = [[int(c["id"]), int(c["version"])] for c in candidates]
        rows = s.fetch_all("claim_batch", {**params, "candidates": json.dumps(pairs)})
        if not rows:  # another node won them all
            return []
        logged = {
            int(r["task_id"]): (r["id"], r["scheduled_for"])
            for r in s.fetch_all("log_claimed_runs", {**params, "ids": json.dumps([row["id"] for row in rows])})
        }
        # Read by position (claim_rows.StoredLayout), the run's two columns after the task's.
        layout = self._layouts.named((*rows[0].keys(), "execution_id", "execution_scheduled_for"))
        return [ClaimRow(layout, (*row, *logged[int(row["id"])])) for row in rows]

    def renew(self, s: Session, node: str, runs: Sequence[tuple[int, int]], lease: float) -> list[Renewal]:
        d = self._d
        until = d.encode_time(d.approximate_now() + timedelta(seconds=lease))
        params = [
            {"id": task_id, "fence": fence, "node": node, "lease": lease, "lease_until": until}
            for task_id, fence in runs
        ]
        results = s.fetch_many("renew_lease", params)
        return [
            Renewal(task_id, fence, bool(rows[0]["cancel_requested"]), bool(rows[0]["cancel_run_only"]))
            for (task_id, fence), rows in zip(runs, results, strict=True)
            if rows
        ]

    def stage_outcomes(self, outcomes: Sequence[Outcome]) -> StagedOutcomes:
        """The batch into this thread's connection's own outcome table (one executemany),
        before the write transaction: that table is the connection's alone (TEMP), so
        filling it takes no lock of the file's, and the other processes do not wait
        while it is encoded and filled (5 to 8 µs an outcome). One run, one outcome: a
        repeat of it is not written twice."""
        d, token = self._d, next(self._tokens)
        positions: dict[tuple[int, int], int] = {}
        rows: list[tuple[Any, ...]] = []
        for o in outcomes:
            key = (o.task_id, o.fence)
            if key not in positions:
                positions[key] = len(rows)
                rows.append(encoding.outcome_row(d, len(rows), o, token))
        staged = _OutcomeTable(outcomes, positions, rows, token)
        with self._scratch() as s:
            _fill(s, staged)
        return staged

    def write_outcomes(
        self, s: Session, node: str, staged: StagedOutcomes, *, expired_only: bool, fresh: bool = False
    ) -> list[bool]:
        """Two statements for the staged batch: a statement per row released the GIL and
        the file's write lock waited, at each, for the process's other threads. The table
        is asked which batch it holds (its token): one it does not hold (staged on another
        thread's connection, another staged since, a connection opened anew, a refill
        rolled back) is put in it now. (``fresh`` changes nothing: SQLite writes a run's
        execution row at its claim.)"""
        if not isinstance(staged, _OutcomeTable):
            raise TypeError(f"not a batch this hot path staged: {type(staged).__name__}")
        held = s.fetch_one("outcome_batch_token", {})
        if held is None or held["batch"] != staged.token:
            _fill(s, staged)
        d, positions = self._d, staged.positions
        common = {"now": d.encode_time(d.approximate_now()), "node": node, "expired_only": expired_only}
        written = s.fetch_all("write_outcomes_batch", {**common, "positions": json.dumps(list(range(len(positions))))})
        applied = {(int(r["id"]), int(r["version"])) for r in written}
        if applied:
            s.execute("finish_executions_batch", {"positions": json.dumps([positions[key] for key in applied])})
        answered: set[tuple[int, int]] = set()
        result = []
        for o in staged.outcomes:
            key = (o.task_id, o.fence)
            result.append(key in applied and key not in answered)
            answered.add(key)
        return result


@dataclasses.dataclass(frozen=True)
class _JsonBatches(StagedOutcomes):
    rows: list[str]
    """The outcomes whose times fit whole microseconds, as JSON objects."""
    far: list[str]
    """The others, their times as ISO text."""


@dataclasses.dataclass(frozen=True)
class _OutcomeTable(StagedOutcomes):
    positions: dict[tuple[int, int], int]
    """Each run's (task id, fence) and its row in the connection's outcome table."""
    rows: list[tuple[Any, ...]]
    """The table's rows (encoding.outcome_row)."""
    token: int
    """The batch's token, in each of its rows."""


def _fill(s: Session, staged: _OutcomeTable) -> None:
    """Put the batch in the session connection's outcome table, in place of what it held."""
    s.execute("clear_outcome_batch", {})
    s.copy_rows("add_outcome_batch", staged.rows)
