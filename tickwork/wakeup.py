"""The poll loop's alarm, which also says whether what rang it may be new work.

A finished run frees a slot and wakes the poll loop, so that a node at full capacity
claims again at once. But a node whose last claim left slots idle already knows when its
next task is due (``Claimer.sleep_for``'s due times): waking for a freed slot must not
make it ask the store again. Everything else that rings the alarm (work scheduled in
this process, a NOTIFY, runs recovered or given back, a result that leaves its task
PENDING again, a stop) may mean new due times.
"""

from __future__ import annotations

import threading


class Wakeup:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._news = False

    def set(self) -> None:
        """Wake the poll loop: what is due may have changed."""
        with self._lock:
            self._news = True
            self._event.set()

    def slot_freed(self) -> None:
        """Wake the poll loop: a slot is free; nothing new is due because of it."""
        self._event.set()

    def wait(self, timeout: float) -> bool:
        """Sleep until rung or ``timeout`` seconds pass; True when something other than a
        freed slot rang since the last wait (the alarm is reset either way)."""
        self._event.wait(timeout)
        with self._lock:
            self._event.clear()
            news, self._news = self._news, False
        return news
