"""From what happened to a run to the fenced write that records it.

Two steps, each decided here and nowhere else in the node:
* ``cancelled_result``: a run stopped by the node (its cancel reason) becomes a
  ``RunResult`` (status, error, note) — a timeout is TIMED_OUT, a cancel is CANCELLED,
  a lost lease or a shutdown is FAILED "interrupted";
* ``outcome_for``: a ``RunResult`` and the run's cancel reason become the ``Outcome``
  the store applies, through the pure policy of tickwork/schedules.py (retry, next slot,
  cancel wins), which is where the task's next state is decided.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime
from typing import Any

from tickwork.model import ErrorInfo, ExecutionStatus, Outcome
from tickwork.node.run import CancelReason, Run
from tickwork.schedules import failed_outcome, outcome_of

log = logging.getLogger("tickwork.worker")

_INTERRUPTED = {
    CancelReason.LOST: "lease lost: the run was stopped because this node no longer owns it",
    CancelReason.LOCK_LOST: "lock lost: another node took this task's Redis lock; the run was stopped",
    CancelReason.SHUTDOWN: "interrupted: the node shut down before the run finished",
}
_CANCELLED_NOTES = {
    CancelReason.CANCEL: "cancelled on request",
    CancelReason.REPLACED: "replaced: the next slot came due",
    CancelReason.CANCEL_RUN: "run cancelled on request; the schedule goes on",
}


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What one run came to, before the policy decides the task's next state."""

    status: ExecutionStatus
    error: ErrorInfo | None = None
    result: Any = None
    note: str | None = None


def cancelled_result(run: Run, error: ErrorInfo | None = None) -> RunResult:
    """The result of a run the node stopped, by ``run.cancel_reason`` (a run with no
    reason counts as interrupted). ``error``: what the task raised while stopping."""
    reason = run.cancel_reason
    task = run.claim.task
    if reason is CancelReason.TIMEOUT:
        default = ErrorInfo("TimeoutError", f"run exceeded its timeout of {task.timeout} s")
        return RunResult(ExecutionStatus.TIMED_OUT, error or default, note="timeout")
    if reason is CancelReason.MAX_RUNTIME:
        default = ErrorInfo("MaxRuntimeExceeded", f"run exceeded its max_runtime of {task.max_runtime} s")
        return RunResult(ExecutionStatus.TIMED_OUT, error or default, note="max_runtime")
    if reason in _CANCELLED_NOTES:
        return RunResult(ExecutionStatus.CANCELLED, error, note=_CANCELLED_NOTES[reason])
    reason = reason or CancelReason.SHUTDOWN
    return RunResult(ExecutionStatus.FAILED, error or ErrorInfo("Interrupted", _INTERRUPTED[reason]), note=str(reason))


def outcome_for(run: Run, result: RunResult, now: datetime) -> Outcome:
    """The write that records ``result`` at ``now``. A run interrupted by shutdown is
    due again without using up an attempt; a replaced run or a run-only cancel leaves
    the schedule going. If the next state cannot be computed (a stored value the policy
    cannot use), the task ends FAILED rather than stay RUNNING."""
    interrupted = result.status is ExecutionStatus.FAILED and run.cancel_reason is CancelReason.SHUTDOWN
    try:
        return outcome_of(
            run.claim, result.status, now, error=result.error, result=result.result, note=result.note,
            interrupted=interrupted,
            replaced=run.cancel_reason in (CancelReason.REPLACED, CancelReason.CANCEL_RUN),
            started_at=run.started_at,
        )  # fmt: skip
    except Exception as exc:
        log.exception("task %s: cannot compute its next state; ending it FAILED", run.task_id)
        return failed_outcome(run.claim, now, ErrorInfo.from_exception(exc))
