"""Queues as the store keeps them: which are paused (``tickwork_queues``; claims leave a
paused queue's tasks alone, in the same statement that claims) and what waits in each
(queries in queues.sql). A queue exists as soon as a task uses it; pausing one that no
task uses yet is allowed (its first tasks then wait)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from tickwork.model import Task
from tickwork.store.dialect import Dialect, notify

MAX_QUEUES = 1000
"""Queues a listing returns at most."""


@dataclasses.dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    paused: bool
    changed_at: datetime | None
    """When it was last paused or resumed (None: never)."""
    pending: int
    due: int
    """PENDING tasks due now: the queue's depth."""
    running: int
    oldest_due: datetime | None
    """The oldest due task's dispatch time (None: none due)."""


@dataclasses.dataclass(frozen=True, slots=True)
class LimitFacts:
    """What holds a task's limits now (``why_waiting``)."""

    running: int | None = None
    """RUNNING tasks of its name (None: it has no max_running)."""
    lock_holder: int | None = None
    """The RUNNING task holding its lock, if any."""
    rate_next: datetime | None = None
    """Its name's rate: the next allowed start (None: no rate, or never started)."""


def limit_facts(d: Dialect, name: str, lock: str | None, rate: bool, max_running: bool) -> LimitFacts:
    with d.reader() as s:
        running = holder = tat = None
        if max_running:
            rows = s.fetch_all("running_by_name", {"names": d.encode_names([name])})
            running = int(rows[0]["running"]) if rows else 0
        if lock is not None:
            row = s.fetch_one("lock_holder", {"lock": lock})
            holder = None if row is None else int(row["id"])
        if rate:
            rows = s.fetch_all("limit_states", {"keys": d.encode_names([f"rate:{name}"])})
            tat = d.decode_time(rows[0]["tat"]) if rows else None
    return LimitFacts(running, holder, tat)


def set_paused(d: Dialect, name: str, paused: bool) -> None:
    """Pause or resume ``name``; a resume wakes the nodes (its tasks may be due now)."""
    with d.transaction() as s:
        s.execute("set_queue_paused", {"name": name, "paused": paused, "now": d.encode_time(d.approximate_now())})
        if not paused:
            notify(d, s, "due")


def paused(d: Dialect) -> set[str]:
    with d.reader() as s:
        return {str(r["name"]) for r in s.fetch_all("paused_queues", {})}


def due_by_queue(d: Dialect) -> dict[str, tuple[int, datetime | None]]:
    with d.reader() as s:
        rows = s.fetch_all("due_by_queue", {"now": d.encode_time(d.approximate_now())})
    return {str(r["queue"]): (int(r["due"]), d.decode_time(r["oldest"])) for r in rows}


def listed(d: Dialect, name: str | None = None) -> list[QueueInfo]:
    params = {"now": d.encode_time(d.approximate_now()), "name": name, "limit": MAX_QUEUES}
    with d.reader() as s:
        rows = s.fetch_all("queue_rows", params)
    return [
        QueueInfo(
            name=str(r["name"]), paused=bool(r["paused"]), changed_at=d.decode_time(r["changed_at"]),
            pending=int(r["pending"] or 0), due=int(r["due"] or 0), running=int(r["running"] or 0),
            oldest_due=d.decode_time(r["oldest"]),
        )
        for r in rows
    ]  # fmt: skip


class QueueOps:
    """The queue operations of ``SQLStore`` (a part of it, on its ``dialect``)."""

    dialect: Dialect

    def set_queue_paused(self, name: str, paused: bool) -> None:
        set_paused(self.dialect, name, paused)

    def paused_queues(self) -> set[str]:
        return paused(self.dialect)

    def due_by_queue(self) -> dict[str, tuple[int, datetime | None]]:
        return due_by_queue(self.dialect)

    def queues(self, name: str | None = None) -> list[QueueInfo]:
        return listed(self.dialect, name)

    def limit_facts(self, task: Task) -> LimitFacts:
        return limit_facts(
            self.dialect, task.name, task.lock, task.rate_limit is not None, task.max_running is not None
        )
