"""In-node autoscaling: grow the node's run slots toward a maximum while the queue is
getting old, shrink them back toward the minimum once the node has been idle a while.

Like Celery's ``--autoscale``, but driven by the age of the oldest due task rather than
by the number of messages: a deep queue of tasks due in the future is no reason to grow,
and a shallow one whose head keeps ageing is. Growing needs every slot busy as well, so a
node that merely claims slowly does not balloon.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tickwork.errors import InvalidInput


class Autoscaler:
    def __init__(
        self,
        minimum: int,
        maximum: int,
        *,
        scale_up_age: float = 5.0,
        scale_down_after: float = 30.0,
        step: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= minimum <= maximum:
            raise InvalidInput("concurrency", f"{minimum},{maximum}", "need 1 <= MIN <= MAX")
        self.minimum = minimum
        self.maximum = maximum
        self.scale_up_age = scale_up_age
        self.scale_down_after = scale_down_after
        self.step = step or max(1, (maximum - minimum) // 4)
        self._clock = clock
        self._idle_since: float | None = None

    def decide(self, slots: int, busy: int, oldest_age: float | None) -> int:
        """The slot count to have now, given the current one, how many runs the node
        holds, and the age of the oldest due unclaimed task (None: nothing is due)."""
        behind = oldest_age is not None and oldest_age >= self.scale_up_age
        if behind and busy >= slots:
            self._idle_since = None
            return min(self.maximum, slots + self.step)
        if behind or busy >= slots:
            self._idle_since = None
            return slots
        now = self._clock()
        if self._idle_since is None:
            self._idle_since = now
            return slots
        if now - self._idle_since < self.scale_down_after:
            return slots
        self._idle_since = now  # one step per idle period: back to MIN gradually
        return max(self.minimum, busy, slots - self.step)
