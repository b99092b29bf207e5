"""A node's capacity: its slot threads, how far it claims ahead, and the runs it holds."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable

from tickwork.node.run import Run, RunState

log = logging.getLogger("tickwork.worker")


class Prefetch:
    """How many claims a node holds beyond its busy slots.

    Enough to keep the slots busy during one refill (the round trips that write results
    and claim more), at the rate runs are ending: ``concurrency * refill time / run time``,
    capped. Long runs give ~0, so a node never sits on work another node could start;
    very short runs give the cap, so a node is not bound by its round trips. With no runs
    observed yet it is 0: a node starting on a herd takes only its slots.

    The run time is the mean of the runs that ended lately, each refill halving the
    weight of those before it: all the runs between two refills count, each as much as
    the others. Run by run they did not: a claim decoding a batch holds the GIL for
    milliseconds, the few tiny runs it paused then took 5 ms or more, and read right
    after (at the next claim) they dragged the estimate down to a tenth of the cap; the
    node then claimed too little and ran dry before its next claim came back (W1: about
    one claim in three ran dry; steady exec/s +10 % once averaged). Weighed by their number,
    the first few runs of a node (slow: code run for the first time) do not hold its
    prefetch down once hundreds have followed.
    """

    DECAY = 0.5
    """What the runs before the last refill weigh, against the runs since, at each refill."""
    REFILL_SMOOTHING = 0.2
    """Weight of the last refill's time in the refill time."""

    def __init__(self, concurrency: int, cap: int) -> None:
        self.concurrency = concurrency
        self.cap = cap
        self.refill_s: float | None = None
        self._lock = threading.Lock()  # slot threads add runs while the poll loop reads them
        self._since_s, self._since = 0.0, 0  # the runs ended since the last refill
        self._before_s, self._before = 0.0, 0.0  # those before it, weighed

    def observe_run(self, seconds: float) -> None:
        with self._lock:
            self._since_s += seconds
            self._since += 1

    def observe_refill(self, seconds: float) -> None:
        """A refill took ``seconds``: the runs ended before it weigh less from now on. A
        refill with none ended changes no weight (they would otherwise dwindle to nothing)."""
        with self._lock:
            if self._since:
                self._before_s = self._before_s * self.DECAY + self._since_s
                self._before = self._before * self.DECAY + self._since
                self._since_s, self._since = 0.0, 0
        previous = self.refill_s
        self.refill_s = seconds if previous is None else previous + self.REFILL_SMOOTHING * (seconds - previous)

    @property
    def run_s(self) -> float | None:
        """The mean run time, each run weighed as above (None: no run ended yet). The runs
        since the last refill count as soon as they end: a few long ones after many short
        ones bring it down at once."""
        with self._lock:
            weight = self._before + self._since
            return None if weight == 0 else (self._before_s + self._since_s) / weight

    def extra(self) -> int:
        run_s = self.run_s
        if self.cap <= 0 or run_s is None or self.refill_s is None:
            return 0
        return min(self.cap, int(self.concurrency * self.refill_s / max(run_s, 1e-6)))


class RunThreads:
    """The node's slots: ``size`` threads taking runs from one queue, in order.

    Lighter than a ThreadPoolExecutor (no future per run): the node tracks its runs
    itself, and a run given back at shutdown is skipped when its turn comes.
    """

    def __init__(self, size: int, target: Callable[[Run], None]) -> None:
        self._queue: queue.SimpleQueue[Run | None] = queue.SimpleQueue()
        self._target = target
        self._size = 0
        self._started = 0
        self._lock = threading.Lock()
        self.resize(size)

    def submit(self, run: Run) -> None:
        self._queue.put(run)

    def resize(self, size: int) -> None:
        """Start threads, or let some end once they reach their turn in the queue (a run
        going on is never interrupted by a shrink)."""
        with self._lock:
            for _ in range(size - self._size):
                self._started += 1
                threading.Thread(target=self._main, name=f"tickwork-run-{self._started}", daemon=True).start()
            for _ in range(self._size - size):
                self._queue.put(None)
            self._size = size

    def shutdown(self) -> None:
        """Let the threads end once they reach the end of the queue."""
        self.resize(0)

    def _main(self) -> None:
        while (run := self._queue.get()) is not None:
            try:
                self._target(run)
            except BaseException:  # a slot must outlive a bug in one run's handling
                log.exception("slot thread: unexpected error handling execution %s", run.execution_id)


class RunTable:
    """The runs this node holds, by execution id: from the claim until the result is
    written (or the claim given back). Its size is what the node counts as busy.

    Keyed by execution id, not task id: a late write about an earlier run of a task must
    never remove a newer run of the same task. ``on_size`` hears every new size (the
    running gauge)."""

    def __init__(self, on_size: Callable[[int], None] = lambda size: None) -> None:
        self._runs: dict[int, Run] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._on_size = on_size

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)

    def add_all(self, runs: Iterable[Run]) -> None:
        with self._lock:
            for run in runs:
                self._runs[run.execution_id] = run
            self._on_size(len(self._runs))

    def forget(self, runs: Iterable[Run]) -> None:
        with self._changed:
            for run in runs:
                if self._runs.get(run.execution_id) is run:
                    del self._runs[run.execution_id]
            self._on_size(len(self._runs))
            self._changed.notify_all()

    def runs(self, where: Callable[[Run], bool] | None = None) -> list[Run]:
        """A snapshot, optionally filtered (read under the lock, used after it)."""
        with self._lock:
            return [r for r in self._runs.values() if where is None or where(r)]

    def execution_ids(self) -> set[int]:
        with self._lock:
            return set(self._runs)

    def task_ids(self) -> list[int]:
        with self._lock:
            return [run.task_id for run in self._runs.values()]

    def release_unstarted(self) -> list[Run]:
        """Mark every run still waiting for a slot RELEASED and return them; a slot
        thread that reaches one later skips it (see run.py for the race)."""
        with self._lock:
            queued = list(self._runs.values())
        return [run for run in queued if run.advance_from(RunState.QUEUED, RunState.RELEASED)]

    def wait_empty(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every run to be forgotten; True if they were."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._runs and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            return not self._runs
