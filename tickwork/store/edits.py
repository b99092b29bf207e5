"""Edits of stored tasks and syncs of code schedules (``Store.edit_task`` and
``Store.sync_schedules``'s contracts).

An edit writes a whole definition computed by the client API, guarded by the version,
revision and status it was computed from (edits.sql). A sync is one transaction under
the store's sync lock: read what the declared keys hold, let the caller plan, write the
plan; two nodes syncing at once therefore apply one plan after the other, and the second
finds the first's work done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tickwork.changes import Edit, Removal, SyncView, SyncWrites
from tickwork.errors import EditConflict, KeyHeld
from tickwork.model import NewTask, Status, Task
from tickwork.store.dialect import Dialect, Session, notify, unique_violation
from tickwork.store.rows import Decoder

Plan = Callable[[SyncView], SyncWrites]


def edit_task(d: Dialect, rows: Decoder, edit: Edit) -> Task | None:
    """Apply ``edit`` in its own transaction; None if the task changed since it was read."""
    try:
        with d.transaction() as s:
            task = _edit(d, rows, s, edit)
            if task is not None:
                notify(d, s, "due")
    except Exception as exc:
        if unique_violation(exc) and edit.after.key is not None:
            # A task given the key between our check and our write (an insert does not
            # take the key lock): the edit did not happen, as other_key_holder would say.
            raise KeyHeld(edit.before.id, edit.before.status.value, "retry", edit.after.key, None) from None
        raise
    return task


def _edit(d: Dialect, rows: Decoder, s: Session, edit: Edit) -> Task | None:
    before, after = edit.before, edit.after
    reviving = before.status not in _LIVE and after.status in _LIVE
    if reviving and after.key is not None:
        s.fetch_one("lock_key", {"key": after.key})
        holder = s.fetch_one("other_key_holder", {"key": after.key, "id": before.id})
        if holder is not None:
            raise KeyHeld(before.id, before.status.value, "retry", after.key, int(holder["id"]))
    row = s.fetch_one("edit_task", _edit_params(d, edit))
    return rows.task(row) if row is not None else None


_LIVE = (Status.PENDING, Status.RUNNING, Status.PAUSED)


def _edit_params(d: Dialect, edit: Edit) -> dict[str, Any]:
    before, after = edit.before, edit.after
    return {
        "id": before.id,
        "version": before.version,
        "revision": before.revision,
        "expect_status": before.status.value,
        "name": after.name,
        "args": d.encode_json(after.args),
        "kwargs": d.encode_json(after.kwargs),
        "cron": after.cron,
        "timezone": after.timezone,
        "interval": after.interval,
        "misfire": after.misfire.value,
        "misfire_grace": after.misfire_grace,
        "jitter": after.jitter,
        "timeout": after.timeout,
        "max_retries": after.max_retries,
        "retry_backoff": after.retry_backoff,
        "priority": after.priority,
        "max_catchup": after.max_catchup,
        "overlap": after.overlap.value,
        "on_lost": after.on_lost.value,
        "max_runtime": after.max_runtime,
        "until": d.encode_time(after.until),
        "max_runs": after.max_runs,
        "max_lost": after.max_lost,
        "queue": after.queue,
        "max_running": after.max_running,
        "rate_limit": after.rate_limit,
        "declared_at": d.encode_time(after.declared_at),
        "status": after.status.value,
        "scheduled_at": d.encode_time(after.scheduled_at),
        "next_run_at": d.encode_time(after.next_run_at),
        "attempt": after.attempt,
        "triggered": after.triggered,
        "replan_at": d.encode_time(after.replan_at),
        "replan_run_at": d.encode_time(after.replan_run_at),
        "reset_cancel": edit.reset_cancel,
        "decision": after.last_decision if after.last_decision != before.last_decision else None,
        "now": d.encode_time(d.approximate_now()),
    }


def sync_schedules(
    d: Dialect,
    rows: Decoder,
    insert: Callable[[Session, Sequence[NewTask]], list[Task]],
    request: tuple[str, Sequence[str], Sequence[str]],
    plan: Plan,
    *,
    dry_run: bool,
    force: bool,
) -> SyncWrites:
    """One sync: lock, remember the set ``digest`` (first seen now, or now again when
    ``force``d), read the view of ``keys`` and ``names``, plan, write. A dry run reads
    and plans in the same way and writes nothing. Raises ``EditConflict`` when a task
    the plan edits changed in between (a node claimed it): the caller syncs again."""
    digest, keys, names = request
    with d.transaction() as s:
        s.fetch_one("sync_lock", {})
        now = d.encode_time(d.approximate_now())
        if not dry_run:
            s.execute("remember_schedule_set", {"digest": digest, "now": now})
            if force:
                s.execute("restamp_schedule_set", {"digest": digest, "now": now})
        seen_row = s.fetch_one("schedule_set_seen", {"digest": digest})
        # A forced dry run previews the set as seen now; a forced sync reads back its restamp.
        first_seen = None if seen_row is None or (force and dry_run) else seen_row["first_seen"]
        view = _view(d, rows, s, keys, names, first_seen)
        writes = plan(view)
        if dry_run:
            return writes
        for created in insert(s, writes.create):
            if created.existed:  # the key was taken after the view was read: plan again
                raise EditConflict(created.id)
        # Rows locked in id order, as the hot path locks them, so that a sync and a
        # node's batch of outcomes never wait on each other in a circle.
        for edit in sorted(writes.edit, key=lambda e: e.before.id):
            if _edit(d, rows, s, edit) is None:
                raise EditConflict(edit.before.id)
        for removal in sorted(writes.remove, key=lambda r: r.task.id):
            _remove(d, s, removal)
        notify(d, s, "due")
        if writes.remove:
            notify(d, s, "cancel")
    return writes


def _view(
    d: Dialect, rows: Decoder, s: Session, keys: Sequence[str], names: Sequence[str], first_seen: Any
) -> SyncView:
    now = d.approximate_now()
    seen = now if first_seen is None else d.decode_time(first_seen)
    params = {"keys": d.encode_names(keys), "names": d.encode_names(names)}
    code = {}
    for row in s.fetch_all("code_schedules", params):
        task = rows.task(row)
        code[str(task.key)] = task
    holders = {str(t.key): t for t in (rows.task(r) for r in s.fetch_all("runtime_key_holders", params))}
    assert seen is not None
    return SyncView(now=now, seen=seen, code=code, holders=holders)


def _remove(d: Dialect, s: Session, removal: Removal) -> None:
    task = removal.task
    params = {
        "id": task.id,
        "revision": task.revision,
        "declared_at": d.encode_time(removal.declared_at),
        "note": removal.note,
        "now": d.encode_time(d.approximate_now()),
    }
    if s.fetch_one("remove_code_schedule", params) is None:
        raise EditConflict(task.id)
    s.execute("note_removal", {**params, "scheduled_for": d.encode_time(task.scheduled_at)})
