"""The queue's depth over time: every node samples it about twice a minute, and the
store keeps the first sample of each minute for the cluster (the dashboard's chart of
depth and oldest due age over the last hour). Sampling rides on the reconciler's
thread, after its pass: a slow or failed sample never delays a claim or a renewal."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tickwork.store.base import Store

log = logging.getLogger("tickwork.reconciler")

SAMPLE_EVERY_S = 30.0
"""Twice a minute per node, so that no minute goes without a sample."""


class QueueSampler:
    def __init__(self, store: Store, clock: Callable[[], float] = time.monotonic, every: float = SAMPLE_EVERY_S):
        self.store, self.clock, self.every = store, clock, every
        self._next = 0.0

    def maybe_sample(self) -> bool:
        """Sample if one is due; True if a sample was taken."""
        now = self.clock()
        if now < self._next:
            return False
        self._next = now + self.every
        try:
            self.store.sample_queue()
        except Exception:  # the chart misses a minute; the node carries on
            log.debug("queue sample failed", exc_info=True)
            return False
        return True
