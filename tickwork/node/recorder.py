"""Writes ended runs to the store in batches, off the task threads.

Every run that ends within the same few milliseconds shares one transaction (one
``store.finish`` call), each outcome still fenced by its own version and lease owner.
On an idle node a batch may also wait a little for the runs that end soon after it
(``hold``: Pacer.result_hold), so that sparse runs cost one write for several.
A run keeps its slot, and its lease keeps being renewed, until its result is written:
a slow store delays new claims, never the fencing. A result the store cannot take for
now (it is away, read-only, or full) is kept and written again until it is taken or
found stale: a finished run is never declared lost for want of a write.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from tickwork.model import ErrorInfo
from tickwork.node.stats import NO_STATS, NodeStats
from tickwork.store.base import Outcome, Store

log = logging.getLogger("tickwork.recorder")

MAX_BATCH = 500
# Once the node is stopping, how long a batch is still retried while the store is away
# before it is left to the reconciler (the leases expire, the runs are recorded lost).
RETRY_FOR_S = 30.0
MAX_RETRY_PAUSE_S = 1.0

T = TypeVar("T")


class Recorder(Generic[T]):
    def __init__(
        self,
        store: Store,
        node_id: str,
        on_written: Callable[[list[tuple[T, Outcome, bool | None]]], None],
        stats: NodeStats = NO_STATS,
        hold: Callable[[list[tuple[T, Outcome]]], float] = lambda batch: 0.0,
        urgent: Callable[[T, Outcome], bool] = lambda item, outcome: True,
    ) -> None:
        self.store = store
        self.hold = hold
        """How long (s) a batch may wait for more results before it is written."""
        self.urgent = urgent
        """Whether a result that comes while a batch is held may end the hold: it wakes the
        recorder, which asks ``hold`` again. Others wait, unseen, for the hold to end
        (on a sparse node, a thread woken per result costs more than its write)."""
        self.stats = stats
        self.node_id = node_id
        self.on_written = on_written
        self.failure: BaseException | None = None
        self.write_s = 0.0
        """How long the last batch took to write (part of a slot's refill time)."""
        self._give_up_at: float | None = None  # set when stopping: retries are bounded then
        self._queue: queue.SimpleQueue[tuple[T, Outcome] | None] = queue.SimpleQueue()
        self._holding = False
        self._wake = threading.Event()  # a result that may end the hold came, or the node stops
        self._thread = threading.Thread(target=self._main, name="tickwork-recorder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, item: T, outcome: Outcome) -> None:
        self._queue.put((item, outcome))
        if self._holding and self.urgent(item, outcome):  # read after the put: see _held
            self._wake.set()

    def stop(self, timeout: float = RETRY_FOR_S + 5.0) -> None:
        """Write everything submitted so far, then end the thread."""
        self._give_up_at = time.monotonic() + RETRY_FOR_S
        self._queue.put(None)
        self._wake.set()
        self._thread.join(timeout)

    def _main(self) -> None:
        try:
            stopping = False
            while not stopping:
                first = self._queue.get()
                if first is None:
                    break
                batch = [first]  # and whatever else ended meanwhile: one commit covers them all
                stopping = self._drain(batch) or self._held(batch)
                self._write(batch)
        except BaseException as exc:  # supervised: the node stops when this thread dies
            self.failure = exc
            raise

    def _drain(self, batch: list[tuple[T, Outcome]]) -> bool:
        """Add to ``batch`` what the queue holds now; whether the node is stopping."""
        while len(batch) < MAX_BATCH:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                return False
            if more is None:
                return True
            batch.append(more)
        return False

    def _held(self, batch: list[tuple[T, Outcome]]) -> bool:
        """Wait while ``hold`` allows, then add what came meanwhile; whether the node is
        stopping. ``hold`` is asked again after each wake: by the hold's end, by a result
        ``urgent`` says may end it, or by the node stopping. A submit puts its result in
        the queue before it reads ``_holding``, and the wake is cleared before each
        drain: an urgent result is either drained now or wakes the next wait."""
        self._holding = True
        try:
            deadline = float("inf")
            while True:
                self._wake.clear()
                if self._drain(batch):
                    return True
                if len(batch) >= MAX_BATCH:
                    return False
                now = time.monotonic()
                deadline = min(deadline, now + self.hold(batch))
                if deadline <= now:
                    return False
                self._wake.wait(deadline - now)
        finally:
            self._holding = False

    def _write(self, batch: list[tuple[T, Outcome]]) -> None:
        started = time.monotonic()
        applied = self._finish_with_retry([outcome for _, outcome in batch])
        self.write_s = time.monotonic() - started
        for (_, outcome), ok in zip(batch, applied, strict=True):
            if ok is False:
                self.stats.stale_write("result")
                log.warning(
                    "task %s: stale result dropped: fence %s no longer holds the lease (0 rows changed)",
                    outcome.task_id,
                    outcome.fence,
                )
        self.on_written([(item, outcome, ok) for (item, outcome), ok in zip(batch, applied, strict=True)])

    def _finish_with_retry(self, outcomes: list[Outcome], *, scrubbed: bool = False) -> list[bool | None]:
        """Per outcome: applied, stale, or None when the node stopped before it could be
        written (its lease then expires and the reconciler records the run as lost).

        Errors that pass (the store away, read-only, full) are retried until the write
        is taken; an outcome the store refuses whatever the retries (a value it cannot
        hold) is written once more without its details rather than lost."""
        delay = 0.05
        failing_since: float | None = None
        while True:
            try:
                applied: list[bool | None] = list(self.store.finish(self.node_id, outcomes))
            except Exception as exc:
                if len(outcomes) > 1:
                    # One bad outcome must not hold back the others: write them one by one
                    # (after an outage, the first write succeeds and so do the rest).
                    return [self._finish_with_retry([o], scrubbed=scrubbed)[0] for o in outcomes]
                if not self.store.is_transient(exc):
                    if scrubbed:
                        log.exception("task %s: the store refuses even its result without details", outcomes[0].task_id)
                        return [None]
                    return self._finish_with_retry([_without_details(outcomes[0], exc)], scrubbed=True)
                if self._give_up_at is not None and time.monotonic() > self._give_up_at:
                    log.exception("could not record the result of task %s before stopping", outcomes[0].task_id)
                    return [None]
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.warning("recording a result failed; keeping it and retrying", exc_info=True)
                time.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_PAUSE_S)
                continue
            if failing_since is not None:
                log.warning("results recorded again after %.1f s", time.monotonic() - failing_since)
            return applied


def _without_details(outcome: Outcome, exc: BaseException) -> Outcome:
    """The outcome with its result and error text left out: the run's status still counts."""
    log.error("task %s: result refused by the store (%s); recording it without details", outcome.task_id, exc)
    error = ErrorInfo(outcome.error.type, "details could not be stored") if outcome.error else None
    return dataclasses.replace(
        outcome, result=None, error=error, note=f"details could not be stored: {type(exc).__name__}"
    )
