"""Retention: deleting old history in bounded batches (``Store.prune``'s contract).

One call is one short transaction: the prune lock (PostgreSQL's advisory lock, so one
node at a time; SQLite's single writer serialises anyway), then at most ``limit``
ended one-time tasks with their executions, then at most ``limit`` old executions.
"""

from __future__ import annotations

from datetime import datetime

from tickwork.errors import InvalidInput
from tickwork.model import PruneCounts
from tickwork.store.dialect import Dialect


def check(keep_last: int, limit: int) -> None:
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
        raise InvalidInput("keep_last", keep_last, "must be a whole number, 0 or more")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInput("limit", limit, "must be a whole number, 1 or more")


def prune(d: Dialect, older_than: datetime, keep_last: int, limit: int, *, dry_run: bool = False) -> PruneCounts:
    check(keep_last, limit)
    params = {"cutoff": d.encode_time(older_than), "keep_last": keep_last, "limit": limit}
    if dry_run:
        with d.reader() as s:
            row = s.fetch_one("prune_count", params)
        return PruneCounts(0, 0) if row is None else PruneCounts(int(row["executions"]), int(row["tasks"]))
    with d.transaction() as s:
        lock = s.fetch_one("prune_lock", {})
        if lock is None or not lock["got"]:
            return PruneCounts(busy=True)
        ids = [int(r["id"]) for r in s.fetch_all("prune_pick_tasks", params)]
        executions = tasks = 0
        if ids:  # each delete checks its task again: one changed since the pick stays whole
            picked = {"ids": d.encode_ids(ids), "cutoff": params["cutoff"]}
            executions = s.execute("prune_task_executions", picked)
            tasks = s.execute("prune_tasks", picked)
        executions += s.execute("prune_executions", params)
    return PruneCounts(executions, tasks)
