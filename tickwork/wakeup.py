"""The poll loop's alarm, which also says what rang it.

A finished run frees a slot and wakes the poll loop, so that a node at full capacity
claims again at once. But a node whose last claim left slots idle took everything then
claimable and knows when its next task is due (``Claimer.sleep_for``'s due times):
waking for a freed slot must not make it ask the store again (``Pacer.wait`` in
tickwork/node/pacing.py sleeps on to that due time). Everything else that rings the alarm (work scheduled in this
process, a NOTIFY, runs recovered or given back, a result that leaves its task PENDING
again, a run whose end may release tasks a limit held back, a stop) may mean new due
times.
"""

from __future__ import annotations

import enum
import threading


class Rang(enum.Enum):
    """What ended a wait."""

    TIMEOUT = "timeout"
    """Nothing: the time ran out."""
    SLOT_FREED = "slot_freed"
    """Only freed slots: nothing new is due because of them."""
    NEWS = "news"
    """Something that may have changed what is due."""


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

    def wait(self, timeout: float) -> Rang:
        """Sleep until rung or ``timeout`` seconds pass, and say what rang since the last
        wait (the alarm is reset either way)."""
        rang = self._event.wait(timeout)
        with self._lock:
            self._event.clear()
            news, self._news = self._news, False
        if news:
            return Rang.NEWS
        return Rang.SLOT_FREED if rang else Rang.TIMEOUT
