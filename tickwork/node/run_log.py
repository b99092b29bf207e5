"""The line a node logs when a run ends: what happened, and what happens next.

An operator reads these first when something fails, so every run that did not
complete says its task, execution, attempt, error and the task's next step ("retry
2/3 at 10:00:03Z", "FAILED, no retries left", "next slot 10:05:00Z").
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from tickwork.codec import clean_text
from tickwork.logs import ROUTINE, routine_shown
from tickwork.model import Claim, ExecutionStatus, Kind, Outcome, Status

log = logging.getLogger("tickwork.worker")

MESSAGE_LIMIT = 300
"""An error message is cut to this many characters in the line that tells a run's end."""


def log_ended(claim: Claim, outcome: Outcome) -> None:
    """One line for a run whose outcome the store took: WARNING unless it COMPLETED (then
    INFO, routine: not shown at the default level). A SKIPPED slot was told when decided."""
    if outcome.status is ExecutionStatus.SKIPPED:
        return
    if outcome.status is ExecutionStatus.COMPLETED and not (log.isEnabledFor(logging.INFO) and routine_shown()):
        return  # dropped at this level anyway: not built, once per run
    task = claim.task
    then = what_next(claim, outcome)
    error = outcome.error
    # Error texts come from task code: cleaned as the store cleans them (a lone surrogate
    # could not be written to a UTF-8 log, or shipped as JSON).
    error_type = clean_text(error.type) if error else None
    message = clean_text(error.message) if error else None
    fields = {
        "task_name": task.name, "task_id": task.id, "execution_id": outcome.execution_id, "attempt": task.attempt,
        "status": outcome.status.value, "error_type": error_type,
        "error_message": message[:2000] if message is not None else None, "next": then,
        "task_status": outcome.task_status.value, "next_run_at": outcome.next_run_at.isoformat(),
    }  # fmt: skip
    what = outcome.status.value
    if message is not None:
        text = " ".join(message.split())
        text = text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."
        what += f" ({error_type}: {text})" if text else f" ({error_type})"
    elif outcome.note:
        what += f" ({clean_text(outcome.note)})"
    completed = outcome.status is ExecutionStatus.COMPLETED
    log.log(
        logging.INFO if completed else logging.WARNING,
        "task %s (%s) execution %s attempt %s: %s; %s",
        task.id, task.name, outcome.execution_id, task.attempt, what, then,
        extra={**fields, ROUTINE: completed},
    )  # fmt: skip


def what_next(claim: Claim, outcome: Outcome) -> str:
    """What the written outcome does with the task: "retry 2/3 at 10:00:03Z", "FAILED,
    no retries left", "next slot 10:05:00Z", "CANCELLED", ..."""
    task, status = claim.task, outcome.task_status
    if status is Status.CANCELLED:
        return "CANCELLED"
    if status is Status.FAILED:
        return "FAILED, no retries left"
    if status is Status.COMPLETED:
        return "task COMPLETED" if task.kind is Kind.ONE_TIME else "the schedule has ended: task COMPLETED"
    at = _when(outcome.next_run_at, outcome.finished_at)
    if not outcome.counts and outcome.lost_runs > 0:
        return f"run again at {at} (lost run {outcome.lost_runs} of at most {task.max_lost} in a row)"
    if not outcome.counts:
        return f"due again at {at} (interrupted: the attempt does not count)"
    if task.attempt >= 1 and outcome.attempt == task.attempt:  # the same slot again: a retry
        return f"retry {outcome.attempt}/{task.max_retries} at {at}"
    if outcome.attempt == 0:
        slot = _when(outcome.scheduled_at, outcome.finished_at)
        return f"next slot {slot}" + (f" (runs at {at})" if outcome.next_run_at != outcome.scheduled_at else "")
    return f"{status.value}, due at {at}"


def _when(moment: datetime, now: datetime) -> str:
    """``10:05:00Z`` on the day of ``now`` (UTC), else ``2026-03-01 10:05:00Z``."""
    moment, now = moment.astimezone(UTC), now.astimezone(UTC)
    return moment.strftime("%H:%M:%SZ" if moment.date() == now.date() else "%Y-%m-%d %H:%M:%SZ")
