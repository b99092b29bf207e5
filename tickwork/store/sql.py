"""The store's domain operations, written once for every SQL database: ``SQLStore``, the
facade of ``base.Store`` (see it for each contract). The hot path (claims, leases,
outcomes) is in ``runs``, rows are decoded by ``rows`` and written by ``encoding``; a
``Dialect`` owns connections, transactions, value encoding, texts and its ``hot`` path.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from tickwork.changes import Edit, SyncWrites
from tickwork.codec import clean_text
from tickwork.errors import InvalidInput
from tickwork.model import (
    ErrorInfo,
    Execution,
    ExecutionStatus,
    Kind,
    Node,
    PruneCounts,
    Stats,
    Status,
    StuckRun,
    Task,
    TaskHeader,
)  # fmt: skip
from tickwork.store import edits, encoding, inserts, insights, retention
from tickwork.store.base import Claim, DueTime, NewTask, Outcome, Renewal, Skipping
from tickwork.store.dialect import Dialect, Election, Row, Session, iter_statements, notify
from tickwork.store.queues import QueueOps
from tickwork.store.rows import Decoder, header
from tickwork.store.runs import Runs, queue_params

__all__ = ["Dialect", "Row", "SQLStore", "Session", "iter_statements"]

# stats() counts recent runs among this many newest executions, at most.
RECENT_RUNS_WINDOW = 200_000


class SQLStore(QueueOps):
    def __init__(self, dialect: Dialect, claim: str | None = None) -> None:
        self.dialect = dialect
        self.claim_strategy = claim or dialect.strategies[0]
        if self.claim_strategy not in dialect.strategies:
            raise InvalidInput("claim", claim, f"this store supports {', '.join(dialect.strategies)}")
        self._rows = Decoder(dialect)
        self._runs = Runs(dialect, self._rows, self.claim_strategy)

    # -- schema and clock ---------------------------------------------------------

    def migrate(self) -> int:
        return self.dialect.migrate()

    def now(self) -> datetime:
        return self.dialect.now()

    def approximate_now(self) -> datetime:
        return self.dialect.approximate_now()

    def close(self) -> None:
        self.dialect.close()

    def listen(self, on_notify: Callable[[str], None], stop: threading.Event, elect: Election | None = None) -> None:
        self.dialect.listen(on_notify, stop, elect)

    def announce_due(self) -> None:
        if self.dialect.notifies:
            with self.dialect.single() as s:
                notify(self.dialect, s, "due")

    def is_transient(self, exc: BaseException) -> bool:
        return self.dialect.is_transient(exc)

    # -- scheduling ---------------------------------------------------------------

    def insert_tasks(self, tasks: Sequence[NewTask], *, max_pending: int | None = None) -> list[Task]:
        return inserts.insert_tasks(self.dialect, self._rows, tasks, max_pending=max_pending)

    def edit_task(self, edit: Edit) -> Task | None:
        return edits.edit_task(self.dialect, self._rows, edit)

    def sync_schedules(
        self,
        digest: str,
        keys: Sequence[str],
        names: Sequence[str],
        plan: edits.Plan,
        *,
        dry_run: bool = False,
        force: bool = False,
    ) -> SyncWrites:
        def insert(s: Session, tasks: Sequence[NewTask]) -> list[Task]:
            return inserts.insert(self.dialect, self._rows, s, tasks)[0] if tasks else []

        return edits.sync_schedules(
            self.dialect, self._rows, insert, (digest, keys, names), plan, dry_run=dry_run, force=force
        )

    def next_due_at(self, names: Sequence[str], queues: Sequence[str] | None = None) -> datetime | None:
        first = self.upcoming_due(names, queues, 1)
        return first[0].at if first else None

    def upcoming_due(self, names: Sequence[str], queues: Sequence[str] | None = None, ahead: int = 64) -> list[DueTime]:
        params = {"names": self.dialect.encode_names(names), "ahead": ahead, **queue_params(self.dialect, queues)}
        with self.dialect.single_read() as s:
            rows = s.fetch_all("upcoming_due", params)
        return [DueTime(self._rows.time(r["at"]), bool(r["early"])) for r in rows]

    # -- claims and leases (runs.py) ------------------------------------------------

    def claim(
        self,
        node: str,
        names: Sequence[str],
        limit: int,
        lease: float,
        exclude: Sequence[int] = (),
        queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> list[Claim]:
        return self._runs.claim(node, names, limit, lease, exclude, queues, ahead)

    def renew(self, node: str, runs: Sequence[tuple[int, int]], lease: float) -> list[Renewal]:
        return self._runs.renew(node, runs, lease)

    def finish(self, node: str, outcomes: Sequence[Outcome]) -> list[bool]:
        return self._runs.write_outcomes(node, outcomes, reaping=False, expired_only=False)

    def reap(self, lease_owner: str, outcomes: Sequence[Outcome], *, expired_only: bool = True) -> list[bool]:
        return self._runs.write_outcomes(lease_owner, outcomes, reaping=True, expired_only=expired_only)

    def release(self, node: str, claims: Sequence[Claim], *, notify: bool = True) -> int:
        return self._runs.release(node, claims, notify_nodes=notify)

    def claimed_since(self, node: str, since: datetime) -> list[Claim]:
        return self._runs.claimed_since(node, since)

    def expired(self, limit: int, exclude: Sequence[int] = ()) -> list[Claim]:
        return self._runs.running("expired_runs", limit, exclude=self.dialect.encode_ids(exclude))

    def overrun(self, limit: int, grace: float) -> list[Claim]:
        return self._runs.running("overrun_runs", limit, grace=grace)

    # -- reading and managing tasks -----------------------------------------------

    def get_task(self, task_id: int) -> Task | None:
        with self.dialect.reader() as s:
            row = s.fetch_one("get_task", {"id": task_id})
        return self._rows.task(row) if row else None

    def list_tasks(
        self,
        *,
        status: Status | None = None,
        name: str | None = None,
        limit: int = 100,
        offset: int = 0,
        kind: Kind | None = None,
        newest_first: bool = False,
        queue: str | None = None,
    ) -> list[Task]:
        params = {
            "status": status.value if status else None, "name": name, "kind": kind.value if kind else None,
            "limit": limit, "offset": offset, "queue": queue,
        }  # fmt: skip
        query = "list_tasks_newest" if newest_first else "list_tasks"
        with self.dialect.reader() as s:
            return [self._rows.task(r) for r in s.fetch_all(query, params)]

    def task_headers(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        limit: int = 100,
        offset: int = 0,
        queue: str | None = None,
    ) -> list[TaskHeader]:
        params = {"status": status, "name": name, "limit": limit, "offset": offset, "queue": queue}
        with self.dialect.reader() as s:
            return [header(r) for r in s.fetch_all("task_headers", params)]

    def task_header(self, task_id: int) -> TaskHeader | None:
        with self.dialect.reader() as s:
            row = s.fetch_one("task_header", {"id": task_id})
        return None if row is None else header(row)

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
            return [self._rows.execution(r) for r in s.fetch_all("list_executions", params)]

    def cancel(self, task_id: int, *, run_only: bool = False) -> Task | None:
        # A running node learns of the request at once through "cancel", or at its next heartbeat.
        return self._change("cancel_run" if run_only else "cancel_task", task_id, announce="cancel")

    def pause(self, task_id: int) -> Task | None:
        return self._change("pause_task", task_id)

    def resume(self, task_id: int, skipping: Skipping | None = None) -> Task | None:
        if skipping is None:
            return self._change("resume_task", task_id, announce="due")
        d = self.dialect
        params = encoding.skipping(d, task_id, skipping, d.encode_time(d.approximate_now()))
        with d.transaction() as s:
            row = s.fetch_one("resume_skipping", params)
            if row is None:
                row = s.fetch_one("get_task", {"id": task_id})
            else:
                s.execute("insert_skipped", params)
                notify(d, s, "due")
        return self._rows.task(row) if row else None

    def backfill(self, task_id: int, start: datetime, end: datetime, runs: Sequence[NewTask]) -> list[Task]:
        d = self.dialect
        with d.transaction() as s:
            s.fetch_one("lock_task", {"id": task_id})
            rows = s.fetch_all("taken_slots", {"id": task_id, "start": d.encode_time(start), "end": d.encode_time(end)})
            taken = {self._rows.time(r["slot"]) for r in rows}
            fresh = [run for run in runs if run.scheduled_at not in taken]
            return inserts.insert(self.dialect, self._rows, s, fresh)[0] if fresh else []

    def trigger(self, task_id: int) -> Task | None:
        return self._change("trigger_task", task_id, announce="due")

    def _change(self, query: str, task_id: int, announce: str | None = None) -> Task | None:
        """Apply a guarded state change; if its guard fails return the task as it is.
        ``announce``: what to notify the nodes of when it applied."""
        d = self.dialect
        with d.transaction() as s:
            row = s.fetch_one(query, {"id": task_id, "now": d.encode_time(d.approximate_now())})
            if row is None:
                row = s.fetch_one("get_task", {"id": task_id})
            elif announce is not None:
                notify(d, s, announce)
        return self._rows.task(row) if row else None

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

    def node_heartbeat(self, node_id: str, running: int, stuck: Sequence[StuckRun] = ()) -> None:
        d = self.dialect
        params = {"id": node_id, "running": running, "stuck": encoding.stuck_runs(stuck)}
        with d.transaction() as s:
            s.execute("node_heartbeat", {**params, "now": d.encode_time(d.approximate_now())})

    def end_execution(
        self, node: str, claim: Claim, status: ExecutionStatus, at: datetime, error: ErrorInfo | None, note: str | None
    ) -> bool:
        with self.dialect.transaction() as s:
            return (
                s.execute("end_execution", encoding.early_end(self.dialect, node, claim, status, at, error, note)) > 0
            )

    def note_execution(self, task_id: int, execution_id: int, text: str) -> None:
        with self.dialect.transaction() as s:
            s.execute("note_execution", {"task_id": task_id, "id": execution_id, "text": clean_text(text)[:4000]})

    def remove_node(self, node_id: str) -> None:
        with self.dialect.transaction() as s:
            s.execute("delete_node", {"id": node_id})

    def prune_nodes(self, silent_for: float) -> int:
        d = self.dialect
        with d.transaction() as s:
            cutoff = d.encode_time(d.approximate_now() - timedelta(seconds=silent_for))
            return s.execute("prune_nodes", {"cutoff": cutoff, "silent_for": silent_for})

    def prune(self, older_than: datetime, keep_last: int, limit: int, *, dry_run: bool = False) -> PruneCounts:
        return retention.prune(self.dialect, older_than, keep_last, limit, dry_run=dry_run)

    def due_count(self, limit: int) -> int:
        d = self.dialect
        with d.reader() as s:
            row = s.fetch_one("due_count", {"due_by": d.encode_time(d.approximate_now()), "limit": limit})
        return 0 if row is None else int(row["n"])

    def queue_depth(self) -> tuple[int, datetime | None]:
        d = self.dialect
        with d.reader() as s:
            row = s.fetch_one("queue_depth", {"now": d.encode_time(d.approximate_now())})
        return (0, None) if row is None else (int(row["depth"]), d.decode_time(row["oldest"]))

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
        return [self._rows.node(r) for r in rows]

    # -- insights (insights.py) -------------------------------------------------------

    def task_name_stats(self, window_s: float, limit: int, *, name: str | None = None) -> insights.NameStatsReport:
        return insights.name_stats(self.dialect, window_s, limit, name)

    def sample_queue(self) -> None:
        insights.sample_queue(self.dialect, *self.queue_depth())

    def queue_samples(self, since: datetime) -> list[insights.QueueSample]:
        return insights.queue_samples(self.dialect, since)

    def throughput(self, window_s: float, bucket_s: float, limit: int) -> insights.Throughput:
        return insights.throughput(self.dialect, window_s, bucket_s, limit)

    def find_executions(
        self,
        *,
        name: str | None = None,
        status: ExecutionStatus | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        scan: int = 50_000,
    ) -> insights.RunPage:
        d, rows = self.dialect, self._rows
        return insights.find_runs(d, rows, name=name, status=status, since=since, until=until, limit=limit, scan=scan)

    def running_tasks(self, limit: int) -> list[insights.RunningTask]:
        return insights.running_by_node(self.dialect, limit)


def _session_key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()
