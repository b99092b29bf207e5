"""Retention inside the node: old history deleted in small batches on the reconciler's
thread, at start-up and then every ``PRUNE_EVERY_S`` seconds.

Each batch is one ``Store.prune`` call (one short transaction of statements bounded by
``BATCH_ROWS``); a pass stops after ``PASS_BATCHES`` of them, when a batch finds less
than a full batch to delete, or when another node holds the store's prune lock (one
node prunes at a time; the others skip their turn). A pass that had to stop with more
left comes back at the next reconciler pass instead of a minute later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tickwork.model import PruneCounts
from tickwork.node.settings import NodeSettings
from tickwork.node.stats import NodeStats
from tickwork.store.base import Store

log = logging.getLogger("tickwork.reconciler")

PRUNE_EVERY_S = 30.0
"""At least once a minute, as the retention contract asks."""
BATCH_ROWS = 500
PASS_BATCHES = 10


class Pruner:
    def __init__(
        self, store: Store, settings: NodeSettings, stats: NodeStats, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store, self.settings, self.stats, self._clock = store, settings, stats, clock
        self._next = 0.0  # due at once: a node prunes at start-up

    def maybe_prune(self) -> PruneCounts:
        """One pass if one is due (never with ``retention=None``); what it deleted."""
        retention = self.settings.retention
        if retention is None or self._clock() < self._next:
            return PruneCounts()
        total, more = PruneCounts(), False
        try:
            for batch in range(PASS_BATCHES):
                counts = self.store.prune(self.store.now() - retention, self.settings.keep_last, BATCH_ROWS)
                total += counts
                if counts.busy or (counts.tasks < BATCH_ROWS and counts.executions < BATCH_ROWS):
                    break
                more = batch == PASS_BATCHES - 1
        except Exception:
            log.warning("prune pass failed; next try in %.0f s", PRUNE_EVERY_S, exc_info=True)
        self._next = self._clock() + (0.0 if more else PRUNE_EVERY_S)
        try:
            self._report(total)
        except Exception:  # a listener written before pruned() existed must not stop the thread
            log.warning("could not report pruned rows", exc_info=True)
        return total

    def _report(self, total: PruneCounts) -> None:
        if total.executions:
            self.stats.pruned("executions", total.executions)
        if total.tasks:
            self.stats.pruned("tasks", total.tasks)
        if total.rows:
            log.info("pruned %d executions and %d ended tasks", total.executions, total.tasks)
