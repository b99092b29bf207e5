"""The store's domain operations, written once for every SQL database.

A ``Dialect`` owns connections, transactions, value encoding and the query texts; this
module owns what the operations mean (see ``base.Store`` for each contract).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from tickwork.codec import clean_text, json_problem
from tickwork.errors import InvalidInput, QueueFull
from tickwork.model import (
    ErrorInfo,
    Execution,
    ExecutionStatus,
    Kind,
    Misfire,
    Node,
    OnLost,
    Overlap,
    Stats,
    Status,
    Task,
    TaskHeader,
)
from tickwork.store.base import Claim, NewTask, Outcome, Renewal, Skipping

log = logging.getLogger("tickwork.store")

# stats() counts recent runs among this many newest executions, at most.
RECENT_RUNS_WINDOW = 200_000

Row = Mapping[str, Any]
E = TypeVar("E")


class Session(Protocol):
    """One connection inside one transaction (or autocommit, for reads)."""

    def fetch_all(self, query: str, params: Mapping[str, Any]) -> list[Row]: ...

    def fetch_one(self, query: str, params: Mapping[str, Any]) -> Row | None: ...

    def fetch_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[list[Row]]:
        """Run ``query`` once per parameter set, in one round trip where the driver can."""
        ...

    def execute(self, query: str, params: Mapping[str, Any]) -> int: ...


class Dialect(Protocol):
    batched: bool
    """Has single-statement claims and settle_run (data-modifying CTEs)."""
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

    def migrate(self) -> int: ...

    def now(self) -> datetime: ...

    def approximate_now(self) -> datetime: ...

    def encode_time(self, value: datetime | None) -> Any: ...

    def decode_time(self, value: Any) -> datetime | None: ...

    def encode_json(self, value: Any) -> Any: ...

    def decode_json(self, value: Any) -> Any: ...

    def encode_names(self, names: Sequence[str]) -> Any: ...

    def encode_ids(self, ids: Sequence[int]) -> Any: ...

    def listen(self, on_notify: Callable[[str], None], stop: threading.Event) -> None: ...

    def is_transient(self, exc: BaseException) -> bool: ...

    def close(self) -> None: ...


# Stored enum values to members: a dict lookup per field instead of an Enum call, on the
# path that decodes every claimed row.
_KINDS = {m.value: m for m in Kind}
_STATUSES = {m.value: m for m in Status}
_MISFIRES = {m.value: m for m in Misfire}
_EXECUTION_STATUSES = {m.value: m for m in ExecutionStatus}
_OVERLAPS = {m.value: m for m in Overlap}
_ON_LOST = {m.value: m for m in OnLost}


def _member(members: dict[str, E], value: str) -> E:
    try:
        return members[value]
    except KeyError:
        raise ValueError(f"unknown stored value {value!r}") from None


class SQLStore:
    def __init__(self, dialect: Dialect, claim: str | None = None) -> None:
        self.dialect = dialect
        self.claim_strategy = claim or dialect.strategies[0]
        if self.claim_strategy not in dialect.strategies:
            raise InvalidInput("claim", claim, f"this store supports {', '.join(dialect.strategies)}")

    # -- schema and clock ---------------------------------------------------------

    def migrate(self) -> int:
        return self.dialect.migrate()

    def now(self) -> datetime:
        return self.dialect.now()

    def approximate_now(self) -> datetime:
        return self.dialect.approximate_now()

    def close(self) -> None:
        self.dialect.close()

    def listen(self, on_notify: Callable[[str], None], stop: threading.Event) -> None:
        self.dialect.listen(on_notify, stop)

    def is_transient(self, exc: BaseException) -> bool:
        return self.dialect.is_transient(exc)

    def _notify(self, s: Session, payload: str) -> None:
        if self.dialect.notifies:
            s.execute("notify", {"payload": payload})

    # -- scheduling ---------------------------------------------------------------

    def insert_tasks(self, tasks: Sequence[NewTask], *, max_pending: int | None = None) -> list[Task]:
        if not tasks:
            return []
        with self.dialect.transaction() as s:
            due_by = self.dialect.approximate_now()
            inserted, new_due = self._insert(s, tasks, due_by)
            if max_pending is not None and new_due:
                # Counted after the insert, in its transaction: only rows really added
                # (not a key's existing task) count, and a refusal rolls them all back.
                d = self.dialect
                params = {"due_by": d.encode_time(due_by), "limit": max_pending + new_due + 1}
                row = s.fetch_one("due_count", params)
                depth = 0 if row is None else int(row["n"])
                if depth > max_pending:
                    raise QueueFull(max_pending, depth - new_due, new_due)
            return inserted

    def _insert(self, s: Session, tasks: Sequence[NewTask], due_by: datetime | None = None) -> tuple[list[Task], int]:
        """The tasks as stored (a key's live task for a duplicate key), and how many of
        them were inserted now and are due by ``due_by``."""
        d = self.dialect
        now = d.encode_time(d.approximate_now())
        params = [
            {
                "name": new.name,
                "args": d.encode_json(new.args),
                "kwargs": d.encode_json(new.kwargs),
                "key": new.key,
                "kind": new.kind.value,
                "cron": new.cron,
                "timezone": new.timezone,
                "interval": new.interval,
                "scheduled_at": d.encode_time(new.scheduled_at),
                "next_run_at": d.encode_time(new.next_run_at),
                "misfire": new.misfire.value,
                "misfire_grace": new.misfire_grace,
                "jitter": new.jitter,
                "timeout": new.timeout,
                "max_retries": new.max_retries,
                "retry_backoff": new.retry_backoff,
                "priority": new.priority,
                "max_catchup": new.max_catchup,
                "overlap": new.overlap.value,
                "parent_id": new.parent_id,
                "on_lost": new.on_lost.value,
                "max_runtime": new.max_runtime,
                "now": now,
            }
            for new in tasks
        ]
        inserted: list[Task] = []
        new_due = 0
        for new, rows in zip(tasks, s.fetch_many("insert_task", params), strict=True):
            row = rows[0] if rows else s.fetch_one("live_task_by_key", {"key": new.key})
            if row is None:  # the key's holder ended between the conflict and the read
                raise RuntimeError(f"insert of key={new.key!r} conflicted but no live task holds it")
            inserted.append(self._task(row))
            new_due += bool(rows) and due_by is not None and new.next_run_at <= due_by
        self._notify(s, "due")
        return inserted, new_due

    def next_due_at(self, names: Sequence[str]) -> datetime | None:
        with self.dialect.reader() as s:
            row = s.fetch_one("next_due_at", {"names": self.dialect.encode_names(names)})
        return self.dialect.decode_time(row["next_run_at"]) if row else None

    # -- claims and leases --------------------------------------------------------

    def claim(
        self, node: str, names: Sequence[str], limit: int, lease: float, exclude: Sequence[int] = ()
    ) -> list[Claim]:
        if limit <= 0 or not names:
            return []
        d = self.dialect
        claims: list[Claim] = []
        # Batched dialects claim in single self-committing statements (the optimistic read
        # needs no transaction: the compare-and-set re-checks every version).
        with d.single() if d.batched else d.transaction() as s:
            now = d.approximate_now()
            params = {
                "now": d.encode_time(now),
                "node": node,
                "lease": lease,
                "lease_until": d.encode_time(now + timedelta(seconds=lease)),
                "names": d.encode_names(names),
                "exclude": d.encode_ids(exclude),
                "limit": limit,
            }
            if self.claim_strategy == "skip_locked":
                rows = s.fetch_all("claim_skip_locked", params)
            else:
                rows = self._claim_optimistic(s, params, list(exclude))
            for row in rows:
                task = self._decode_claimed(s, row)
                if task is not None:
                    claims.append(Claim(task, int(row["execution_id"]), self._time(row["execution_scheduled_for"])))
        claims.sort(key=lambda c: (c.task.next_run_at, -c.task.priority, c.task.id))
        return claims

    def _claim_optimistic(self, s: Session, params: dict[str, Any], exclude: list[int]) -> list[Row]:
        """Read the due candidates, then compare-and-set them. When some were lost (to
        another node, or skipped as locked by someone) and more may be due, read once
        more without them: a row held elsewhere must not starve the rest of the queue."""
        candidates = s.fetch_all("claim_candidates", params)
        if not candidates:
            return []
        rows = self._compare_and_set(s, candidates, params)
        if len(rows) < len(candidates) == params["limit"]:
            won = {int(r["id"]) for r in rows}
            lost = [int(c["id"]) for c in candidates if int(c["id"]) not in won]
            again = {**params, "limit": params["limit"] - len(rows), "exclude": self.dialect.encode_ids(exclude + lost)}
            if candidates := s.fetch_all("claim_candidates", again):
                rows += self._compare_and_set(s, candidates, again)
        return rows

    def _compare_and_set(self, s: Session, candidates: list[Row], params: dict[str, Any]) -> list[Row]:
        """Claim candidates whose version is unchanged: 0 rows for one means another
        node won it. One statement where the database can, else one per candidate."""
        if self.dialect.batched:
            ids = [int(c["id"]) for c in candidates]
            versions = [int(c["version"]) for c in candidates]
            return s.fetch_all("claim_cas_batch", {**params, "ids": ids, "versions": versions})
        rows: list[Row] = []
        for candidate in candidates:
            row = s.fetch_one("claim_task", {**params, "id": candidate["id"], "version": candidate["version"]})
            if row is None:
                continue
            scheduled_for = row["next_run_at"] if row["triggered"] else row["scheduled_at"]
            execution = s.fetch_one(
                "insert_execution",
                {
                    **params,
                    "task_id": row["id"],
                    "attempt": row["attempt"],
                    "scheduled_for": scheduled_for,
                    "fence": row["version"],
                },
            )
            assert execution is not None
            rows.append({**row, "execution_id": execution["id"], "execution_scheduled_for": scheduled_for})
        return rows

    def _decode_claimed(self, s: Session, row: Row) -> Task | None:
        """A claimed row this code cannot read (written by hand, or by another version)
        is set FAILED in the same transaction: otherwise it would stay first in line and
        fail every claim after it."""
        try:
            return self._task(row)
        except Exception:
            log.exception("task %s cannot be decoded; setting it FAILED", row["id"])
            now = self.dialect.encode_time(self.dialect.approximate_now())
            s.execute("fail_undecodable", {"id": row["id"], "now": now})
            s.execute("fail_undecodable_run", {"execution_id": row["execution_id"], "now": now})
            return None

    def renew(self, node: str, runs: Sequence[tuple[int, int]], lease: float) -> list[Renewal]:
        if not runs:
            return []
        runs = sorted(runs)  # every transaction locks task rows in id order: no deadlocks
        d = self.dialect
        if d.batched:
            with d.single() as s:
                rows = s.fetch_all(
                    "renew_batch",
                    {"ids": [r[0] for r in runs], "fences": [r[1] for r in runs], "node": node, "lease": lease},
                )
            return [
                Renewal(int(r["id"]), int(r["version"]), bool(r["cancel_requested"]), bool(r["cancel_run_only"]))
                for r in rows
            ]
        with d.transaction() as s:
            now = d.approximate_now()
            until = d.encode_time(now + timedelta(seconds=lease))
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

    def finish(self, node: str, outcomes: Sequence[Outcome]) -> list[bool]:
        return self._settle(node, outcomes, reaping=False, expired_only=False)

    def reap(self, lease_owner: str, outcomes: Sequence[Outcome], *, expired_only: bool = True) -> list[bool]:
        return self._settle(lease_owner, outcomes, reaping=True, expired_only=expired_only)

    def _settle(self, node: str, outcomes: Sequence[Outcome], *, reaping: bool, expired_only: bool) -> list[bool]:
        if not outcomes:
            return []
        # Write in task id order (every transaction locks task rows in id order, so two
        # nodes never wait on each other in a cycle); answer in the caller's order.
        order = sorted(range(len(outcomes)), key=lambda i: outcomes[i].task_id)
        applied_sorted = self._settle_sorted(
            node, [outcomes[i] for i in order], reaping=reaping, expired_only=expired_only
        )
        applied = [False] * len(outcomes)
        for position, ok in zip(order, applied_sorted, strict=True):
            applied[position] = ok
        return applied

    def _settle_sorted(
        self, node: str, outcomes: Sequence[Outcome], *, reaping: bool, expired_only: bool
    ) -> list[bool]:
        d = self.dialect
        with d.single() if d.batched else d.transaction() as s:
            common = {"now": d.encode_time(d.approximate_now()), "node": node, "expired_only": expired_only}
            if d.batched:
                batch = d.encode_json([self._settle_row(o) for o in outcomes])
                settled = {int(r["id"]) for r in s.fetch_all("settle_batch", {**common, "batch": batch})}
                applied = [o.task_id in settled for o in outcomes]
            else:
                applied = [self._settle_one(s, o, common) for o in outcomes]
            if reaping and any(applied):
                self._notify(s, "due")  # recovered runs are due again
        return applied

    def _settle_one(self, s: Session, o: Outcome, common: dict[str, Any]) -> bool:
        d = self.dialect
        row = self._settle_row(o)
        params = {
            **common,
            **row,
            "scheduled_at": d.encode_time(o.scheduled_at),
            "next_run_at": d.encode_time(o.next_run_at),
            "finished_at": d.encode_time(o.finished_at),
            "started_at": d.encode_time(o.started_at),
            "skipped_last": d.encode_time(o.skipped_last),
            "result": None if row["result"] is None else d.encode_json(row["result"]),
        }
        if s.fetch_one("settle_task", params) is None:
            return False
        s.execute("finish_execution", params)
        return True

    @staticmethod
    def _settle_row(o: Outcome) -> dict[str, Any]:
        """One outcome as a JSON object. A result that cannot be stored costs that result
        (noted on the execution), never the batch it is written with."""
        result, note = o.result, o.note
        if result is not None and (problem := json_problem(result)) is not None:
            result, note = None, f"{note}; result not stored: {problem}" if note else f"result not stored: {problem}"
        return {
            "task_id": o.task_id,
            "fence": o.fence,
            "execution_id": o.execution_id,
            "status": o.status.value,
            "task_status": o.task_status.value,
            "scheduled_at": o.scheduled_at.isoformat(),
            "next_run_at": o.next_run_at.isoformat(),
            "finished_at": o.finished_at.isoformat(),
            "started_at": o.started_at.isoformat() if o.started_at else None,
            "attempt": o.attempt,
            "triggered": o.triggered,
            "error_type": clean_text(o.error.type) if o.error else None,
            "error_message": clean_text(o.error.message) if o.error else None,
            "error_traceback": clean_text(o.error.traceback) if o.error else None,
            "result": result,
            "note": clean_text(note) if note else None,
            "skipped": o.skipped,
            "skipped_last": o.skipped_last.isoformat() if o.skipped_last else None,
            "decision": clean_text(o.decision) if o.decision else None,
        }

    def release(self, node: str, claims: Sequence[Claim], *, notify: bool = True) -> int:
        if not claims:
            return 0
        claims = sorted(claims, key=lambda c: c.task.id)
        d = self.dialect
        released = 0
        with d.transaction() as s:
            now = d.encode_time(d.approximate_now())
            for c in claims:
                params = {"now": now, "node": node, "task_id": c.task.id, "fence": c.fence}
                if s.fetch_one("release_task", params) is not None:
                    s.execute("delete_execution", {"execution_id": c.execution_id})
                    released += 1
            if released and notify:
                self._notify(s, "due")
        return released

    def claimed_since(self, node: str, since: datetime) -> list[Claim]:
        d = self.dialect
        with d.reader() as s:
            rows = s.fetch_all("claimed_since", {"node": node, "since": d.encode_time(since)})
        return [Claim(self._task(r), int(r["execution_id"]), self._time(r["execution_scheduled_for"])) for r in rows]

    def expired(self, limit: int, exclude: Sequence[int] = ()) -> list[Claim]:
        return self._running_claims("expired_runs", limit, exclude=self.dialect.encode_ids(exclude))

    def overrun(self, limit: int, grace: float) -> list[Claim]:
        return self._running_claims("overrun_runs", limit, grace=grace)

    def _running_claims(self, query: str, limit: int, **extra: Any) -> list[Claim]:
        d = self.dialect
        with d.reader() as s:
            rows = s.fetch_all(query, {"now": d.encode_time(d.approximate_now()), "limit": limit, **extra})
        return [Claim(self._task(r), int(r["execution_id"]), self._time(r["execution_scheduled_for"])) for r in rows]

    # -- reading and managing tasks -----------------------------------------------

    def get_task(self, task_id: int) -> Task | None:
        with self.dialect.reader() as s:
            row = s.fetch_one("get_task", {"id": task_id})
        return self._task(row) if row else None

    def list_tasks(
        self, *, status: Status | None = None, name: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[Task]:
        params = {"status": status.value if status else None, "name": name, "limit": limit, "offset": offset}
        with self.dialect.reader() as s:
            return [self._task(r) for r in s.fetch_all("list_tasks", params)]

    def task_headers(
        self, *, status: str | None = None, name: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[TaskHeader]:
        params = {"status": status, "name": name, "limit": limit, "offset": offset}
        with self.dialect.reader() as s:
            return [_header(r) for r in s.fetch_all("task_headers", params)]

    def task_header(self, task_id: int) -> TaskHeader | None:
        with self.dialect.reader() as s:
            row = s.fetch_one("task_header", {"id": task_id})
        return None if row is None else _header(row)

    def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        d = self.dialect
        with d.transaction() as s:
            s.execute("revoke_session", {"id": _session_key(session_id), "expires_at": d.encode_time(expires_at)})
            s.execute("prune_revoked_sessions", {"now": d.encode_time(d.approximate_now())})

    def session_revoked(self, session_id: str) -> bool:
        with self.dialect.reader() as s:
            return s.fetch_one("session_revoked", {"id": _session_key(session_id)}) is not None

    def list_executions(
        self, *, task_id: int | None = None, status: ExecutionStatus | None = None, limit: int = 100
    ) -> list[Execution]:
        params = {"task_id": task_id, "status": status.value if status else None, "limit": limit}
        with self.dialect.reader() as s:
            return [self._execution(r) for r in s.fetch_all("list_executions", params)]

    def cancel(self, task_id: int, *, run_only: bool = False) -> Task | None:
        # A running node learns of the request at once through "cancel", or at its next heartbeat.
        return self._change("cancel_run" if run_only else "cancel_task", task_id, notify="cancel")

    def pause(self, task_id: int) -> Task | None:
        return self._change("pause_task", task_id)

    def resume(self, task_id: int, skipping: Skipping | None = None) -> Task | None:
        if skipping is None:
            return self._change("resume_task", task_id, notify="due")
        d = self.dialect
        params = {
            "id": task_id,
            "version": skipping.version,
            "now": d.encode_time(d.approximate_now()),
            "scheduled_at": d.encode_time(skipping.next_slot),
            "next_run_at": d.encode_time(skipping.next_run_at),
            "decision": skipping.decision,
            "skipped": skipping.count,
            "skipped_first": d.encode_time(skipping.first),
            "skipped_last": d.encode_time(skipping.last),
        }
        with d.transaction() as s:
            row = s.fetch_one("resume_skipping", params)
            if row is None:
                row = s.fetch_one("get_task", {"id": task_id})
            else:
                s.execute("insert_skipped", params)
                self._notify(s, "due")
        return self._task(row) if row else None

    def backfill(self, task_id: int, start: datetime, end: datetime, runs: Sequence[NewTask]) -> list[Task]:
        d = self.dialect
        with d.transaction() as s:
            s.fetch_one("lock_task", {"id": task_id})
            rows = s.fetch_all("taken_slots", {"id": task_id, "start": d.encode_time(start), "end": d.encode_time(end)})
            taken = {self._time(r["slot"]) for r in rows}
            fresh = [run for run in runs if run.scheduled_at not in taken]
            return self._insert(s, fresh)[0] if fresh else []

    def trigger(self, task_id: int) -> Task | None:
        return self._change("trigger_task", task_id, notify="due")

    def _change(self, query: str, task_id: int, notify: str | None = None) -> Task | None:
        """Apply a guarded state change; if its guard fails return the task as it is."""
        d = self.dialect
        with d.transaction() as s:
            row = s.fetch_one(query, {"id": task_id, "now": d.encode_time(d.approximate_now())})
            if row is None:
                row = s.fetch_one("get_task", {"id": task_id})
            elif notify is not None:
                self._notify(s, notify)
        return self._task(row) if row else None

    # -- nodes ----------------------------------------------------------------------

    def register_node(self, node: Node) -> None:
        d = self.dialect
        with d.transaction() as s:
            s.execute(
                "upsert_node",
                {
                    "id": node.id,
                    "host": node.host,
                    "pid": node.pid,
                    "started_at": d.encode_time(node.started_at),
                    "now": d.encode_time(d.approximate_now()),
                    "capacity": node.capacity,
                    "running": node.running,
                },
            )

    def node_heartbeat(self, node_id: str, running: int) -> None:
        d = self.dialect
        with d.transaction() as s:
            s.execute("node_heartbeat", {"id": node_id, "running": running, "now": d.encode_time(d.approximate_now())})

    def remove_node(self, node_id: str) -> None:
        with self.dialect.transaction() as s:
            s.execute("delete_node", {"id": node_id})

    def prune_nodes(self, silent_for: float) -> int:
        d = self.dialect
        with d.transaction() as s:
            cutoff = d.encode_time(d.approximate_now() - timedelta(seconds=silent_for))
            return s.execute("prune_nodes", {"cutoff": cutoff, "silent_for": silent_for})

    def due_count(self, limit: int) -> int:
        d = self.dialect
        with d.reader() as s:
            row = s.fetch_one("due_count", {"due_by": d.encode_time(d.approximate_now()), "limit": limit})
        return 0 if row is None else int(row["n"])

    def queue_depth(self) -> tuple[int, datetime | None]:
        d = self.dialect
        with d.reader() as s:
            row = s.fetch_one("queue_depth", {"now": d.encode_time(d.approximate_now())})
        if row is None:
            return 0, None
        return int(row["depth"]), d.decode_time(row["oldest"])

    def stats(self) -> Stats:
        d = self.dialect
        now = d.approximate_now()
        params = {
            "minute_ago": d.encode_time(now - timedelta(minutes=1)),
            "hour_ago": d.encode_time(now - timedelta(hours=1)),
            "window": RECENT_RUNS_WINDOW,
        }
        depth, oldest = self.queue_depth()
        with d.reader() as s:
            by_status = {r["status"]: int(r["n"]) for r in s.fetch_all("count_by_status", {})}
            recent = s.fetch_all("recent_runs", params)
            nodes = len(s.fetch_all("list_nodes", {}))
        return Stats(
            depth=depth,
            oldest_age=None if oldest is None else max(0.0, (now - oldest).total_seconds()),
            running=by_status.get("RUNNING", 0),
            nodes=nodes,
            by_status=by_status,
            runs_last_minute={r["status"]: int(r["last_minute"]) for r in recent if int(r["last_minute"])},
            runs_last_hour={r["status"]: int(r["last_hour"]) for r in recent if int(r["last_hour"])},
            window_full=sum(int(r["seen"]) for r in recent) >= RECENT_RUNS_WINDOW,
        )

    def list_nodes(self) -> list[Node]:
        with self.dialect.reader() as s:
            rows = s.fetch_all("list_nodes", {})
        return [
            Node(
                id=r["id"],
                host=r["host"],
                pid=int(r["pid"]),
                started_at=self._time(r["started_at"]),
                heartbeat_at=self._time(r["heartbeat_at"]),
                capacity=int(r["capacity"]),
                running=int(r["running"]),
            )
            for r in rows
        ]

    # -- row decoding -----------------------------------------------------------------

    def _time(self, value: Any) -> datetime:
        decoded = self.dialect.decode_time(value)
        if decoded is None:
            raise ValueError("unexpected NULL time")
        return decoded

    def _task(self, r: Row) -> Task:
        d = self.dialect
        return Task(
            id=int(r["id"]),
            name=r["name"],
            args=d.decode_json(r["args"]),
            kwargs=d.decode_json(r["kwargs"]),
            key=r["key"],
            kind=_member(_KINDS, r["kind"]),
            cron=r["cron"],
            timezone=r["timezone"],
            interval=_optional_float(r["interval_seconds"]),
            scheduled_at=self._time(r["scheduled_at"]),
            next_run_at=self._time(r["next_run_at"]),
            status=_member(_STATUSES, r["status"]),
            misfire=_member(_MISFIRES, r["misfire"]),
            misfire_grace=float(r["misfire_grace"]),
            jitter=float(r["jitter"]),
            timeout=_optional_float(r["timeout"]),
            max_retries=int(r["max_retries"]),
            retry_backoff=float(r["retry_backoff"]),
            priority=int(r["priority"]),
            version=int(r["version"]),
            lease_owner=r["lease_owner"],
            lease_expires_at=d.decode_time(r["lease_expires_at"]),
            cancel_requested=bool(r["cancel_requested"]),
            cancel_run_only=bool(r["cancel_run_only"]),
            triggered=bool(r["triggered"]),
            attempt=int(r["attempt"]),
            run_count=int(r["run_count"]),
            last_status=_member(_EXECUTION_STATUSES, r["last_status"]) if r["last_status"] else None,
            created_at=self._time(r["created_at"]),
            updated_at=self._time(r["updated_at"]),
            max_catchup=r["max_catchup"],
            overlap=_member(_OVERLAPS, r["overlap"]),
            last_decision=r["last_decision"],
            parent_id=r["parent_id"],
            on_lost=_member(_ON_LOST, r["on_lost"]),
            max_runtime=_optional_float(r["max_runtime"]),
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
            scheduled_for=self._time(r["scheduled_for"]),
            started_at=d.decode_time(r["started_at"]),
            finished_at=d.decode_time(r["finished_at"]),
            status=ExecutionStatus(r["status"]),
            node=r["node"],
            fence=r["fence"],
            error=error,
            result=None if r["result"] is None else d.decode_json(r["result"]),
            note=r["note"],
            skipped=r["skipped_count"],
            skipped_last=d.decode_time(r["skipped_last"]),
        )


def iter_statements(script: str) -> Iterator[str]:
    """Split a migration script into statements on ``;`` at line ends."""
    current: list[str] = []
    for line in script.splitlines():
        current.append(line)
        if line.rstrip().endswith(";"):
            statement = "\n".join(current).strip()
            current = []
            if statement and not all(x.strip().startswith("--") or not x.strip() for x in statement.splitlines()):
                yield statement
    tail = "\n".join(current).strip()
    if tail and not all(x.strip().startswith("--") or not x.strip() for x in tail.splitlines()):
        yield tail


def _optional_float(value: Any) -> float | None:
    """SQLite hands back a REAL that holds a whole number as an int."""
    return None if value is None else float(value)


def _header(r: Row) -> TaskHeader:
    return TaskHeader(
        int(r["id"]), None if r["name"] is None else str(r["name"]), None if r["status"] is None else str(r["status"])
    )


def _session_key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()
