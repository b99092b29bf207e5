"""The settings a node runs by, checked once (by the App) and handed to the node."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from tickwork.errors import InvalidInput

DEFAULT_CLAIM_AHEAD = 0.05
MAX_CLAIM_AHEAD = 1.0
"""A task claimed ahead is RUNNING, its lease running, before it starts: more than a
second would hold slots and hide due work from the other nodes for nothing."""


def checked_claim_ahead(value: float) -> float:
    """``claim_ahead`` as seconds, or InvalidInput naming it (App's check and the node's)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= MAX_CLAIM_AHEAD:
        raise InvalidInput("claim_ahead", value, f"must be a number of seconds from 0 to {MAX_CLAIM_AHEAD:g}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class NodeSettings:
    lease: float = 30.0
    """Seconds a claim or renewal holds a task; another node may take it over after."""
    heartbeat: float = 10.0
    """Seconds between lease renewals (shorter than the lease)."""
    poll_interval: float = 1.0
    """Longest sleep between claims when nothing wakes the node."""
    claim_ahead: float = DEFAULT_CLAIM_AHEAD
    """Seconds ahead of now a claim looks for plain one-time tasks: a node woken for one
    due time takes those due soon after it in the same claim and starts each at its due
    time (sparse work costs a claim per this much time, not one per due time); an idle
    node also holds a result up to this long (at most 50 ms) to write it with others.
    0: only due tasks are claimed, and every result is written at once."""
    shutdown_grace: float = 30.0
    """Seconds running runs get to finish at shutdown before they are interrupted."""
    max_payload: int = 64 * 1024
    """Largest JSON result, in bytes, that is stored."""
    retention: timedelta | None = timedelta(days=30)
    """How long ended history is kept (node/pruner.py); None keeps everything."""
    keep_last: int = 20
    """Executions of each recurring task kept whatever their age."""

    def __post_init__(self) -> None:
        checked_claim_ahead(self.claim_ahead)
        if not 0 < self.heartbeat < self.lease:
            raise InvalidInput(
                "heartbeat", self.heartbeat, f"must be positive and shorter than the lease ({self.lease})"
            )
