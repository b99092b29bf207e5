"""Python values as the parameters of the store's writes (the reverse of ``rows``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from tickwork.codec import clean_text, dumps, json_problem
from tickwork.model import Claim, ErrorInfo, ExecutionStatus, NewTask, Outcome, Skipping, StuckRun
from tickwork.store.dialect import Dialect

TASK_COLUMNS = (
    "id", "name", "args", "kwargs", "key", "kind", "cron", "timezone", "interval_seconds", "scheduled_at",
    "next_run_at", "status", "misfire", "misfire_grace", "jitter", "timeout", "max_retries", "retry_backoff",
    "priority", "max_catchup", "overlap", "parent_id", "on_lost", "max_runtime", "until_at", "max_runs", "origin",
    "declared_at", "max_lost", "queue", "lock", "max_running", "rate_limit", "created_at", "updated_at",
)  # fmt: skip
"""``task_values``' columns: ``id, {{new_task_columns}}`` (queries.sql)."""


def task_values(d: Dialect, new: NewTask, task_id: int | None, now: datetime) -> tuple[Any, ...]:
    """One new task's row, in ``TASK_COLUMNS`` order, times as the store's own values
    (``now``: the insert's time): positional, for the bulk write of tasks that hold no
    key (``copy_tasks``, a COPY on PostgreSQL). The arguments travel as their JSON text,
    so each store keeps exactly the text ``dumps`` wrote."""
    text = new.encoded.text_of(new.args, new.kwargs) if new.encoded is not None else None
    args, kwargs = text if text is not None else (dumps(new.args), dumps(new.kwargs))
    encode_time = d.encode_time
    created = encode_time(now)
    return (
        task_id, new.name, args, kwargs, new.key, new.kind.value, new.cron, new.timezone, new.interval,
        encode_time(new.scheduled_at), encode_time(new.next_run_at), "PENDING", new.misfire.value,
        new.misfire_grace, new.jitter, new.timeout, new.max_retries, new.retry_backoff, new.priority,
        new.max_catchup, new.overlap.value, new.parent_id, new.on_lost.value, new.max_runtime,
        encode_time(new.until), new.max_runs, new.origin, encode_time(new.declared_at), new.max_lost, new.queue,
        new.lock, new.max_running, new.rate_limit, created, created,
    )  # fmt: skip


def task_row(d: Dialect, new: NewTask, task_id: int | None, now: datetime) -> dict[str, Any]:
    """``task_values`` keyed by column, in values JSON can carry (times as ISO text where
    the store keeps timestamps): a row of ``insert_tasks``, or ``insert_task``'s
    parameters."""
    values = task_values(d, new, task_id, now)
    return {
        column: value.isoformat() if isinstance(value, datetime) else value
        for column, value in zip(TASK_COLUMNS, values, strict=True)
    }


def outcome_object(o: Outcome) -> dict[str, Any]:
    """One outcome as a JSON object (times as ISO text): a row of ``write_outcomes_text``'s
    batch, without the keys whose value is None (the server reads a missing key as NULL;
    a run that ended well then encodes a third less text)."""
    return _outcome_fields(o, datetime.isoformat)


_JSON_BOOLS = ("false", "true")
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
EXACT_MICROSECONDS = 2**53
"""``write_outcomes_batch`` turns whole microseconds since 1970 into times through a
float8, exact below this many either way (the years 1684 to 2255)."""


def outcome_json(o: Outcome) -> str | None:
    """One outcome as a row of ``write_outcomes_batch``'s batch: ``outcome_object(o)`` with
    its times as whole microseconds since 1970 (a third of ISO text's cost to make, and to
    read on the server), or None when one of them lies outside the years those carry
    exactly (``outcome_text_json`` then)."""
    limit, epoch, unit = EXACT_MICROSECONDS, _EPOCH, _MICROSECOND
    scheduled, next_run, finished = (
        (o.scheduled_at - epoch) // unit,
        (o.next_run_at - epoch) // unit,
        (o.finished_at - epoch) // unit,
    )
    if not (-limit < scheduled < limit and -limit < next_run < limit and -limit < finished < limit):
        return None
    text = f'{_common_fields(o)},"sa":{scheduled},"na":{next_run},"fa":{finished}'
    if o.started_at is not None:
        started = (o.started_at - epoch) // unit
        if not -limit < started < limit:
            return None
        text += f',"ba":{started}'
    if o.skipped_last is not None:
        last = (o.skipped_last - epoch) // unit
        if not -limit < last < limit:
            return None
        text += f',"la":{last}'
    return _with_rare_fields(text, o)


def outcome_text_json(o: Outcome) -> str:
    """``outcome_object(o)`` as JSON text: a row of ``write_outcomes_text``'s batch."""
    text = (
        f'{_common_fields(o)},"scheduled_at":"{o.scheduled_at.isoformat()}",'
        f'"next_run_at":"{o.next_run_at.isoformat()}","finished_at":"{o.finished_at.isoformat()}"'
    )
    if o.started_at is not None:
        text += f',"started_at":"{o.started_at.isoformat()}"'
    if o.skipped_last is not None:
        text += f',"skipped_last":"{o.skipped_last.isoformat()}"'
    return _with_rare_fields(text, o)


