"""Writes ended runs to the store in batches, off the task threads.

Every run that ends within the same few milliseconds shares one transaction (one
``store.finish`` call), each outcome still fenced by its own version and lease owner.
A run keeps its slot, and its lease keeps being renewed, until its result is written:
a slow store delays new claims, never the fencing.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from tickwork.metrics import STALE_RESULTS
from tickwork.model import ErrorInfo
from tickwork.store.base import Outcome, Store

log = logging.getLogger("tickwork.recorder")

MAX_BATCH = 500
# How long a batch is retried while the store is unreachable before it is left to the
# reconciler (the leases expire, the runs are recorded lost and retried).
RETRY_FOR_S = 30.0

T = TypeVar("T")


class Recorder(Generic[T]):
    def __init__(
        self,
        store: Store,
        node_id: str,
        on_written: Callable[[list[tuple[T, Outcome, bool | None]]], None],
        *,
        linger: float = 0.0,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.on_written = on_written
        self.linger = linger
        """Seconds to wait for more results after the first: one commit then covers them all."""
        self.failure: BaseException | None = None
        self.write_s = 0.0
        """How long the last batch took to write (part of a slot's refill time)."""
        self.stale = 0
        self._queue: queue.SimpleQueue[tuple[T, Outcome] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name="tickwork-recorder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, item: T, outcome: Outcome) -> None:
        self._queue.put((item, outcome))

    def stop(self, timeout: float = RETRY_FOR_S + 5.0) -> None:
        """Write everything submitted so far, then end the thread."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _main(self) -> None:
        try:
            stopping = False
            while not stopping:
                first = self._queue.get()
                if first is None:
                    break
                batch = [first]
                linger_until = time.monotonic() + self.linger
                while len(batch) < MAX_BATCH:
                    try:
                        left = linger_until - time.monotonic()
                        more = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stopping = True
                        break
                    batch.append(more)
                self._write(batch)
        except BaseException as exc:  # supervised: the node stops when this thread dies
            self.failure = exc
            raise

    def _write(self, batch: list[tuple[T, Outcome]]) -> None:
        started = time.monotonic()
        deadline = started + RETRY_FOR_S
        applied = self._finish_with_retry([outcome for _, outcome in batch], deadline)
        self.write_s = time.monotonic() - started
        for (_, outcome), ok in zip(batch, applied, strict=True):
            if ok is False:
                self.stale += 1
                STALE_RESULTS.labels(write="result").inc()
                log.warning(
                    "task %s: stale result dropped: fence %s no longer holds the lease (0 rows changed)",
                    outcome.task_id,
                    outcome.fence,
                )
        self.on_written([(item, outcome, ok) for (item, outcome), ok in zip(batch, applied, strict=True)])

    def _finish_scrubbed(self, outcome: Outcome, exc: BaseException) -> bool | None:
        """An outcome the store refuses whatever the retries (a value it cannot hold):
        write the run's status without the details rather than lose it."""
        log.error("task %s: result refused by the store (%s); recording it without details", outcome.task_id, exc)
        error = ErrorInfo(outcome.error.type, "details could not be stored") if outcome.error else None
        scrubbed = dataclasses.replace(
            outcome, result=None, error=error, note=f"details could not be stored: {type(exc).__name__}"
        )
        try:
            return self.store.finish(self.node_id, [scrubbed])[0]
        except Exception:
            log.exception("task %s: could not record even the scrubbed result", outcome.task_id)
            return None

    def _finish_with_retry(self, outcomes: list[Outcome], deadline: float) -> list[bool | None]:
        """Per outcome: applied, stale, or None when it could not be written before the
        deadline (its lease then expires and the reconciler records the run as lost)."""
        delay = 0.05
        while True:
            try:
                return list(self.store.finish(self.node_id, outcomes))
            except Exception as exc:
                if len(outcomes) > 1:
                    # One bad outcome must not hold back the others: write them one by one,
                    # within the same deadline (an outage costs it once, not once per run).
                    return [self._finish_with_retry([o], deadline)[0] for o in outcomes]
                if not self.store.is_transient(exc):
                    return [self._finish_scrubbed(outcomes[0], exc)]
                if time.monotonic() > deadline:
                    log.exception("could not record the result of task %s", outcomes[0].task_id)
                    return [None]
                log.warning("recording a result failed; retrying", exc_info=True)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
