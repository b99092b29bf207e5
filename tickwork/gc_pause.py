"""The cyclic garbage collector held off while a bulk call builds its objects.

``schedule_many`` makes several objects per item (the checked request, the new task, its
encoded row, the stored task) and no reference cycles: reference counting frees all of
it. Every 700 allocations, though, the collector runs, and every so often it walks the
whole heap (the caller's too: a list of 100,000 items is walked again and again). On
PostgreSQL that walking was a quarter of the call's CPU (bench/enqueue.py: 19.7 against
14.5 µs a task). The collector is held off for the call and runs again after it, at its
usual pace; cycles made meanwhile, by any thread, wait until then.

Nested and concurrent holders share one pause: the collector is enabled again when the
last leaves, and only if it was enabled when the first came in (a program that turned
it off before keeps it off).
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_holders = 0
_was_enabled = False


def _after_fork_in_child() -> None:
    """A child forked during a pause (by another thread) holds no pause: its collector
    runs as the parent's did before it."""
    global _holders, _was_enabled, _lock
    _lock = threading.Lock()
    if _holders and _was_enabled:
        gc.enable()
    _holders, _was_enabled = 0, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()
