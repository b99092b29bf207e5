"""New tasks into the store: one statement per chunk of tasks, whatever their number.

Ids are taken first (``allocate_task_ids``), one per task, so that the rows the insert
returns, in no promised order, are matched to their tasks by id; a task whose key a
live task already holds (or a task earlier in the same batch) inserts nothing and is
answered with that holder, ``existed=True``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime

from tickwork.errors import QueueFull
from tickwork.model import NewTask, Task
from tickwork.store import encoding
from tickwork.store.dialect import Dialect, Session, notify
from tickwork.store.rows import Decoder

INSERT_CHUNK = 5000
"""Tasks per ``insert_tasks`` statement: a bulk schedule is one transaction of statements
this size, so no single parameter grows with the batch."""


def insert_tasks(d: Dialect, rows: Decoder, tasks: Sequence[NewTask], *, max_pending: int | None) -> list[Task]:
    """The tasks as stored, in one transaction; refused whole (``QueueFull``) when the
    due ones among them would take the due queue past ``max_pending``."""
    if not tasks:
        return []
    with d.transaction() as s:
        due_by = d.approximate_now()
        inserted, new_due = insert(d, rows, s, tasks, due_by)
        if max_pending is not None and new_due:
            # Counted after the insert, in its transaction: only rows really added
            # (not a key's existing task) count, and a refusal rolls them all back.
            params = {"due_by": d.encode_time(due_by), "limit": max_pending + new_due + 1}
            row = s.fetch_one("due_count", params)
            depth = 0 if row is None else int(row["n"])
            if depth > max_pending:
                raise QueueFull(max_pending, depth - new_due, new_due)
        return inserted


def insert(
    d: Dialect, rows: Decoder, s: Session, tasks: Sequence[NewTask], due_by: datetime | None = None
) -> tuple[list[Task], int]:
    """The tasks as stored (a key's live task for a duplicate key), and how many of
    them were inserted now and are due by ``due_by``."""
    now = d.encode_time(d.approximate_now())
    stored: dict[int, Task] = {}
    ids: list[int] = []
    for start in range(0, len(tasks), INSERT_CHUNK):
        chunk = tasks[start : start + INSERT_CHUNK]
        chunk_ids = [int(r["id"]) for r in s.fetch_all("allocate_task_ids", {"n": len(chunk)})]
        batch = json.dumps(
            [encoding.task_row(d, new, task_id) for new, task_id in zip(chunk, chunk_ids, strict=True)],
            separators=(",", ":"),
        )
        added = s.fetch_all("insert_tasks", {"rows": batch, "now": now})
        stored.update((t.id, t) for t in map(rows.task, added))
        ids += chunk_ids
    inserted: list[Task] = []
    new_due = 0
    for new, task_id in zip(tasks, ids, strict=True):
        task = stored.get(task_id)
        if task is not None:
            inserted.append(task)
            new_due += due_by is not None and new.next_run_at <= due_by
            continue
        # The key is held: by a live task, or by a task earlier in this batch.
        row = s.fetch_one("live_task_by_key", {"key": new.key})
        if row is None:  # the key's holder ended between the conflict and the read
            raise RuntimeError(f"insert of key={new.key!r} conflicted but no live task holds it")
        inserted.append(dataclasses.replace(rows.task(row), existed=True))
    notify(d, s, "due")
    return inserted, new_due
