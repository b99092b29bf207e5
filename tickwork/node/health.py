"""What a node has seen of its store lately, for the reconciler's sake.

When the database was away (down, locked, unreachable), every node's leases ran out
together, the live ones' too: their nodes could not renew them any more than a dead
node could. The moment the database answers again, a reconciler that reaped at once
would declare lost the runs that finished during the outage while their owners' results
wait a retry pause to be written, and run them again. So after this node has seen the
store fail, its reconciler keeps off for a grace (a heartbeat and the recorder's retry
pause): live owners renew and write first, and what is still expired after that belongs
to nodes that are really gone. A node cut off alone sees no failure at its peers, whose
reconcilers go on as usual (its runs stopped themselves at 0.8 of the lease).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

SLOW_CALL_LEASES = 0.5
"""A store call that kept its caller waiting this many leases may have let leases lapse:
it counts as an outage (``StoreHealth.slow``), for claims, renewals and reaping alike."""


class StoreHealth:
    def __init__(self, grace: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self._clock = clock
        self._lock = threading.Lock()
        self._failing = False
        self._quiet_until = 0.0

    def failed(self) -> None:
        """A call to the store failed (or could not reach it)."""
        with self._lock:
            self._failing = True

    def answered(self) -> bool:
        """A call to the store succeeded; True when that ends a failing spell."""
        with self._lock:
            if not self._failing:
                return False
            self._failing = False
            self._quiet_until = self._clock() + self.grace
            return True

    def slow(self) -> None:
        """A call to the store succeeded after waiting longer than a node can afford (a
        lock held elsewhere, a stalled server): as an outage that just ended."""
        self.failed()
        self.answered()

    def quiet_for(self) -> float:
        """Seconds before the reconciler may reap again (0: now)."""
        with self._lock:
            if self._failing:
                return self.grace
            return max(0.0, self._quiet_until - self._clock())