def _common_fields(o: Outcome) -> str:
    """The start of an outcome's JSON object: the fields every outcome has but its times,
    numbers and fixed words with nothing to escape, written straight into the text (a
    fifth of a W1 node's CPU went to making a dict of them and encoding it). A status is
    a StrEnum: formatted, it is its value (faster than reading ``.value``)."""
    return (
        f'{{"task_id":{o.task_id},"fence":{o.fence},"execution_id":{o.execution_id},'
        f'"status":"{o.status}","task_status":"{o.task_status}","attempt":{o.attempt},'
        f'"triggered":{_JSON_BOOLS[o.triggered]},"counts":{_JSON_BOOLS[o.counts]},"lost_runs":{o.lost_runs}'
    )


def _with_rare_fields(text: str, o: Outcome) -> str:
    """``text`` closed, with the fields an outcome has only now and then (an error, a
    result, a note, skipped slots, a decision) through the encoder."""
    if o.error is None and o.result is None and o.skipped is None and not o.note and not o.decision:
        return text + "}"
    rest = {key: value for key, value in outcome_object(o).items() if key in _RARE_OUTCOME_KEYS}
    return f"{text},{_ENCODE(rest)[1:-1]}}}" if rest else text + "}"


_RARE_OUTCOME_KEYS = frozenset(
    ("error_type", "error_message", "error_traceback", "result", "note", "skipped", "decision")
)


def _outcome_fields(o: Outcome, time: Callable[[datetime], Any]) -> dict[str, Any]:
    """An outcome's values by key, times encoded by ``time``, the keys of None values left
    out. A result that cannot be stored costs that result (noted on the execution), never
    the batch it is written with."""
    row: dict[str, Any] = {
        "task_id": o.task_id,
        "fence": o.fence,
        "execution_id": o.execution_id,
        "status": o.status.value,
        "task_status": o.task_status.value,
        "scheduled_at": time(o.scheduled_at),
        "next_run_at": time(o.next_run_at),
        "finished_at": time(o.finished_at),
        "attempt": o.attempt,
        "triggered": o.triggered,
        "counts": o.counts,
        "lost_runs": o.lost_runs,
    }
    if o.started_at is not None:
        row["started_at"] = time(o.started_at)
    if o.error is not None:
        row["error_type"] = clean_text(o.error.type)
        row["error_message"] = clean_text(o.error.message)
        row["error_traceback"] = clean_text(o.error.traceback)
    result, note = o.result, o.note
    if result is not None and (problem := json_problem(result)) is not None:
        result, note = None, f"{note}; result not stored: {problem}" if note else f"result not stored: {problem}"
    if result is not None:
        row["result"] = result
    if note:
        row["note"] = clean_text(note)
    if o.skipped is not None:
        row["skipped"] = o.skipped
    if o.skipped_last is not None:
        row["skipped_last"] = time(o.skipped_last)
    if o.decision:
        row["decision"] = clean_text(o.decision)
    return row


OUTCOME_COLUMNS = (
    "task_id", "fence", "execution_id", "status", "task_status", "scheduled_at", "next_run_at", "finished_at",
    "started_at", "attempt", "triggered", "error_type", "error_message", "error_traceback", "result", "note",
    "skipped", "skipped_last", "decision", "counts", "lost_runs",
)  # fmt: skip
"""The columns of SQLite's outcome batch between its ``pos`` and its ``batch`` (sqlite.sql:
create_outcome_batch)."""


def outcome_row(d: Dialect, pos: int, o: Outcome, batch: int) -> tuple[Any, ...]:
    """One outcome as the row at ``pos`` of SQLite's outcome batch ``batch``: times as the
    store keeps them, a result as its JSON text."""
    row = _outcome_fields(o, d.encode_time)
    if "result" in row:
        row["result"] = d.encode_json(row["result"])
    return (pos, *[row.get(column) for column in OUTCOME_COLUMNS], batch)


def skipping(d: Dialect, task_id: int, skip: Skipping, now: Any) -> dict[str, Any]:
    """The parameters of ``resume_skipping`` and ``insert_skipped``."""
    return {
        "id": task_id,
        "version": skip.version,
        "now": now,
        "scheduled_at": d.encode_time(skip.next_slot),
        "next_run_at": d.encode_time(skip.next_run_at),
        "decision": skip.decision,
        "skipped": skip.count,
        "skipped_first": d.encode_time(skip.first),
        "skipped_last": d.encode_time(skip.last),
    }


def stuck_runs(stuck: Sequence[StuckRun]) -> str | None:
    """A node's stuck runs as the JSON text of its row (None: none)."""
    if not stuck:
        return None
    rows = [
        {"task_id": r.task_id, "execution_id": r.execution_id, "task_name": clean_text(r.task_name)[:300],
         "reason": r.reason, "since": r.since.isoformat()}
        for r in stuck[:100]
    ]  # fmt: skip
    return json.dumps(rows)


def early_end(
    d: Dialect,
    node: str,
    claim: Claim,
    status: ExecutionStatus,
    at: datetime,
    error: ErrorInfo | None,
    note: str | None,
) -> dict[str, Any]:
    """The parameters of ``end_execution``."""
    return {
        "id": claim.execution_id, "task_id": claim.task.id, "fence": claim.fence, "node": node,
        "status": status.value, "finished_at": d.encode_time(at),
        "error_type": clean_text(error.type) if error else None,
        "error_message": clean_text(error.message) if error else None,
        "error_traceback": clean_text(error.traceback) if error else None,
        "note": clean_text(note) if note else None,
    }  # fmt: skip
