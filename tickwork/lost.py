"""What happens to a run lost with its node: the reconciler's policy (pure).

A lost run was never seen to fail (its node died, froze or was cut off), so tickwork
runs it again by default — at-least-once — but only so many times in a row, so that a
task that kills every node it runs on ends instead of taking the cluster down in turn.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from tickwork.model import Claim, ErrorInfo, ExecutionStatus, OnLost, Outcome, Status
from tickwork.schedules import Settlement, failed_outcome, outcome_of, outcome_with, retry_delay


def lost_outcome(claim: Claim, now: datetime, error: ErrorInfo, note: str) -> Outcome:
    """The write for a run lost with its node (its lease expired unrenewed).

    The run was never seen to fail, so by default (``on_lost="retry"``) it runs again:
    the same slot and attempt, not counted in ``run_count``, after the task's retry
    backoff — up to ``max_lost`` times in a row, apart from ``max_retries``. The next
    lost run counts as a failure (the retry and recurrence rules apply), so that a task
    that kills every node it runs on cannot loop for ever. ``on_lost="fail"`` ends the
    task FAILED at once; a cancel requested meanwhile wins as over any run."""
    task = claim.task
    if task.on_lost is OnLost.FAIL:
        return failed_outcome(claim, now, error, note=f"{note}; on_lost=fail")
    if task.lost_runs < task.max_lost and not task.cancel_requested:
        lost = task.lost_runs + 1
        delay = timedelta(seconds=retry_delay(lost, task.retry_backoff))
        then = Settlement(Status.PENDING, task.scheduled_at, now + delay, task.attempt - 1, task.triggered)
        text = f"{note}; run again (lost run {lost} of at most {task.max_lost} in a row)"
        return outcome_with(
            claim, ExecutionStatus.FAILED, then, now, error=error, note=text, counts=False, lost_runs=lost
        )
    if task.cancel_requested:
        text = f"{note}; not run again: a cancel was requested"
    else:
        text = f"{note}; counted as a failure ({task.lost_runs} lost runs in a row were run again)"
    outcome = outcome_of(claim, ExecutionStatus.FAILED, now, error=error, note=text)
    retrying = outcome.task_status is Status.PENDING and outcome.attempt != 0  # this slot again: a retry
    return dataclasses.replace(outcome, lost_runs=task.lost_runs if retrying else 0)
