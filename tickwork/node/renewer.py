"""The node's heartbeat writes, on a thread of their own.

A lease is only as safe as the node's ability to notice that it cannot renew it. When
the database is cut off (a partition: packets held, the socket neither answers nor
fails), a renewal can wait far longer than a lease; if the thread that decides to stop
unrenewed runs were the one waiting, the runs would go on after their leases passed to
another node. So the monitor asks this thread to renew and never waits for it: it
judges each run by when its lease was last confirmed, whatever the renewal is doing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("tickwork.renewer")


class Renewer:
    """Runs ``beat`` when asked, one at a time; a request while one is going on is
    refused, and says for how long that one has been waiting."""

    def __init__(self, beat: Callable[[], None]) -> None:
        self._beat = beat
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._busy_since: float | None = None
        self._thread = threading.Thread(target=self._main, name="tickwork-renewer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self) -> float | None:
        """Start a beat now; or, if the last one has not returned, how many seconds ago
        it started (nothing new is started then: one stuck call is enough)."""
        with self._lock:
            if self._busy_since is not None:
                return time.monotonic() - self._busy_since
            self._busy_since = time.monotonic()
        self._wake.set()
        return None

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread once its current beat returns (a stuck one is left behind:
        the thread is a daemon, and what it writes is fenced)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def _main(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._beat()
            except Exception:
                log.exception("heartbeat failed")
            finally:
                with self._lock:
                    self._busy_since = None
