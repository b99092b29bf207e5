"""Why a due task is not running: its queue is paused, or one of its limits is full.
What ``tasks show``, the API's task read and the dashboard's task page say."""

from __future__ import annotations

from tickwork.model import Status, Task
from tickwork.store.base import Store


def why_waiting(store: Store, task: Task) -> str | None:
    """The reasons a due PENDING ``task`` is held back, in one line (None: none)."""
    now = store.approximate_now()
    if task.status is not Status.PENDING or task.next_run_at > now:
        return None
    reasons = []
    if task.queue in store.paused_queues():
        reasons.append(f"queue {task.queue} is paused")
    if task.lock is not None or task.max_running is not None or task.rate_limit is not None:
        facts = store.limit_facts(task)
        if task.max_running is not None and facts.running is not None and facts.running >= task.max_running:
            reasons.append(f"max_running={task.max_running} reached ({facts.running} of {task.name} running)")
        if task.lock is not None and facts.lock_holder is not None:
            reasons.append(f"lock {task.lock!r} held by task {facts.lock_holder}")
        if task.rate_limit is not None and facts.rate_next is not None and facts.rate_next > now:
            reasons.append(f"rate limited ({task.rate_limit}): next start at {facts.rate_next.isoformat()}")
    return "; ".join(reasons) or None
