"""New tasks into the store: one statement per chunk of tasks, whatever their number.

Ids are taken first (``allocate_task_ids``), one per task, so that which tasks went in
is known by id (``inserted_task_ids``); a task whose key a live task already holds (or
a task earlier in the same batch) inserts nothing and is answered with that holder,
``existed=True``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, overload

from tickwork.codec import dumps
from tickwork.errors import QueueFull
from tickwork.model import NewTask, Status, Task
from tickwork.store import encoding
from tickwork.store.dialect import Dialect, Session, notify
from tickwork.store.rows import Decoder, build_task

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
    now = d.approximate_now()
    ids, inserted = _one(d, s, tasks[0], now) if len(tasks) == 1 else _many(d, s, tasks, now)
    stored: list[Task] = []
    new_due = 0
    for new, task_id in zip(tasks, ids, strict=True):
        if (task := inserted.get(task_id)) is not None:
            stored.append(task)
            new_due += due_by is not None and new.next_run_at <= due_by
            continue
        # The key is held: by a live task, or by a task earlier in this batch.
        row = s.fetch_one("live_task_by_key", {"key": new.key})
        if row is None:  # the key's holder ended between the conflict and the read
            raise RuntimeError(f"insert of key={new.key!r} conflicted but no live task holds it")
        stored.append(dataclasses.replace(rows.task(row), existed=True))
    notify(d, s, "due")
    return stored, new_due


def _one(d: Dialect, s: Session, new: NewTask, now: datetime) -> tuple[list[int], dict[int, Task]]:
    """A single task (``schedule()``) in one round trip: its id comes back from the insert."""
    row = s.fetch_one("insert_task", encoding.task_row(d, new, None, now))
    if row is None:
        return [-1], {}
    task_id = int(row["id"])
    return [task_id], {task_id: as_inserted(new, task_id, now)}


def _many(d: Dialect, s: Session, tasks: Sequence[NewTask], now: datetime) -> tuple[list[int], dict[int, Task]]:
    """Each task's id (taken first) and the tasks that went in, by id, a chunk per
    statement: the tasks that hold no key, which nothing can conflict with, streamed in
    (``copy_rows``); the keyed ones through ``insert_tasks``, read back only when some
    key was held."""
    ids: list[int] = []
    inserted: dict[int, Task] = {}
    for start in range(0, len(tasks), INSERT_CHUNK):
        chunk = tasks[start : start + INSERT_CHUNK]
        taken = s.fetch_one("allocate_task_ids", {"n": len(chunk)})
        chunk_ids = sorted(int(i) for i in d.decode_json(taken["ids"])) if taken is not None else []
        keyless = [(new, i) for new, i in zip(chunk, chunk_ids, strict=True) if new.key is None]
        keyed = [(new, i) for new, i in zip(chunk, chunk_ids, strict=True) if new.key is not None]
        if keyless:
            s.copy_rows("copy_tasks", _streamed(d, keyless, now, inserted))
        if keyed:
            went_in = s.insert_rows("insert_tasks", [encoding.task_row(d, new, i, now) for new, i in keyed])
            keyed_ids = [i for _, i in keyed]
            if went_in != len(keyed):
                found = {int(r["id"]) for r in s.fetch_all("inserted_task_ids", {"ids": d.encode_ids(keyed_ids)})}
                keyed = [(new, i) for new, i in keyed if i in found]
            inserted.update((i, as_inserted(new, i, now)) for new, i in keyed)
        ids += chunk_ids
    return ids, inserted


def _streamed(
    d: Dialect, tasks: list[tuple[NewTask, int]], now: datetime, inserted: dict[int, Task]
) -> Iterator[tuple[Any, ...]]:
    """Each task's row for ``copy_tasks``, its stored Task made on the way: while the
    server writes the rows already sent, so that making them costs no time of the
    COPY's own (a COPY either writes every row or fails whole)."""
    for new, task_id in tasks:
        inserted[task_id] = as_inserted(new, task_id, now)
        yield encoding.task_values(d, new, task_id, now)


def as_inserted(new: NewTask, task_id: int, now: datetime) -> Task:
    """The row ``insert_tasks`` wrote for ``new``, as ``get_task`` would read it: its
    columns are the task's own values and the table's defaults, so nothing is read back
    (reading 5,000 rows back cost as much as inserting them). tests/test_bulk_insert.py
    compares it with the stored row on every store. Arguments checked as flat JSON
    (``Encoded.flat``) are already what decoding their text gives: they are not decoded."""
    encoded = new.encoded
    text = encoded.text_of(new.args, new.kwargs) if encoded is not None else None
    if text is not None and encoded is not None and encoded.flat:
        args, kwargs = new.args, new.kwargs
    else:
        args_text, kwargs_text = text if text is not None else (dumps(new.args), dumps(new.kwargs))
        args, kwargs = json.loads(args_text), json.loads(kwargs_text)
    utc = _utc
    # Positional, in Task's field order (by name took four times as long: 60 names
    # matched one by one); tests/test_bulk_insert.py compares every field with the row.
    return build_task(
        task_id, new.name, args, kwargs, new.key, new.kind, new.cron, new.timezone, new.interval,
        utc(new.scheduled_at), utc(new.next_run_at), Status.PENDING, new.misfire, new.misfire_grace, new.jitter,
        new.timeout, new.max_retries, new.retry_backoff, new.priority,
        0, None, None,  # version, lease_owner, lease_expires_at
        False, False, 0, 0, None,  # cancel_requested, triggered, attempt, run_count, last_status
        now, now,  # created_at, updated_at
        new.max_catchup, new.overlap, None, new.parent_id, new.on_lost,  # None: last_decision
        False, new.max_runtime, utc(new.until), new.max_runs, new.origin,  # False: cancel_run_only
        utc(new.declared_at), None, 0, None, None,  # removed_at, revision, replan_at, replan_run_at
        new.queue, new.lock, new.max_running, new.rate_limit, new.max_lost,
        0, False,  # lost_runs, existed
    )  # fmt: skip


@overload
def _utc(moment: datetime) -> datetime: ...
@overload
def _utc(moment: None) -> None: ...
def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.astimezone(UTC)
